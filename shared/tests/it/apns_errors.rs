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

#[tokio::test]
async fn a_stream_refused_before_processing_is_retryable() {
    let (error, read) = a2_error(Break::RefuseStream).await;
    assert_eq!(read, 0, "the server did not read it");
    let class = classified(error);
    assert!(
        matches!(class, PushError::Retryable { status: None, .. }),
        "{class:?}"
    );
    assert!(class.reason().contains("refused"), "{class:?}");
}

#[tokio::test]
async fn a_stream_reset_after_the_request_was_read_may_have_been_delivered() {
    let (error, read) = a2_error(Break::ResetAfterRead).await;
    assert_eq!(read, 1, "the server read it");
    let class = classified(error);
    assert!(
        matches!(class, PushError::MaybeDelivered { .. }),
        "{class:?}"
    );
}

#[tokio::test]
async fn a_connection_closed_after_the_request_was_read_may_have_been_delivered() {
    let (error, read) = a2_error(Break::CloseAfterRead).await;
    assert_eq!(read, 1, "the server read it");
    let class = classified(error);
    assert!(
        matches!(class, PushError::MaybeDelivered { .. }),
        "{class:?}"
    );
}

#[tokio::test]
async fn an_error_status_whose_body_was_cut_off_is_retryable() {
    let (error, _) = a2_error(Break::CutErrorBody(500)).await;
    assert!(matches!(error, a2::Error::ConnectionError(_)), "{error:?}");
    let class = classified(error);
    assert!(
        matches!(class, PushError::Retryable { status: None, .. }),
        "{class:?}"
    );
}

#[tokio::test]
async fn no_connection_means_nothing_was_sent() {
    let class = classified(a2_connect_error().await);
    assert!(
        matches!(class, PushError::Retryable { status: None, .. }),
        "{class:?}"
    );
    for _ in 0..5 {
        let (error, read) = a2_error(Break::CloseBeforeHandshake).await;
        assert_eq!(read, 0);
        let class = classified(error);
        assert!(
            matches!(class, PushError::Retryable { status: None, .. }),
            "{class:?}"
        );
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
