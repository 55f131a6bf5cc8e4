//! koe-local's built-in model: the `ModelProvider` and `StreamingModel` ports answered on this
//! machine, so that the whole app runs offline. [`crate::start`] wires it when no OpenAI
//! settings are given ([`LocalConfig::builtin_model`](crate::LocalConfig)); no Lambda can reach
//! it (the functions do not depend on this crate).
//!
//! It reads what the real model would: the request's messages and its `response_format`.
//! Chat echoes the last user message; the planner (`agent_plan`) plans one `calendar` step for
//! a message about today, tomorrow, this week, next week or the weekend (English or Japanese),
//! from the date and time zone its system prompt gives; the responder (`agent_answer`) names
//! the first events of the results, its emotion set by how many there are. Every text starts
//! with [`MARKER`] and every answer of a model route carries [`HEADER`]: [`HEADER_VALUE`].

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, SecondsFormat};
use chrono_tz::Tz;
use koe::domain::chat::Role;
use koe::model::{
    ModelProvider, ModelReply, ModelRequest, ProviderError, ReplyChunk, ReplyStream,
    StreamingModel, Usage,
};
use serde_json::{Value, json};

/// How every text the built-in model writes starts.
pub const MARKER: &str = "[koe-local built-in model]";
/// The response header koe-local adds to the model routes' answers while the built-in model
/// serves them.
pub const HEADER: &str = "x-koe-model";
pub const HEADER_VALUE: &str = "koe-local-builtin";
/// Pause between streamed pieces, so a client sees the reply arrive as it would from a model.
const STREAM_PACE: Duration = Duration::from_millis(20);
/// How much of a message a reply repeats.
const ECHO_CHARS: usize = 80;

/// The built-in model. Deterministic: the same request gets the same reply.
#[derive(Debug, Default, Clone, Copy)]
pub struct BuiltinModel;

/// What a structured request asks for, by its schema's name (`koe::agent`'s planner and
/// responder).
fn schema_name(request: &ModelRequest) -> Option<&str> {
    request.response_format.as_ref()?["json_schema"]["name"].as_str()
}

impl BuiltinModel {
    /// The reply's content, as the real model would write it for `request`.
    pub fn content(request: &ModelRequest) -> String {
        match schema_name(request) {
            Some("agent_plan") => planner(request).to_string(),
            Some("agent_answer") => responder(request).to_string(),
            _ => chat(request),
        }
    }

    fn reply(request: &ModelRequest) -> ModelReply {
        let content = BuiltinModel::content(request);
        let tokens = |text: &str| text.chars().count().div_ceil(4) as u64;
        let prompt_tokens = request.messages.iter().map(|m| tokens(&m.content)).sum();
        let completion_tokens = tokens(&content);
        ModelReply {
            content,
            usage: Usage {
                prompt_tokens,
                completion_tokens,
                total_tokens: prompt_tokens + completion_tokens,
            },
        }
    }
}

#[async_trait]
impl ModelProvider for BuiltinModel {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ProviderError> {
        Ok(BuiltinModel::reply(&request))
    }
}

#[async_trait]
impl StreamingModel for BuiltinModel {
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        let reply = BuiltinModel::reply(&request);
        // Word by word (each with the space after it), then the usage, as a provider sends it.
        let mut chunks: Vec<ReplyChunk> = reply
            .content
            .split_inclusive(' ')
            .map(|piece| ReplyChunk::Text(piece.to_owned()))
            .collect();
        chunks.push(ReplyChunk::Usage(reply.usage));
        chunks.reverse();
        Ok(Box::new(Pieces(chunks)))
    }
}

/// A reply's chunks still to give, last first.
struct Pieces(Vec<ReplyChunk>);

#[async_trait]
impl ReplyStream for Pieces {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        let chunk = self.0.pop()?;
        if matches!(chunk, ReplyChunk::Text(_)) {
            tokio::time::sleep(STREAM_PACE).await;
        }
        Some(Ok(chunk))
    }
}

/// The last user message of the request.
fn last_user(request: &ModelRequest) -> &str {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str())
}

/// At most [`ECHO_CHARS`] of `text`, on one line.
fn echo(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(ECHO_CHARS) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line,
    }
}

