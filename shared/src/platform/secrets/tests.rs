//! `LiveSecret` and `Secrets` against a stand-in source, on a clock the tests move; reads that
//! never answer (paused tokio time, and the SDK against a silent stand-in on a real socket).

use std::sync::atomic::AtomicU32;

use super::*;

/// A source whose values the test sets, counting reads.
#[derive(Default)]
struct Source {
    values: Mutex<HashMap<String, Result<String, SecretError>>>,
    reads: AtomicU32,
    /// Reads never answer (a connection stuck across a Lambda freeze).
    hanging: AtomicBool,
}

impl Source {
    fn set(&self, arn: &str, value: &str) {
        let mut values = self.values.lock().unwrap();
        values.insert(arn.to_owned(), Ok(value.to_owned()));
    }

    fn reads(&self) -> u32 {
        self.reads.load(Ordering::SeqCst)
    }

    fn hang(&self, hanging: bool) {
        self.hanging.store(hanging, Ordering::SeqCst);
    }
}

#[async_trait]
impl SecretSource for Source {
    async fn read(&self, arn: &str) -> Result<String, SecretError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.hanging.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let values = self.values.lock().unwrap();
        values
            .get(arn)
            .cloned()
            .unwrap_or_else(|| Err(SecretError(format!("no secret {arn}"))))
    }
}

struct TestClock(Mutex<DateTime<Utc>>);

#[async_trait]
impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }

    async fn sleep_until(&self, _: DateTime<Utc>) {}
}

impl TestClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

async fn resolved(source: &Arc<Source>, clock: &Arc<TestClock>, vars: &[(&str, &str)]) -> Secrets {
    Secrets::resolve(&Vars::from_pairs(vars), source.clone(), clock.clone())
        .await
        .unwrap()
}

/// `name`, read at start from the secret `arn` (holding `value`) that `{name}_SECRET_ARN` names:
/// the source, the test's clock, and the live secret.
async fn live(
    name: &'static str,
    arn: &str,
    value: &str,
) -> (Arc<Source>, Arc<TestClock>, LiveSecret) {
    let source = Arc::new(Source::default());
    source.set(arn, value);
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let var = format!("{name}_SECRET_ARN");
    let vars = [(var.as_str(), arn)];
    let secret = resolved(&source, &clock, &vars)
        .await
        .live(name, &Vars::from_pairs(&vars));
    (source, clock, secret)
}

/// Lets spawned background reads finish.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn secrets_named_by_arn_are_read_at_start_and_laid_over_the_variables() {
    let source = Arc::new(Source::default());
    source.set("arn:openai", "sk-1");
    source.set("arn:salt", "s4lt");
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let vars = [
        ("OPENAI_API_KEY_SECRET_ARN", "arn:openai"),
        ("DEVICE_HASH_SALT_SECRET_ARN", "arn:salt"),
        ("AGENT_API_KEYS", "plain-local-key"),
        ("OTHER", "x"),
    ];
    let secrets = resolved(&source, &clock, &vars).await;
    assert_eq!(source.reads(), 2, "read once each, at start");
    let over = secrets.over(Vars::from_pairs(&vars));
    assert_eq!(over.get("OPENAI_API_KEY").as_deref(), Some("sk-1"));
    assert_eq!(over.get("DEVICE_HASH_SALT").as_deref(), Some("s4lt"));
    assert_eq!(
        over.get("AGENT_API_KEYS").as_deref(),
        Some("plain-local-key")
    );
    assert_eq!(over.get("OTHER").as_deref(), Some("x"));
    let fixed = secrets.live("AGENT_API_KEYS", &Vars::from_pairs(&vars));
    assert!(!fixed.refused().await, "a fixed value is never read again");
    assert_eq!(source.reads(), 2);
}

#[tokio::test]
async fn a_secret_that_cannot_be_read_stops_the_start_naming_its_variable() {
    let source = Arc::new(Source::default());
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let vars = Vars::from_pairs(&[("APNS_KEY_P8_SECRET_ARN", "arn:missing")]);
    let Err(err) = Secrets::resolve(&vars, source, clock).await else {
        panic!("a missing secret must stop the start-up");
    };
    assert_eq!(err.var, "APNS_KEY_P8_SECRET_ARN");
}

