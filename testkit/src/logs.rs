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
}

/// Installs the capture as the process's global subscriber (once) and returns it. Everything at
/// trace level, our crates and dependencies alike, is captured.
pub fn capture() -> LogCapture {
    static CAPTURE: OnceLock<LogCapture> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let capture = LogCapture::default();
            let subscriber = koe::telemetry::json_subscriber(
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
