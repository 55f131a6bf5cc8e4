//! What a deployed function refuses to start with (`App::lambda`), where koe-local
//! (`App::local`) starts: a memory store, which would lose every write with the container, a
//! dispatcher with no event bus to hand requested runs to, and a dispatcher without an APNs key
//! unless `PUSH_SENDER=log`. Functions that need none of these start.

use koe::App;
use koe::app::ports::Served;
use koe::calls::api::{CancelCall, ConfirmCall, CreateCall, GetCall};
use koe::chat::api::{Health, Info};
use koe::devices::api::PutDevice;
use koe::dispatch::api::Dispatch;
use koe::platform::config::Vars;

fn vars(pairs: &[(&str, &str)]) -> Vars {
    let mut all = vec![
        ("AGENT_API_KEYS", "wiring-test-key-0123"),
        ("OPENAI_API_KEY", "sk-wiring-test"),
    ];
    all.extend_from_slice(pairs);
    Vars::from_pairs(&all)
}

/// The variable a Lambda's start-up names, or None if it starts.
async fn lambda_refusal<E: Served>(pairs: &[(&str, &str)]) -> Option<&'static str> {
    App::lambda(vars(pairs))
        .service::<E>()
        .await
        .err()
        .map(|e| e.var)
}

async fn local_starts<E: Served>(pairs: &[(&str, &str)]) -> bool {
    App::local(vars(pairs)).service::<E>().await.is_ok()
}

#[tokio::test]
async fn a_lambda_that_stores_data_refuses_the_memory_store() {
    for store in [None, Some("memory")] {
        let pairs: Vec<(&str, &str)> = store.map(|s| ("STORE", s)).into_iter().collect();
        assert_eq!(lambda_refusal::<PutDevice>(&pairs).await, Some("STORE"));
        assert_eq!(lambda_refusal::<CreateCall>(&pairs).await, Some("STORE"));
        assert_eq!(lambda_refusal::<GetCall>(&pairs).await, Some("STORE"));
        assert_eq!(lambda_refusal::<CancelCall>(&pairs).await, Some("STORE"));
        assert_eq!(lambda_refusal::<ConfirmCall>(&pairs).await, Some("STORE"));
        assert!(
            local_starts::<CreateCall>(&pairs).await,
            "koe-local keeps memory"
        );
        // Functions without a store port start whatever STORE says.
        assert_eq!(lambda_refusal::<Health>(&pairs).await, None);
        assert_eq!(lambda_refusal::<Info>(&pairs).await, None);
    }
    // With DynamoDB they start (the client is built without network traffic).
    let dynamodb = [("STORE", "dynamodb"), ("AWS_REGION", "ap-northeast-1")];
    assert_eq!(lambda_refusal::<CreateCall>(&dynamodb).await, None);
}

#[tokio::test]
async fn the_lambda_dispatcher_needs_its_event_bus() {
    let dynamodb = [
        ("STORE", "dynamodb"),
        ("AWS_REGION", "ap-northeast-1"),
        ("PUSH_SENDER", "log"),
    ];
    assert_eq!(
        lambda_refusal::<Dispatch>(&dynamodb).await,
        Some("EVENT_BUS_NAME")
    );
    let with_bus = [
        ("STORE", "dynamodb"),
        ("AWS_REGION", "ap-northeast-1"),
        ("EVENT_BUS_NAME", "koe-test-bus"),
        ("PUSH_SENDER", "log"),
    ];
    assert_eq!(lambda_refusal::<Dispatch>(&with_bus).await, None);
    // koe-local hands requested runs to its own loop: no bus needed.
    assert!(local_starts::<Dispatch>(&[]).await);
}

/// A Lambda dispatcher without an APNs key would ring nobody: it refuses to start unless the
/// logging sender is asked for by name. koe-local logs pushes without being asked.
#[tokio::test]
async fn the_lambda_dispatcher_needs_apns_or_an_explicit_logging_sender() {
    let base = [
        ("STORE", "dynamodb"),
        ("AWS_REGION", "ap-northeast-1"),
        ("EVENT_BUS_NAME", "koe-test-bus"),
    ];
    assert_eq!(lambda_refusal::<Dispatch>(&base).await, Some("APNS_KEY_P8"));
    let mut apns_asked = base.to_vec();
    apns_asked.push(("PUSH_SENDER", "apns"));
    assert_eq!(
        lambda_refusal::<Dispatch>(&apns_asked).await,
        Some("APNS_KEY_P8")
    );
    let mut log = base.to_vec();
    log.push(("PUSH_SENDER", "log"));
    assert_eq!(lambda_refusal::<Dispatch>(&log).await, None);
    let mut typo = base.to_vec();
    typo.push(("PUSH_SENDER", "logs"));
    assert_eq!(lambda_refusal::<Dispatch>(&typo).await, Some("PUSH_SENDER"));
    let key = include_str!("../../../testkit/keys/apns-test.p8");
    let mut apns = base.to_vec();
    apns.extend([
        ("APNS_KEY_P8", key),
        ("APNS_KEY_ID", "ABCDE12345"),
        ("APNS_TEAM_ID", "TEAM123456"),
        ("APNS_BUNDLE_ID", "com.example.koe"),
    ]);
    assert_eq!(lambda_refusal::<Dispatch>(&apns).await, None);
    // Functions that send no push do not care.
    assert_eq!(lambda_refusal::<Health>(&base).await, None);
    assert!(local_starts::<Dispatch>(&[]).await);
}