#[tokio::test]
async fn a_rotated_value_is_in_use_after_the_refresh_period() {
    let (source, clock, keys) = live("AGENT_API_KEYS", "arn:keys", "k1").await;
    source.set("arn:keys", "k1,k2");
    clock.advance(REFRESH_EVERY - Duration::seconds(1));
    assert_eq!(keys.current().as_ref().map(Secret::expose), Some("k1"));
    settle().await;
    assert_eq!(source.reads(), 1, "not read again before its time");
    clock.advance(Duration::seconds(1));
    assert_eq!(
        keys.current().as_ref().map(Secret::expose),
        Some("k1"),
        "the read runs behind"
    );
    settle().await;
    assert_eq!(source.reads(), 2);
    assert_eq!(keys.current().as_ref().map(Secret::expose), Some("k1,k2"));
}

#[tokio::test]
async fn a_refused_credential_reads_again_at_once_but_not_more_than_every_gap() {
    let (source, clock, key) = live("OPENAI_API_KEY", "arn:openai", "sk-old").await;
    source.set("arn:openai", "sk-new");
    assert!(key.refused().await, "changed");
    assert_eq!(key.current().as_ref().map(Secret::expose), Some("sk-new"));
    for _ in 0..100 {
        assert!(!key.refused().await);
    }
    assert_eq!(source.reads(), 2, "a flood of refusals is one read per gap");
    clock.advance(MIN_GAP);
    assert!(!key.refused().await, "read again, unchanged");
    assert_eq!(source.reads(), 3);
}

#[tokio::test]
async fn an_empty_secret_is_read_again_soon_so_a_value_set_after_deploy_is_picked_up() {
    let (source, clock, key) = live("OPENAI_API_KEY", "arn:openai", NOT_SET).await;
    assert_eq!(key.current(), None, "not set yet");
    source.set("arn:openai", "sk-set-later");
    clock.advance(MIN_GAP);
    assert_eq!(key.current(), None);
    settle().await;
    assert_eq!(
        key.current().as_ref().map(Secret::expose),
        Some("sk-set-later")
    );
}

/// `AGENT_API_KEYS` read from the source at start ("k1"), now "k1,k2" there; the stand-in
/// hangs. The source, the test's clock, and the live secret.
async fn keys_about_to_hang() -> (Arc<Source>, Arc<TestClock>, LiveSecret) {
    let (source, clock, keys) = live("AGENT_API_KEYS", "arn:keys", "k1").await;
    source.set("arn:keys", "k1,k2");
    source.hang(true);
    (source, clock, keys)
}

/// The stand-in answers again: once its gap has passed, the next forced read is made and gets
/// the new value.
async fn the_next_forced_read_succeeds(source: &Source, clock: &TestClock, keys: &LiveSecret) {
    source.hang(false);
    clock.advance(MIN_GAP);
    assert!(keys.refused().await, "the next forced read is made");
    assert_eq!(value(keys).as_deref(), Some("k1,k2"));
}

fn value(secret: &LiveSecret) -> Option<String> {
    secret.current().map(|s| s.expose().to_owned())
}