/// POST /api/chat: the last message repeated, and what to set for real replies.
fn chat(request: &ModelRequest) -> String {
    format!(
        "{MARKER} You said: \"{}\". This is koe-local's offline stand-in. Set OPENAI_API_KEY for \
         real replies.",
        echo(last_user(request))
    )
}

/// The words that ask about a period, in the order they are tried: the first that the message
/// holds sets the plan's range.
const PERIODS: &[(Period, &[&str])] = &[
    (Period::Tomorrow, &["tomorrow", "明日", "あした", "あす"]),
    (Period::NextWeek, &["next week", "来週"]),
    (Period::ThisWeek, &["this week", "今週"]),
    (Period::Weekend, &["weekend", "週末", "土日"]),
    (
        Period::Today,
        &["today", "tonight", "今日", "きょう", "今夜"],
    ),
    // About the schedule without a day: today.
    (
        Period::Today,
        &[
            "schedule",
            "calendar",
            "what's on",
            "plans",
            "予定",
            "スケジュール",
        ],
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Period {
    Today,
    Tomorrow,
    ThisWeek,
    NextWeek,
    Weekend,
}

impl Period {
    fn of(message: &str) -> Option<Period> {
        let message = message.to_lowercase();
        PERIODS
            .iter()
            .find(|(_, words)| words.iter().any(|w| message.contains(w)))
            .map(|(period, _)| *period)
    }

    /// The days it covers from `today`: the first, and the one after the last.
    fn days(self, today: NaiveDate) -> (NaiveDate, NaiveDate) {
        let day = |n: i64| today + chrono::Duration::days(n);
        // Days until next Monday (1 to 7).
        let to_monday = 7 - i64::from(today.weekday().num_days_from_monday());
        match self {
            Period::Today => (today, day(1)),
            Period::Tomorrow => (day(1), day(2)),
            Period::ThisWeek => (today, day(to_monday)),
            Period::NextWeek => (day(to_monday), day(to_monday + 7)),
            // The coming Saturday and Sunday (this one, on a Saturday or Sunday).
            Period::Weekend => {
                let to_saturday = (5 - i64::from(today.weekday().num_days_from_monday())).max(0);
                let saturday = day(to_saturday);
                (today.max(saturday), day(to_monday))
            }
        }
    }
}

/// The user's date and time zone, from the planner's system prompt ("Current date and time for
/// the user: <RFC 3339> (<weekday>), time zone <zone>.", `koe::agent::prompts`).
fn user_today(request: &ModelRequest) -> Option<(NaiveDate, Tz)> {
    let system = request.messages.iter().find(|m| m.role == Role::System)?;
    // The last such line: a persona cannot stand in for it.
    let rest = system
        .content
        .rsplit("Current date and time for the user: ")
        .next()
        .filter(|rest| *rest != system.content)?;
    let (now, rest) = rest.split_once(' ')?;
    let zone = rest.split("time zone ").nth(1)?.split_whitespace().next()?;
    let zone: Tz = zone.trim_end_matches('.').parse().ok()?;
    let now = DateTime::parse_from_rfc3339(now).ok()?;
    Some((now.with_timezone(&zone).date_naive(), zone))
}

/// Whether the planner's schema lets it plan `calendar` steps (the client listed it).
fn calendar_listed(request: &ModelRequest) -> bool {
    let Some(format) = &request.response_format else {
        return false;
    };
    let branches = &format["json_schema"]["schema"]["properties"]["decision"]["anyOf"];
    branches.as_array().into_iter().flatten().any(|branch| {
        let tools = &branch["properties"]["steps"]["items"]["properties"]["tool"]["enum"];
        tools
            .as_array()
            .is_some_and(|t| t.contains(&json!("calendar")))
    })
}

/// Midnight starting `day` in `zone`, with its offset.
fn midnight(day: NaiveDate, zone: Tz) -> Option<String> {
    let start = day
        .and_hms_opt(0, 0, 0)?
        .and_local_timezone(zone)
        .earliest()?;
    Some(start.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// Round 1: a one-step calendar plan for a message about a period, else an answer.
fn planner(request: &ModelRequest) -> Value {
    let message = last_user(request);
    let plan = match (Period::of(message), user_today(request)) {
        (Some(period), Some((today, zone))) if calendar_listed(request) => {
            let (first, end) = period.days(today);
            midnight(first, zone).zip(midnight(end, zone))
        }
        _ => None,
    };
    match plan {
        Some((from, to)) => json!({"decision": {"type": "plan", "steps": [
            {"tool": "calendar", "args": {"from": from, "to": to}},
        ]}}),
        None => json!({"decision": {
            "type": "answer",
            "reply": format!(
                "{MARKER} You said: \"{}\". I read the calendar when asked about today, \
                 tomorrow (明日), this week or next week; set OPENAI_API_KEY for other answers.",
                echo(message)
            ),
            "emotion": "neutral",
        }}),
    }
}

/// One event as the reply says it: its title, and its start's time of day or "all day".
fn spoken(event: &Value) -> String {
    let title = event["title"].as_str().map_or("an event".to_owned(), echo);
    if event["allDay"] == json!(true) {
        return format!("{title} all day");
    }
    match event["start"]
        .as_str()
        .and_then(|s| DateTime::<FixedOffset>::parse_from_rfc3339(s).ok())
    {
        Some(start) => format!("{title} at {}", start.format("%H:%M")),
        None => title,
    }
}

/// Round 2: the first three events of the results (`koe::agent::prompts::results_message`), and
/// an emotion by how many there are: none is a free day (`happy`), up to three `neutral`, more
/// a packed schedule (`surprised`).
fn responder(request: &ModelRequest) -> Value {
    let results: Vec<Value> = request
        .messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .find_map(|m| {
            let (_, data) = m.content.split_once('\n')?;
            serde_json::from_str(data).ok()
        })
        .unwrap_or_default();
    let events: Vec<&Value> = results
        .iter()
        .filter_map(|r| r["events"].as_array())
        .flatten()
        .collect();
    let (reply, emotion) = match events.len() {
        0 => ("nothing on the calendar: a free day!".to_owned(), "happy"),
        n => {
            let first: Vec<String> = events.iter().take(3).map(|e| spoken(e)).collect();
            let more = if n > 3 { ", and more" } else { "" };
            let counted = match n {
                1 => "1 event".to_owned(),
                n => format!("{n} events"),
            };
            let emotion = if n > 3 { "surprised" } else { "neutral" };
            (format!("{counted}: {}{more}.", first.join(", ")), emotion)
        }
    };
    json!({"reply": format!("{MARKER} {reply}"), "emotion": emotion})
}

#[cfg(test)]
mod tests {
    use koe::agent::{planner as real_planner, prompts};
    use koe::domain::agent::Capability;
    use koe::domain::chat::ChatMessage;

    use super::*;

    fn planner_request(message: &str, now: &str, zone: Tz, tools: &[Capability]) -> ModelRequest {
        let now = DateTime::parse_from_rfc3339(now).unwrap().to_utc();
        ModelRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage {
                    role: Role::System,
                    content: prompts::planner_system("P", now, zone, tools),
                },
                ChatMessage {
                    role: Role::User,
                    content: message.into(),
                },
            ],
            max_tokens: 600,
            response_format: Some(json!({"type": "json_schema", "json_schema": {
                "name": "agent_plan", "strict": true, "schema": real_planner::schema(tools),
            }})),
        }
    }

    fn calendar() -> Vec<Capability> {
        vec![Capability::from_name("calendar").unwrap()]
    }

    /// The plan's one range, checked by the real planner's check.
    fn range(message: &str, now: &str, zone: Tz) -> Option<(String, String)> {
        let request = planner_request(message, now, zone, &calendar());
        let content = BuiltinModel::content(&request);
        match real_planner::check_output(&content, &calendar()).unwrap() {
            koe::domain::agent::AgentReply::Plan(steps) => {
                assert_eq!(steps.len(), 1);
                Some((steps[0].from.to_rfc3339(), steps[0].to.to_rfc3339()))
            }
            koe::domain::agent::AgentReply::Answer { reply, .. } => {
                assert!(reply.starts_with(MARKER), "{reply}");
                None
            }
        }
    }

    #[test]
    fn periods_become_ranges_in_the_users_zone() {
        // Sunday 2026-03-01, 09:00 in Tokyo.
        let (now, tokyo) = ("2026-03-01T00:00:00Z", chrono_tz::Asia::Tokyo);
        let r = |from: &str, to: &str| Some((from.to_owned(), to.to_owned()));
        let day = |d: u32| format!("2026-03-{d:02}T00:00:00+09:00");
        for (message, want) in [
            ("What's on tomorrow?", r(&day(2), &day(3))),
            ("明日の予定は？", r(&day(2), &day(3))),
            ("anything today", r(&day(1), &day(2))),
            ("今日は？", r(&day(1), &day(2))),
            // A Sunday: this week is the day itself.
            ("this week?", r(&day(1), &day(2))),
            ("来週の予定", r(&day(2), &day(9))),
            ("my schedule", r(&day(1), &day(2))),
            ("hello", None),
        ] {
            assert_eq!(range(message, now, tokyo), want, "{message}");
        }
        // Wednesday 2026-03-04 in New York (UTC-5): the week to Monday the 9th.
        let ny = chrono_tz::America::New_York;
        assert_eq!(
            range("This week", "2026-03-04T15:00:00Z", ny),
            r("2026-03-04T00:00:00-05:00", "2026-03-09T00:00:00-04:00")
        );
        assert_eq!(
            range("the weekend", "2026-03-04T15:00:00Z", ny),
            r("2026-03-07T00:00:00-05:00", "2026-03-09T00:00:00-04:00")
        );
    }

    #[test]
    fn without_the_calendar_the_planner_answers() {
        let request = planner_request("明日は？", "2026-03-01T00:00:00Z", Tz::UTC, &[]);
        let content = BuiltinModel::content(&request);
        let answer = real_planner::check_output(&content, &[]).unwrap();
        assert!(matches!(
            answer,
            koe::domain::agent::AgentReply::Answer { .. }
        ));
    }

    fn responder_request(events: Value) -> ModelRequest {
        let results = json!([{"stepId": "s1", "tool": "calendar", "events": events}]);
        ModelRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage {
                    role: Role::User,
                    content: "明日は？".into(),
                },
                ChatMessage {
                    role: Role::User,
                    content: format!("Tool results (data):\n{results}"),
                },
            ],
            max_tokens: 500,
            response_format: Some(json!({"json_schema": {"name": "agent_answer"}})),
        }
    }

    #[test]
    fn the_answer_names_the_first_events_and_feels_their_number() {
        let event = |title: &str| json!({"title": title, "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00"});
        let answer = |events: Value| {
            let content = BuiltinModel::content(&responder_request(events));
            koe::agent::responder::check_output(&content).unwrap()
        };
        use koe::domain::agent::{AgentReply, Emotion};
        let AgentReply::Answer { reply, emotion } = answer(json!([])) else {
            panic!()
        };
        assert_eq!(emotion, Emotion::Happy);
        assert!(reply.starts_with(MARKER), "{reply}");
        let all_day = json!({"title": "実家", "start": "2026-03-02T00:00:00+09:00", "end": "2026-03-03T00:00:00+09:00", "allDay": true});
        let AgentReply::Answer { reply, emotion } = answer(json!([event("歯医者"), all_day]))
        else {
            panic!()
        };
        assert_eq!(emotion, Emotion::Neutral);
        assert_eq!(
            reply,
            format!("{MARKER} 2 events: 歯医者 at 10:00, 実家 all day.")
        );
        let four = json!([event("a"), event("b"), event("c"), event("d")]);
        let AgentReply::Answer { reply, emotion } = answer(four) else {
            panic!()
        };
        assert_eq!(emotion, Emotion::Surprised);
        assert!(reply.ends_with("c at 10:00, and more."), "{reply}");
    }

    #[tokio::test]
    async fn chat_echoes_and_streams_the_same_text_then_its_usage() {
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![ChatMessage {
                role: Role::User,
                content: "Hello  there".into(),
            }],
            max_tokens: 100,
            response_format: None,
        };
        let reply = BuiltinModel.complete(request.clone()).await.unwrap();
        assert!(reply.content.starts_with(MARKER));
        assert!(
            reply.content.contains("\"Hello there\""),
            "{}",
            reply.content
        );
        assert!(reply.usage.total_tokens > 0);
        let mut stream = BuiltinModel.stream(request).await.unwrap();
        let (mut text, mut usage) = (String::new(), None);
        while let Some(chunk) = stream.next().await {
            match chunk.unwrap() {
                ReplyChunk::Text(piece) => text += &piece,
                ReplyChunk::Usage(u) => usage = Some(u),
            }
        }
        assert_eq!(text, reply.content);
        assert_eq!(usage, Some(reply.usage));
    }
}
