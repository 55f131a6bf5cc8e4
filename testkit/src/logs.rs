//! Captures every log line of the test process (the production JSON format, at trace level),
//! so a test can scan for personal data that must never appear.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
}

pub struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = CaptureWriter;

    fn make_writer(&'a self) -> Self::Writer {
        CaptureWriter(self.buffer.clone())
    }
}

impl LogCapture {
    /// Everything logged so far, one JSON object per line.
    pub fn contents(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }

    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.contents()
            .lines()
            .map(|l| serde_json::from_str(l).expect("every log line is JSON"))
            .collect()
    }

    /// Fails, quoting the lines, if any captured line contains one of `sentinels`.
    pub fn assert_none_of<S: AsRef<str>>(&self, sentinels: impl IntoIterator<Item = S>) {
        let contents = self.contents();
        for sentinel in sentinels {
            let sentinel = sentinel.as_ref();
            let leaks: Vec<&str> = contents.lines().filter(|l| l.contains(sentinel)).collect();
            assert!(
                leaks.is_empty(),
                "{sentinel} reached the logs in {} line(s):\n{}",
                leaks.len(),
                leaks.join("\n")
            );
        }
    }

    /// Some captured line has every `(field, value)` pair (top-level fields of the JSON line).
    pub fn has_line(&self, fields: &[(&str, serde_json::Value)]) -> bool {
        self.lines()
            .iter()
            .any(|line| fields.iter().all(|(k, v)| &line[*k] == v))
    }

    /// Fails, showing what was captured, unless some line has every `(field, value)` pair:
    /// the positive control that proves the capture sees `what` (say "the probe line").
    pub fn assert_line(&self, what: &str, fields: &[(&str, serde_json::Value)]) {
        assert!(
            self.has_line(fields),
            "{what} was captured ({fields:?}); {}",
            self.summary()
        );
    }

    /// Fails unless the access log holds a `status` answer on `route` with the error `code`.
    pub fn assert_refusal_logged(&self, route: &str, status: u16, code: &str) {
        self.assert_line(
            &format!("the access log line of the {status} {code} on {route}"),
            &[
                ("route", route.into()),
                ("status", status.into()),
                ("code", code.into()),
            ],
        );
    }

    /// How many lines were captured and the last ones: what a failed positive control shows.
    pub fn summary(&self) -> String {
        let contents = self.contents();
        let lines: Vec<&str> = contents.lines().collect();
        format!(
            "{} captured line(s), last ones:\n{}",
            lines.len(),
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }
}

/// Installs the capture as the process's global subscriber (once) and returns it. Everything at
/// trace level, our crates and dependencies alike, is captured.
pub fn capture() -> LogCapture {
    static CAPTURE: OnceLock<LogCapture> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let capture = LogCapture::default();
            let subscriber = koe::platform::telemetry::json_subscriber(
                capture.clone(),
                tracing_subscriber::filter::Targets::new()
                    .with_default(tracing::level_filters::LevelFilter::TRACE),
                true,
            );
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            capture
        })
        .clone()
}
