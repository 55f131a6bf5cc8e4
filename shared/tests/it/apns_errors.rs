//! The APNs client's classification of a failed push (`koe::push::connection` and
//! `koe::push::classify`), through the client as production wires it (the push pool of
//! `koe::push::apns` connections) against a loopback HTTP/2 server that breaks the request or
//! answers as APNs refuses a push (`koe_testkit::push::broken`): only a request that surely did
//! not reach APNs is retryable; one APNs may have read is `MaybeDelivered`, which the dispatcher
//! never sends again; a dead token is `InvalidToken` (docs/reliability.md, "Push retries").

use koe::push::PushError;
use koe_testkit::push::broken::{Break, push_error, push_error_refused_connection};

/// Not sent: the dispatcher may try again.
fn assert_retryable(class: &PushError) {
    let retryable = matches!(class, PushError::Retryable { status: None, .. });
    assert!(retryable, "{class:?}");
}

/// APNs may have read it: never sent again.
fn assert_maybe_delivered(class: &PushError) {
    let maybe = matches!(class, PushError::MaybeDelivered { .. });
    assert!(maybe, "{class:?}");
}

#[tokio::test]
async fn a_stream_refused_before_processing_is_retryable() {
    let (class, read) = push_error(Break::RefuseStream).await;
    assert_eq!(read, 0, "the server did not read it");
    assert_retryable(&class);
    assert!(class.reason().contains("refused"), "{class:?}");
}

/// A stream reset, or the connection closed, after the server read the request.
#[tokio::test]
async fn a_request_broken_after_it_was_read_may_have_been_delivered() {
    for how in [Break::ResetAfterRead, Break::CloseAfterRead] {
        let (class, read) = push_error(how).await;
        assert_eq!(read, 1, "{how:?}: the server read it");
        assert_maybe_delivered(&class);
    }
}

#[tokio::test]
async fn an_error_status_whose_body_was_cut_off_is_retryable() {
    let (class, read) = push_error(Break::CutErrorBody(500)).await;
    assert_eq!(read, 1);
    assert!(
        class
            .reason()
            .contains("APNs answered 500, its body was cut off"),
        "{class:?}"
    );
    assert_retryable(&class);
}

#[tokio::test]
async fn no_connection_means_nothing_was_sent() {
    let class = push_error_refused_connection().await;
    assert_retryable(&class);
    assert!(class.reason().contains("could not connect"), "{class:?}");
    for _ in 0..5 {
        let (class, read) = push_error(Break::CloseBeforeHandshake).await;
        assert_eq!(read, 0);
        assert_retryable(&class);
    }
}

#[tokio::test]
async fn reasons_name_the_failure_not_the_token() {
    let token = "ab".repeat(32);
    for how in [
        Break::RefuseStream,
        Break::ResetAfterRead,
        Break::CloseAfterRead,
    ] {
        let (class, _) = push_error(how).await;
        assert!(!class.reason().contains(&token), "{how:?}: {class:?}");
        assert!(
            class
                .reason()
                .starts_with("the push's HTTP/2 stream failed: "),
            "{how:?}: {class:?}"
        );
    }
}

/// 400 `BadDeviceToken` and 410 `Unregistered`: the token is removed.
#[tokio::test]
async fn a_dead_token_answer_is_invalid_token() {
    for (status, reason) in [(400, "BadDeviceToken"), (410, "Unregistered"), (410, "")] {
        let (class, read) = push_error(Break::Answer(status, reason)).await;
        assert_eq!(read, 1);
        assert!(
            matches!(&class, PushError::InvalidToken { status: s, .. } if *s == status),
            "{status} {reason}: {class:?}"
        );
    }
}

/// 429 and 5xx: APNs refused the push; tried again within the second.
#[tokio::test]
async fn throttling_and_server_errors_are_retryable_with_their_status() {
    for (status, reason) in [
        (429, "TooManyRequests"),
        (429, "TooManyProviderTokenUpdates"),
        (500, "InternalServerError"),
        (503, "ServiceUnavailable"),
    ] {
        let (class, read) = push_error(Break::Answer(status, reason)).await;
        assert_eq!(read, 1);
        assert_eq!(
            class,
            PushError::Retryable {
                status: Some(status),
                reason: reason.into()
            }
        );
    }
}

/// Another 4xx will fail again, and is no reason to drop the token.
#[tokio::test]
async fn other_refusals_are_rejected() {
    for (status, reason) in [
        (400, "BadTopic"),
        (400, "PayloadTooLarge"),
        (403, "InvalidProviderToken"),
    ] {
        let (class, _) = push_error(Break::Answer(status, reason)).await;
        assert_eq!(
            class,
            PushError::Rejected {
                status: Some(status),
                reason: reason.into()
            }
        );
    }
}

/// The server read the push and never answered: it may have been delivered.
#[tokio::test]
async fn no_answer_in_time_may_have_been_delivered() {
    let (class, read) = push_error(Break::NoAnswer).await;
    assert_eq!(read, 1);
    assert_maybe_delivered(&class);
    assert!(class.reason().contains("no answer"), "{class:?}");
}
