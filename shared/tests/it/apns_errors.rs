//! The APNs adapter's classification of a failed request (`koe::push::classify`) on the errors
//! a2's HTTP client really gives, made against a loopback HTTP/2 server that breaks the request
//! (`koe_testkit::push::broken`): only a request that surely did not reach APNs is retryable; one
//! APNs may have read is `MaybeDelivered`, which the dispatcher never sends again.

use koe::push::PushError;
use koe::push::classify::classify;
use koe_testkit::push::broken::{Break, a2_connect_error, a2_error};

fn classified(error: a2::Error) -> PushError {
    classify(Err(error)).expect_err("a failure")
}

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
    let (error, read) = a2_error(Break::RefuseStream).await;
    assert_eq!(read, 0, "the server did not read it");
    let class = classified(error);
    assert_retryable(&class);
    assert!(class.reason().contains("refused"), "{class:?}");
}

/// A stream reset, or the connection closed, after the server read the request.
#[tokio::test]
async fn a_request_broken_after_it_was_read_may_have_been_delivered() {
    for how in [Break::ResetAfterRead, Break::CloseAfterRead] {
        let (error, read) = a2_error(how).await;
        assert_eq!(read, 1, "{how:?}: the server read it");
        assert_maybe_delivered(&classified(error));
    }
}

#[tokio::test]
async fn an_error_status_whose_body_was_cut_off_is_retryable() {
    let (error, _) = a2_error(Break::CutErrorBody(500)).await;
    assert!(matches!(error, a2::Error::ConnectionError(_)), "{error:?}");
    let class = classified(error);
    assert_retryable(&class);
}

#[tokio::test]
async fn no_connection_means_nothing_was_sent() {
    let class = classified(a2_connect_error().await);
    assert_retryable(&class);
    for _ in 0..5 {
        let (error, read) = a2_error(Break::CloseBeforeHandshake).await;
        assert_eq!(read, 0);
        let class = classified(error);
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
        let (error, _) = a2_error(how).await;
        let class = classified(error);
        assert!(!class.reason().contains(&token), "{how:?}: {class:?}");
        assert!(
            class.reason().starts_with("client error ("),
            "{how:?}: {class:?}"
        );
    }
}
