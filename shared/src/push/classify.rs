//! APNs's answer to one push, or how its HTTP/2 stream failed, as a [`PushError`] class, above
//! all whether a failed request can have reached APNs: only one that surely did not is sent again
//! (docs/reliability.md, "Push retries"). Our client ([`connection`](super::connection)) knows
//! where the request stood: an error before it was handed to a connection is its own (nothing
//! was sent); after that, the stream's error or APNs's answer is classified here.
//! `koe_testkit::push::broken` breaks requests in each way against that client.

use super::PushError;

/// APNs's answer to our client: its status and its body, `{"reason": "..."}`. Classified by the
/// status code first, so a 410 without a reason (or with one we do not know) is still a dead
/// token.
pub fn classify_answer(status: u16, body: &[u8]) -> Result<(), PushError> {
    #[derive(serde::Deserialize)]
    struct Body {
        reason: String,
    }
    if status == 200 {
        return Ok(());
    }
    let reason = serde_json::from_slice::<Body>(body).ok().map(|b| b.reason);
    Err(classify_status(status, reason.as_deref()))
}

fn classify_status(status: u16, reason: Option<&str>) -> PushError {
    let bad_token = reason == Some("BadDeviceToken");
    let reason = reason.unwrap_or("(no reason given)").to_owned();
    match status {
        410 => PushError::InvalidToken { status, reason },
        400 if bad_token => PushError::InvalidToken { status, reason },
        429 | 500..=599 => PushError::Retryable {
            status: Some(status),
            reason,
        },
        _ => PushError::Rejected {
            status: Some(status),
            reason,
        },
    }
}

/// A push's stream failed after its request was handed to the connection: retryable only when
/// APNs says it did not process it ([`not_processed`]); otherwise (another reset, the
/// connection closed) APNs may have read it.
pub fn classify_stream_error(error: &h2::Error) -> PushError {
    match not_processed(error) {
        Some(why) => PushError::Retryable {
            status: None,
            reason: format!("the push's HTTP/2 stream failed: {error} ({why})"),
        },
        None => PushError::MaybeDelivered {
            reason: format!("the push's HTTP/2 stream failed: {error}"),
        },
    }
}

/// Why APNs surely did not process a request whose stream ended with `error`, if it surely
/// did not: it reset the stream with `REFUSED_STREAM` (RFC 9113 §8.7), or the stream is above
/// the last stream id of the GOAWAY it sent (§6.8; h2 fails exactly those streams with the
/// GOAWAY's error, and the ones at or below it only when the connection then ends).
pub fn not_processed(error: &h2::Error) -> Option<&'static str> {
    if error.is_reset() && error.is_remote() && error.reason() == Some(h2::Reason::REFUSED_STREAM) {
        Some("refused, not processed")
    } else if error.is_go_away() && error.is_remote() {
        Some("above the GOAWAY's last stream id, not processed")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, reason: Option<&str>) -> Result<(), PushError> {
        let body = reason
            .map(|reason| serde_json::json!({ "reason": reason }).to_string())
            .unwrap_or_default();
        classify_answer(status, body.as_bytes())
    }

    #[test]
    fn accepted_is_ok() {
        assert_eq!(classify_answer(200, b""), Ok(()));
    }

    #[test]
    fn a_dead_token_is_invalid_by_status_first() {
        for (status, reason) in [
            (400, Some("BadDeviceToken")),
            (410, Some("Unregistered")),
            // No reason, or one we do not know, on 410 is still a dead token.
            (410, None),
            (410, Some("ExpiredToken")),
        ] {
            let err = answer(status, reason).unwrap_err();
            assert!(
                matches!(err, PushError::InvalidToken { status: s, .. } if s == status),
                "{status}: {err:?}"
            );
        }
    }

    #[test]
    fn other_400s_are_rejected_not_a_reason_to_drop_the_token() {
        for reason in [Some("BadTopic"), Some("PayloadTooLarge"), None] {
            let err = answer(400, reason).unwrap_err();
            assert!(
                matches!(
                    err,
                    PushError::Rejected {
                        status: Some(400),
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let err = answer(403, Some("InvalidProviderToken")).unwrap_err();
        assert_eq!(
            err,
            PushError::Rejected {
                status: Some(403),
                reason: "InvalidProviderToken".into()
            }
        );
    }

    #[test]
    fn throttling_and_server_errors_are_retryable() {
        for (status, reason) in [
            (429, Some("TooManyRequests")),
            (429, Some("TooManyProviderTokenUpdates")),
            (500, Some("InternalServerError")),
            (503, Some("ServiceUnavailable")),
            (503, None),
        ] {
            let err = answer(status, reason).unwrap_err();
            assert!(
                matches!(err, PushError::Retryable { status: Some(s), .. } if s == status),
                "{status}: {err:?}"
            );
        }
    }

    /// A stream that failed other than by APNs's `REFUSED_STREAM` (here: reset by our side, or
    /// a reason APNs did not give) may have been read. APNs's own resets, `REFUSED_STREAM`
    /// among them, are made by testkit's broken APNs (tests/it/apns_errors.rs): h2 makes an
    /// error received from the peer only on a connection.
    #[test]
    fn a_stream_failed_but_not_refused_may_have_been_delivered() {
        for reason in [h2::Reason::REFUSED_STREAM, h2::Reason::INTERNAL_ERROR] {
            let err = classify_stream_error(&h2::Error::from(reason));
            assert!(matches!(err, PushError::MaybeDelivered { .. }), "{err:?}");
            assert!(err.reason().starts_with("the push's HTTP/2 stream failed"));
        }
    }
}
