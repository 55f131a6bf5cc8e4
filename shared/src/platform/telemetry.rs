//! Logging: JSON lines through tracing, no ANSI. Set up once per process.
//!
//! Nothing personal goes into any field: handlers log route templates, status codes, error codes,
//! latencies and salted device hashes only.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

use crate::platform::config::{LogConfig, Vars};

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

/// Crates whose debug and trace lines can carry personal data: the AWS SDK logs whole request
/// and response bodies (device ids, VoIP tokens, caller names); the Lambda runtime and
/// lambda_http the invocation's event and response (bodies, the API key header); hyper, h2,
/// reqwest, and rustls under our APNs client, headers and frames (the OpenAI key, APNs device
/// tokens and provider tokens). Whatever
/// `RUST_LOG` asks for, they log at info at most.
pub const CAPPED_AT_INFO: &[&str] = &[
    "aws_smithy",
    "aws_sdk",
    "aws_config",
    "aws_runtime",
    "aws_sigv4",
    "lambda_runtime",
    "lambda_runtime_api_client",
    "lambda_http",
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "rustls",
    "tower",
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
    let filter = CAPPED_AT_INFO.iter().fold(filter, |filter, target| {
        filter.with_target(*target, LevelFilter::INFO)
    });
    let builder = tracing_subscriber::fmt()
        // The fmt builder's own ceiling is info unless told otherwise, which silently made
        // every `RUST_LOG` above info (e.g. "info,koe=debug") log nothing more: `filter` decides.
        .with_max_level(LevelFilter::TRACE)
        .json()
        .with_ansi(false)
        .with_target(false)
        // The innermost span's fields under `span`: every line logged while a request is
        // answered carries `span.request_id` (edge/mod.rs opens that span). No span holds
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

/// Replaces the default panic hook, which prints the panic's message (it may quote the data
/// that caused it: a body, a token) to stderr, with one JSON error line holding only where it
/// happened. The panic still unwinds: `koe::app::edge` answers that request 500.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(
            location,
            "panic (its message is not logged: it may quote input)"
        );
    }));
}

/// For Lambda: CloudWatch stamps each line, so no time field.
pub fn init_lambda() {
    init(false);
}

/// For koe-local: lines carry their time.
pub fn init_local() {
    init(true);
}

fn init(with_time: bool) {
    install_panic_hook();
    let subscriber = json_subscriber(std::io::stdout, env_filter(), with_time);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_is_rust_log_or_info() {
        let filter = |directives: Option<&str>| {
            filter(&LogConfig {
                directives: directives.map(str::to_owned),
                ..LogConfig::default()
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

    /// A buffer the subscriber writes into.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// At `RUST_LOG=trace` our crate logs everything, and the crates that would write bodies,
    /// headers and frames (events under module targets as theirs are) nothing below info.
    #[test]
    fn dependencies_that_log_bodies_stay_at_info_even_at_trace() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = json_subscriber(
            move || writer.clone(),
            filter(&LogConfig {
                directives: Some("trace".into()),
                ..LogConfig::default()
            }),
            false,
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::trace!(target: "koe::dispatch", "ours at trace");
            tracing::debug!(target: "koe::push::connection", "our APNs client at debug");
            tracing::info!(target: "h2::proto::streams", "theirs at info");
            tracing::trace!(target: "lambda_runtime::layers::api_client", "SENTINEL-LEAK payload");
            tracing::debug!(target: "lambda_http::request", "SENTINEL-LEAK body");
            tracing::trace!(target: "hyper::proto::h1::decode", "SENTINEL-LEAK header");
            tracing::trace!(target: "h2::codec::framed_write", "SENTINEL-LEAK frame");
            tracing::debug!(target: "reqwest::connect", "SENTINEL-LEAK key");
            tracing::trace!(target: "rustls::conn", "SENTINEL-LEAK record");
            tracing::debug!(target: "rustls::client::hs", "SENTINEL-LEAK handshake");
            tracing::debug!(target: "aws_smithy_runtime::client", "SENTINEL-LEAK item");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("ours at trace"), "{text}");
        assert!(text.contains("our APNs client at debug"), "{text}");
        assert!(text.contains("theirs at info"), "{text}");
        assert!(!text.contains("SENTINEL-LEAK"), "{text}");
    }
}
