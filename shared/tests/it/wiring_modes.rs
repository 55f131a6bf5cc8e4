//! What a deployed function refuses to start with (`App::lambda`), where koe-local
//! (`App::local`) starts: a memory store, which would lose every write with the container, and a
//! dispatcher with no event bus to hand requested runs to. Functions that need neither start.

use koe::App;
use koe::config::Vars;
use koe::endpoints::{
    CancelCall, CreateCall, Dispatch, Endpoint, GetCall, Health, Info, PutDevice,
};

fn vars(pairs: &[(&str, &str)]) -> Vars {
    let mut all = vec![
        ("AGENT_API_KEYS", "wiring-test-key-0123"),
        ("OPENAI_API_KEY", "sk-wiring-test"),
    ];
    all.extend_from_slice(pairs);
    Vars::from_pairs(&all)
}

/// The variable a Lambda's start-up names, or None if it starts.
async fn lambda_refusal<E: Endpoint>(pairs: &[(&str, &str)]) -> Option<&'static str> {
    App::lambda(vars(pairs))
        .service::<E>()
        .await
        .err()
        .map(|e| e.var)
}

async fn local_starts<E: Endpoint>(pairs: &[(&str, &str)]) -> bool {
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
    let dynamodb = [("STORE", "dynamodb"), ("AWS_REGION", "ap-northeast-1")];
    assert_eq!(
        lambda_refusal::<Dispatch>(&dynamodb).await,
        Some("EVENT_BUS_NAME")
    );
    let with_bus = [
        ("STORE", "dynamodb"),
        ("AWS_REGION", "ap-northeast-1"),
        ("EVENT_BUS_NAME", "koe-test-bus"),
    ];
    assert_eq!(lambda_refusal::<Dispatch>(&with_bus).await, None);
    // koe-local hands requested runs to its own loop: no bus needed.
    assert!(local_starts::<Dispatch>(&[]).await);
}