#[tokio::test(start_paused = true)]
async fn a_forced_read_that_never_answers_fails_within_its_timeout_and_the_next_one_succeeds() {
    let (source, clock, keys) = keys_about_to_hang().await;
    let started = tokio::time::Instant::now();
    let changed = tokio::time::timeout(READ_TIMEOUT * 4, keys.refused())
        .await
        .expect("a read with no answer gives up within its timeout");
    assert!(!changed);
    assert!(started.elapsed() >= READ_TIMEOUT && started.elapsed() < READ_TIMEOUT * 2);
    assert_eq!(
        value(&keys).as_deref(),
        Some("k1"),
        "the value in hand stays"
    );
    // The next forced read (its gap passed) is made, and this time answered.
    the_next_forced_read_succeeds(&source, &clock, &keys).await;
    assert_eq!(source.reads(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_background_read_stuck_across_a_freeze_does_not_block_later_reads() {
    let (source, clock, keys) = keys_about_to_hang().await;
    clock.advance(REFRESH_EVERY);
    assert_eq!(
        value(&keys).as_deref(),
        Some("k1"),
        "a refresh starts behind"
    );
    settle().await;
    assert_eq!(source.reads(), 2, "the refresh is in flight, unanswered");
    // The function is thawed: the stuck read runs out of time and gives its slot back.
    tokio::time::sleep(READ_TIMEOUT).await;
    settle().await;
    source.hang(false);
    assert!(keys.refused().await, "a forced read is made");
    assert_eq!(value(&keys).as_deref(), Some("k1,k2"));
}

#[tokio::test(start_paused = true)]
async fn a_forced_read_abandoned_half_way_leaves_the_next_one_possible() {
    let (source, clock, keys) = keys_about_to_hang().await;
    // The request went away mid-read: its future is dropped.
    let abandoned = tokio::time::timeout(READ_TIMEOUT / 10, keys.refused()).await;
    assert!(abandoned.is_err(), "still reading when dropped");
    the_next_forced_read_succeeds(&source, &clock, &keys).await;
}

#[tokio::test(start_paused = true)]
async fn a_start_read_that_never_answers_stops_the_start_within_its_timeout() {
    let source = Arc::new(Source::default());
    source.set("arn:salt", "s4lt");
    source.hang(true);
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let vars = Vars::from_pairs(&[("DEVICE_HASH_SALT_SECRET_ARN", "arn:salt")]);
    let started = tokio::time::Instant::now();
    let resolve = Secrets::resolve(&vars, source, clock);
    let Ok(Err(err)) = tokio::time::timeout(START_READ_TIMEOUT * 2, resolve).await else {
        panic!("a start read with no answer stops the start within its timeout");
    };
    assert_eq!(err.var, "DEVICE_HASH_SALT_SECRET_ARN");
    assert!(started.elapsed() >= START_READ_TIMEOUT && started.elapsed() < START_READ_TIMEOUT * 2);
}

/// Where [`stand_in_config`] points the SDK (one test uses it).
static STAND_IN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// An SDK configuration for the stand-in Secrets Manager at [`STAND_IN`].
fn stand_in_config()
-> std::pin::Pin<Box<dyn std::future::Future<Output = aws_config::SdkConfig> + Send>> {
    use aws_sdk_secretsmanager::config::{Credentials, Region, SharedCredentialsProvider};
    let endpoint = STAND_IN.get().expect("the stand-in is started").clone();
    Box::pin(async move {
        aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(Region::new("ap-northeast-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDSTANDIN",
                "stand-in",
                None,
                None,
                "stand-in",
            )))
            .http_client(crate::platform::aws_http::sdk_http_client())
            .endpoint_url(endpoint)
            .build()
    })
}

/// The SDK's `GetSecretValue` on a real socket, against a stand-in that takes the read and never
/// answers: the read fails within its deadline (a short one, real time), and the next forced
/// read, the stand-in answering again, gets the new value.
#[tokio::test]
async fn over_the_sdk_a_silent_secrets_manager_costs_one_timeout_not_every_later_read() {
    let stand_in = koe_testkit::secretsmanager::StandInSecretsManager::start().await;
    STAND_IN.set(stand_in.endpoint()).unwrap();
    let source: Arc<dyn SecretSource> =
        Arc::new(secretsmanager::SecretsManager::new(stand_in_config));
    stand_in.set("arn:keys", "k1,k2");
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let managed = Some(("arn:keys".to_owned(), source));
    let mut keys = LiveSecret::build("AGENT_API_KEYS", managed, Some("k1".into()), clock.clone());
    let timeout = StdDuration::from_secs(2);
    Arc::get_mut(&mut keys.0).unwrap().read_timeout = timeout;

    stand_in.hold_answers(true);
    // The stand-in holds its answer for good: a read not cut by its timeout never ends, so the
    // bound can be generous (how soon after the timeout is the paused-time tests' above).
    let changed = tokio::time::timeout(timeout * 3, keys.refused())
        .await
        .expect("a read with no answer gives up within its timeout");
    assert!(!changed);
    assert_eq!(stand_in.reads().len(), 1, "the read reached the stand-in");
    assert_eq!(value(&keys).as_deref(), Some("k1"));

    stand_in.hold_answers(false);
    clock.advance(MIN_GAP);
    assert!(
        keys.refused().await,
        "the next forced read is made and answered"
    );
    assert_eq!(value(&keys).as_deref(), Some("k1,k2"));
}
