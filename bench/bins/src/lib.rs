//! What the benchmark binaries share: percentiles, the calls they seed, fresh DynamoDB Local
//! tables and free loopback addresses.

use chrono::{DateTime, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{CallId, Reservation, ScheduledAt};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;

/// The `p`th percentile (0 to 100) of `sorted`, the sample at rank (n − 1) · p / 100 rounded up;
/// NaN when there is no sample.
pub fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) * p).div_ceil(100)]
}

/// Benchmark call `i`: its device (`d0000007`, a token from `i`, `confirms_calls` as given) put
/// in `store`, and its reservation (callId from `i`, due `at`) created there, made at `made`.
pub async fn seed_call(
    store: &MemoryStore,
    i: usize,
    at: DateTime<Utc>,
    made: DateTime<Utc>,
    confirms_calls: bool,
) -> Reservation {
    let device = Device {
        device_id: DeviceId::parse("deviceId", &format!("d{i:07}")).unwrap(),
        voip_token: VoipToken::parse("voipToken", &format!("{i:064x}")).unwrap(),
        environment: PushEnvironment::Production,
        updated_at: made,
        confirms_calls,
        alert_token: None,
    };
    store.put_device(&device).await.unwrap();
    let mut r = Reservation::new(
        device.device_id,
        ScheduledAt::from_stored(at.fixed_offset()),
        Some("Mika".into()),
        made,
    );
    // Like a generated id, random-looking (the count's estimate picks its raisers by the id's
    // hash, whose top bits sequential ids barely move), yet the same in every process.
    let mixed = |x: u64| {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let i64 = i as u64;
    r.call_id = CallId::from_stored(format!("{:016x}{:016x}", mixed(i64), mixed(!i64)));
    store
        .create_reservation(&r, made, made - chrono::Duration::minutes(5))
        .await
        .unwrap();
    r
}

/// The command line's `--flag value` pairs, in order; the error names a flag without its value.
pub fn flag_pairs() -> Result<Vec<(String, String)>, String> {
    let mut args = std::env::args().skip(1);
    let mut pairs = Vec::new();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        pairs.push((flag, value));
    }
    Ok(pairs)
}

/// The parsed options; or `None` once the error (and `usage`, when there is one) is printed,
/// for the binary to exit with 2.
pub fn parsed<T>(options: Result<T, String>, name: &str, usage: Option<&str>) -> Option<T> {
    match options {
        Ok(options) => Some(options),
        Err(e) => {
            match usage {
                Some(usage) => eprintln!("{name}: {e}\nusage: {usage}"),
                None => eprintln!("{name}: {e}"),
            }
            None
        }
    }
}

/// Fresh tables (named from `prefix` and a random part) on the DynamoDB Local that
/// `KOE_TEST_DYNAMODB_ENDPOINT` names, or one testkit starts: its endpoint and their names.
pub async fn fresh_tables(prefix: &str) -> (String, koe::store::TableNames) {
    let upstream = tokio::task::spawn_blocking(koe_testkit::dynamodb::endpoint)
        .await
        .expect("DynamoDB Local's endpoint");
    let setup = aws_sdk_dynamodb::Client::from_conf(
        koe_testkit::dynamodb::config_builder(&upstream).build(),
    );
    let prefix = format!("{prefix}-{}", koe_testkit::dynamodb::random_prefix());
    let tables = koe_testkit::dynamodb::create_tables(&setup, &prefix).await;
    (upstream, tables)
}

/// A loopback address nothing listens on now (for a process the bench starts).
pub fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    listener.local_addr().expect("its address").to_string()
}

/// Whether `GET http://{addr}/health` answered within 30 s (a koe-local the bench started).
pub async fn started(http: &reqwest::Client, addr: &str) -> bool {
    let since = std::time::Instant::now();
    while http
        .get(format!("http://{addr}/health"))
        .send()
        .await
        .is_err()
    {
        if since.elapsed() > std::time::Duration::from_secs(30) {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    true
}
