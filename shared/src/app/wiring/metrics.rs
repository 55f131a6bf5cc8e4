//! Where an `App`'s metrics go and which function they are dimensioned by.

use std::sync::Arc;

use super::{App, Mode};
use crate::platform::config::{LambdaConfig, LogConfig, Vars};
use crate::platform::metrics::{Metrics, MetricsSink, StdoutSink};

/// Stdout (CloudWatch Logs reads a Lambda's; koe-local's are among its logs), or nothing
/// (`METRICS=off`).
pub(super) fn sink_for(vars: &Vars) -> Option<Arc<dyn MetricsSink>> {
    LogConfig::from_vars(vars)
        .metrics
        .then(|| Arc::new(StdoutSink) as Arc<dyn MetricsSink>)
}

/// The function koe-local's records outside a request are dimensioned by (its dispatch runs,
/// model calls); a request's carry its route's binary name, as its error notifications do.
pub const LOCAL_FUNCTION: &str = "koe-local";

impl App {
    /// Metrics into `sink` instead of stdout (tests, benchmarks).
    pub fn with_metrics(self, sink: Arc<dyn MetricsSink>) -> App {
        App {
            metrics_sink: Some(sink),
            ..self
        }
    }

    /// The process's metrics handle: dimensioned by the Lambda's function name, or
    /// [`LOCAL_FUNCTION`].
    pub(super) fn metrics_handle(&self) -> Metrics {
        let function = match self.mode {
            Mode::Lambda => LambdaConfig::from_vars(&self.vars).function_name,
            Mode::Local => None,
        }
        .unwrap_or_else(|| LOCAL_FUNCTION.to_owned());
        match &self.metrics_sink {
            Some(sink) => Metrics::new(sink.clone(), &function),
            None => Metrics::off(),
        }
    }
}
