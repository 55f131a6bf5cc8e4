//! `LiveSecret` and `Secrets` against a stand-in source, on a clock the tests move.

use std::sync::atomic::AtomicU32;

use super::*;

/// A source whose values the test sets, counting reads.
#[derive(Default)]
struct Source {
    values: Mutex<HashMap<String, Result<String, SecretError>>>,
    reads: AtomicU32,
}

impl Source {
    fn set(&self, arn: &str, value: &str) {
        let mut values = self.values.lock().unwrap();
        values.insert(arn.to_owned(), Ok(value.to_owned()));
    }

    fn reads(&self) -> u32 {
        self.reads.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl SecretSource for Source {
    async fn read(&self, arn: &str) -> Result<String, SecretError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
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
    let source = Arc::new(Source::default());
    source.set("arn:keys", "k1");
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let vars = [("AGENT_API_KEYS_SECRET_ARN", "arn:keys")];
    let secrets = resolved(&source, &clock, &vars).await;
    let keys = secrets.live("AGENT_API_KEYS", &Vars::from_pairs(&vars));
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
    let source = Arc::new(Source::default());
    source.set("arn:openai", "sk-old");
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let vars = [("OPENAI_API_KEY_SECRET_ARN", "arn:openai")];
    let secrets = resolved(&source, &clock, &vars).await;
    let key = secrets.live("OPENAI_API_KEY", &Vars::from_pairs(&vars));
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
    let source = Arc::new(Source::default());
    source.set("arn:openai", NOT_SET);
    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let vars = [("OPENAI_API_KEY_SECRET_ARN", "arn:openai")];
    let secrets = resolved(&source, &clock, &vars).await;
    let key = secrets.live("OPENAI_API_KEY", &Vars::from_pairs(&vars));
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
