//! Metrics as CloudWatch embedded metric format (EMF) log lines: no `PutMetricData` calls, no
//! extra IAM, no extra latency. CloudWatch Logs turns each line a function writes to stdout into
//! metrics; koe-local writes the same lines among its logs.
//!
//! [`Metrics`] is what every emitter holds: where lines go (a [`MetricsSink`]: stdout, a test's
//! [`MemorySink`], or nowhere) and the `Function` dimension's value. What is emitted, with its
//! namespace, unit and dimensions, is listed once in [`catalogue`]; a record naming anything
//! else fails in debug builds, and the template's dashboard and alarms are held against it.

use std::sync::{Arc, Mutex};

pub mod catalogue;
pub mod emf;

pub use emf::{Record, Unit};

/// Where EMF lines go.
pub trait MetricsSink: Send + Sync {
    fn write(&self, line: &str);
}

/// Standard output, as a Lambda's logs (and koe-local's) are.
pub struct StdoutSink;

impl MetricsSink for StdoutSink {
    fn write(&self, line: &str) {
        use std::io::Write;
        // One write of the whole line, so it is never interleaved with a log line.
        let _ = std::io::stdout()
            .lock()
            .write_all(format!("{line}\n").as_bytes());
    }
}

/// Keeps every line (tests, and benchmarks that read their own metrics).
#[derive(Clone, Default)]
pub struct MemorySink(Arc<Mutex<Vec<String>>>);

impl MemorySink {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl MetricsSink for MemorySink {
    fn write(&self, line: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line.to_owned());
    }
}

/// An emitter's handle: a sink (or none) and the function its records are dimensioned by.
#[derive(Clone)]
pub struct Metrics {
    sink: Option<Arc<dyn MetricsSink>>,
    function: Arc<str>,
}

impl Metrics {
    pub fn new(sink: Arc<dyn MetricsSink>, function: &str) -> Metrics {
        Metrics {
            sink: Some(sink),
            function: function.into(),
        }
    }

    /// Emits nothing (unit tests of code that holds a handle).
    pub fn off() -> Metrics {
        Metrics {
            sink: None,
            function: "".into(),
        }
    }

    /// The same sink for another function's records.
    pub fn for_function(&self, function: &str) -> Metrics {
        Metrics {
            sink: self.sink.clone(),
            function: function.into(),
        }
    }

    /// The `Function` dimension's value.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// Writes `record`'s lines.
    pub fn emit(&self, record: &Record) {
        if let Some(sink) = &self.sink {
            for line in record.lines() {
                sink.write(&line);
            }
        }
    }
}
