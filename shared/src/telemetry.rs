//! Logging: JSON lines through tracing, no ANSI. Set up once per process.
//!
//! Nothing personal goes into any field: handlers log route templates, status codes, error codes,
//! latencies and salted device hashes only.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The AWS SDK logs whole request and response bodies (device ids, VoIP tokens, caller names) at
/// debug and trace level: whatever the filter asks for, its crates log at info at most.
const AWS_SDK_CAPS: &[&str] = &[
    "aws_smithy=info",
    "aws_sdk=info",
    "aws_config=info",
    "aws_runtime=info",
    "aws_sigv4=info",
];

/// The JSON subscriber every process uses, writing to `writer` (stdout, or a test's buffer).
pub fn json_subscriber<W>(
    writer: W,
    filter: EnvFilter,
    with_time: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = AWS_SDK_CAPS.iter().fold(filter, |filter, cap| {
        filter.add_directive(cap.parse().expect("static directives parse"))
    });
    let builder = tracing_subscriber::fmt()
        .json()
        .with_ansi(false)
        .with_target(false)
        .with_current_span(false)
        .with_span_list(false)
        .flatten_event(true)
        .with_env_filter(filter)
        .with_writer(writer);
    if with_time {
        Box::new(builder.finish())
    } else {
        Box::new(builder.without_time().finish())
    }
}

/// For Lambda: CloudWatch stamps each line, so no time field.
pub fn init_lambda() {
    let _ =
        tracing::subscriber::set_global_default(json_subscriber(std::io::stdout, filter(), false));
}

/// For koe-local: lines carry their time.
pub fn init_local() {
    let _ =
        tracing::subscriber::set_global_default(json_subscriber(std::io::stdout, filter(), true));
}
