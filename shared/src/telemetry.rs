//! Logging: JSON lines through tracing, no ANSI. Set up once per process.
//!
//! Nothing personal goes into any field: handlers log route templates, status codes, error codes,
//! latencies and salted device hashes only.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

use crate::config::{LogConfig, Vars};

/// `RUST_LOG` as a list of `target=level` directives ("info", "info,koe=debug"); unset or not
/// understood: info. (A `Targets` filter rather than tracing-subscriber's `EnvFilter`, whose
/// span and field matchers need a regex engine in every binary.)
pub fn filter(config: &LogConfig) -> Targets {
    config
        .directives
        .as_deref()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO))
}

/// The filter the process environment asks for (logging starts before the rest of the
/// configuration is read, and whatever that says).
fn env_filter() -> Targets {
    filter(&LogConfig::from_vars(&Vars::from_env()))
}

/// The AWS SDK logs whole request and response bodies (device ids, VoIP tokens, caller names) at
/// debug and trace level: whatever the filter asks for, its crates log at info at most.
const AWS_SDK_CAPS: &[&str] = &[
    "aws_smithy",
    "aws_sdk",
    "aws_config",
    "aws_runtime",
    "aws_sigv4",
];

/// The JSON subscriber every process uses, writing to `writer` (stdout, or a test's buffer).
pub fn json_subscriber<W>(
    writer: W,
    filter: Targets,
    with_time: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = AWS_SDK_CAPS.iter().fold(filter, |filter, target| {
        filter.with_target(*target, LevelFilter::INFO)
    });
    let builder = tracing_subscriber::fmt()
        .json()
        .with_ansi(false)
        .with_target(false)
        // The innermost span's fields under `span`: every line logged while a request is
        // answered carries `span.request_id` (service.rs opens that span). No span holds
        // personal data: the log tests scan these fields too.
        .with_current_span(true)
        .with_span_list(false)
        .flatten_event(true)
        .with_writer(writer);
    if with_time {
        Box::new(builder.finish().with(filter))
    } else {
        Box::new(builder.without_time().finish().with(filter))
    }
}

/// For Lambda: CloudWatch stamps each line, so no time field.
pub fn init_lambda() {
    let _ = tracing::subscriber::set_global_default(json_subscriber(
        std::io::stdout,
        env_filter(),
        false,
    ));
}

/// For koe-local: lines carry their time.
pub fn init_local() {
    let _ = tracing::subscriber::set_global_default(json_subscriber(
        std::io::stdout,
        env_filter(),
        true,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_is_rust_log_or_info() {
        let filter = |directives: Option<&str>| {
            filter(&LogConfig {
                directives: directives.map(str::to_owned),
            })
        };
        let info = filter(None);
        assert!(info.would_enable("koe", &tracing::Level::INFO));
        assert!(!info.would_enable("koe", &tracing::Level::DEBUG));
        let debug = filter(Some("info,koe=debug"));
        assert!(debug.would_enable("koe", &tracing::Level::DEBUG));
        assert!(!debug.would_enable("other", &tracing::Level::DEBUG));
        let broken = filter(Some("koe=loud"));
        assert!(broken.would_enable("koe", &tracing::Level::INFO));
        assert!(!broken.would_enable("koe", &tracing::Level::DEBUG));
    }
}
