//! DELETE /calls: cancels a scheduled call; too late once claimed or sent.

use koe::store::Outcome;
use koe_testkit::harness::error_body;

use super::{
    AT, app_at_now, app_with_a_call, claim, create, delete, ended_call, get, get_ok, stored,
};

#[tokio::test]
async fn delete_cancels_then_get_and_delete_are_404() {
    let (app, _clock, _created) = app_with_a_call("dev-1").await;

    let response = delete(&app, "dev-1").await;
    assert_eq!(response.status().as_u16(), 204);
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.is_empty(), "204 has no body: {bytes:?}");

    error_body(get(&app, "dev-1").await, 404, "NOT_FOUND").await;
    error_body(delete(&app, "dev-1").await, 404, "NOT_FOUND").await;
    assert!(stored(&app, "dev-1").await.is_none());

    // The slot is free again.
    let again = create(&app, "dev-1", AT).await;
    assert_eq!(again["status"], "scheduled");
}

#[tokio::test]
async fn delete_without_any_reservation_is_404() {
    let (app, _clock) = app_at_now().await;
    error_body(delete(&app, "dev-unknown").await, 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn delete_after_claim_is_409_too_late_and_the_reservation_stays() {
    let (app, _clock, created) = app_with_a_call("dev-1").await;
    claim(&app, "dev-1", &created).await;

    let response = delete(&app, "dev-1").await;
    let body = error_body(response, 409, "TOO_LATE").await;
    assert!(
        body["message"].as_str().unwrap().contains("claimed"),
        "{body}"
    );

    let current = get_ok(&app, "dev-1").await;
    assert_eq!(current["status"], "claimed");
    assert_eq!(current["callId"], created["callId"]);
    assert!(app.events.published().is_empty(), "a 409 is not notified");
}

#[tokio::test]
async fn delete_after_sent_is_409_too_late() {
    let (app, _clock) = app_at_now().await;
    ended_call(&app, "dev-1", Outcome::Sent).await;
    error_body(delete(&app, "dev-1").await, 409, "TOO_LATE").await;
    assert_eq!(get_ok(&app, "dev-1").await["status"], "sent");
}
