//! Cutting a reply into sentences as it is written, for speech: a voice client can start
//! speaking the first sentence while the model writes the rest.
//!
//! A sentence ends at `。！？` (and their ASCII-width forms `!?` and `.`), or at a line break.
//! Closing quotes and brackets right after the mark belong to the sentence (`「はい。」`).
//! An ASCII `.`, `!` or `?` ends a sentence only when whitespace follows, so `3.14`, `e.g.x` and
//! `v1.2` stay whole; the full-width marks and line breaks end one at once. Each sentence is
//! given trimmed of surrounding whitespace; blank ones are skipped.

/// Marks that end a sentence whatever follows.
const HARD_ENDS: &[char] = &['。', '！', '？', '\n', '｡'];
/// Marks that end a sentence when whitespace (or the end of the reply) follows.
const SOFT_ENDS: &[char] = &['.', '!', '?', '…'];
/// Closers that stay with the sentence before them.
const CLOSERS: &[char] = &[
    '」', '』', '）', ')', '"', '\'', '”', '’', '】', '〉', '》', ']', '｣',
];

#[derive(Debug, Default)]
pub struct SentenceCutter {
    pending: String,
}

impl SentenceCutter {
    pub fn new() -> SentenceCutter {
        SentenceCutter::default()
    }

    /// Takes the next piece of text; gives the sentences it completed.
    pub fn push(&mut self, text: &str) -> Vec<String> {
        self.pending.push_str(text);
        let mut sentences = Vec::new();
        while let Some(end) = self.sentence_end() {
            let rest = self.pending.split_off(end);
            let sentence = std::mem::replace(&mut self.pending, rest);
            push_trimmed(&mut sentences, &sentence);
        }
        sentences
    }

    /// The reply is complete: what is left is the last sentence (if not blank).
    pub fn finish(&mut self) -> Option<String> {
        let mut last = Vec::new();
        push_trimmed(&mut last, &std::mem::take(&mut self.pending));
        last.pop()
    }

    /// Where the first complete sentence of `pending` ends (a byte offset), if it is known yet:
    /// a mark and its closers must be followed by something, so that a closer or (after an
    /// ASCII mark) whitespace can still arrive.
    fn sentence_end(&self) -> Option<usize> {
        let text = &self.pending;
        let mut chars = text.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            let hard = HARD_ENDS.contains(&c);
            if !hard && !SOFT_ENDS.contains(&c) {
                continue;
            }
            // The run of marks and closers after the first mark (`?!`, `。」`, `...`).
            let mut end = None;
            while let Some(&(at, next)) = chars.peek() {
                if HARD_ENDS.contains(&next) && next != '\n'
                    || SOFT_ENDS.contains(&next)
                    || CLOSERS.contains(&next)
                {
                    chars.next();
                } else {
                    end = Some((at, next));
                    break;
                }
            }
            let (at, next) = end?; // undecided until more text arrives
            if c == '\n' || hard || next.is_whitespace() {
                return Some(at);
            }
        }
        None
    }
}

fn push_trimmed(sentences: &mut Vec<String>, text: &str) {
    let text = text.trim();
    if !text.is_empty() {
        sentences.push(text.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` one by one; gives every sentence, with the last one from `finish`.
    fn cut(pieces: &[&str]) -> Vec<String> {
        let mut cutter = SentenceCutter::new();
        let mut all: Vec<String> = pieces.iter().flat_map(|p| cutter.push(p)).collect();
        all.extend(cutter.finish());
        all
    }

    #[test]
    fn english_sentences_end_at_marks_followed_by_space() {
        assert_eq!(
            cut(&["Hello", " there. How", " are you? I am", " fine!"]),
            ["Hello there.", "How are you?", "I am fine!"]
        );
        assert_eq!(cut(&["Pi is 3.14 today. Ok"]), ["Pi is 3.14 today.", "Ok"]);
        assert_eq!(cut(&["Wait... what?! No."]), ["Wait...", "what?!", "No."]);
    }

    #[test]
    fn japanese_sentences_end_at_full_width_marks_and_keep_their_closers() {
        assert_eq!(
            cut(&[
                "こんにちは",
                "。今日は",
                "晴れです！",
                "「本当？」と",
                "聞いた。"
            ]),
            [
                "こんにちは。",
                "今日は晴れです！",
                "「本当？」",
                "と聞いた。"
            ]
        );
        assert_eq!(
            cut(&["彼は「はい。」", "と言った"]),
            ["彼は「はい。」", "と言った"]
        );
    }

    #[test]
    fn line_breaks_end_sentences_and_blank_ones_are_skipped() {
        assert_eq!(
            cut(&["- one\n", "\n- two\n\n", "three"]),
            ["- one", "- two", "three"]
        );
    }

    #[test]
    fn a_sentence_is_given_as_soon_as_what_follows_its_mark_is_known() {
        let mut cutter = SentenceCutter::new();
        assert!(
            cutter.push("はい。").is_empty(),
            "a closer may still follow"
        );
        assert_eq!(cutter.push("次"), ["はい。"]);
        assert!(cutter.push("です.").is_empty());
        assert_eq!(cutter.push(" "), ["次です."]);
        assert_eq!(cutter.finish(), None);
    }
}
