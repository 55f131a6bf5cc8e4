//! a2's answer to one push as a [`PushError`] class, above all whether a failed request can have
//! reached APNs: only one that surely did not is sent again (docs/reliability.md, "Push retries").
//!
//! a2 0.10 sends with hyper-util's legacy client over HTTP/2, so a failure that is not an APNs
//! answer is a `hyper_util::client::legacy::Error` whose kind and source chain say where the
//! request stood. `koe_testkit::push::broken` makes these errors with that client against a
//! loopback server that breaks the request in each way (a2 itself cannot be pointed at it).

use std::error::Error as _;

use hyper_util::client::legacy::Error as ClientError;

use super::PushError;

/// a2's answer as a [`PushError`] class. An APNs answer is classified by its status code first:
/// a2 turns reasons it does not know into `error: None`, so a 410 without a reason is still a
/// dead token. A request that got no answer is [`PushError::Retryable`] only when it surely did
/// not reach APNs, otherwise [`PushError::MaybeDelivered`].
pub fn classify(result: Result<a2::Response, a2::Error>) -> Result<(), PushError> {
    let error = match result {
        Ok(_) => return Ok(()),
        Err(error) => error,
    };
    Err(match error {
        a2::Error::ResponseError(response) => classify_response(&response),
        a2::Error::ClientError(error) => classify_client_error(&error),
        // a2 reads a body only after a status other than 200: APNs refused this push, and only
        // its reason was lost with the body.
        a2::Error::ConnectionError(error) => PushError::Retryable {
            status: None,
            reason: format!("APNs answered an error status, its body was cut off: {error}"),
        },
        // a2's own timeout: the request may have been read and delivered.
        a2::Error::RequestTimeout(_) => PushError::MaybeDelivered {
            reason: error.to_string(),
        },
        other => PushError::Rejected {
            status: None,
            reason: other.to_string(),
        },
    })
}

fn classify_response(response: &a2::Response) -> PushError {
    let reason = response
        .error
        .as_ref()
        .map(|body| format!("{:?}", body.reason));
    classify_status(response.code, reason.as_deref())
}

/// APNs's answer other than 200 to our own client ([`connection`](super::connection)): its
/// status and its body, `{"reason": "..."}`.
pub fn classify_answer(status: u16, body: &[u8]) -> PushError {
    #[derive(serde::Deserialize)]
    struct Body {
        reason: String,
    }
    let reason = serde_json::from_slice::<Body>(body).ok().map(|b| b.reason);
    classify_status(status, reason.as_deref())
}

/// By the status code first, so a 410 without a reason is still a dead token.
fn classify_status(status: u16, reason: Option<&str>) -> PushError {
    let bad_token = reason == Some("BadDeviceToken");
    let reason = reason
        .unwrap_or("(no reason APNs' client knows)")
        .to_owned();
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
/// APNs reset it with `REFUSED_STREAM` (RFC 9113, 8.7: not processed); otherwise (a reset, the
/// connection closed or a GOAWAY) APNs may have read it.
pub fn classify_stream_error(error: &h2::Error) -> PushError {
    let reason = format!("the push's HTTP/2 stream failed: {error}");
    if error.is_reset() && error.is_remote() && error.reason() == Some(h2::Reason::REFUSED_STREAM) {
        PushError::Retryable {
            status: None,
            reason,
        }
    } else {
        PushError::MaybeDelivered { reason }
    }
}

/// Where the request stood when the HTTP client failed it. Surely not sent: no connection could
/// be made (`Connect`); the request was handed back unsent (`Canceled`); the error carries no
/// connection (it failed while the connection was set up, e.g. its HTTP/2 handshake); APNs reset
/// the stream with `REFUSED_STREAM` (RFC 9113, 8.7: no part of it was processed). Anything else
/// failed after the request was handed to an open connection: APNs may have read it (a reset
/// stream, a connection closed or a GOAWAY, which h2 reports alike for streams APNs did and did
/// not process), so it may have been delivered.
fn classify_client_error(error: &ClientError) -> PushError {
    let reason = describe(error);
    let kind = error.to_string();
    let not_sent = || PushError::Retryable {
        status: None,
        reason: reason.clone(),
    };
    if error.is_connect() || kind == "client error (Canceled)" || error.connect_info().is_none() {
        return not_sent();
    }
    if kind.starts_with("client error (User") {
        return PushError::Rejected {
            status: None,
            reason,
        };
    }
    if refused_stream(error) {
        return not_sent();
    }
    PushError::MaybeDelivered { reason }
}

/// Whether APNs reset the request's stream with `REFUSED_STREAM`.
fn refused_stream(error: &ClientError) -> bool {
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            return h2.is_reset()
                && h2.is_remote()
                && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        source = cause.source();
    }
    false
}

/// The error and its causes, as one line (they name protocol events, never the token).
fn describe(error: &ClientError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2::ErrorReason;

    fn response(code: u16, reason: Option<ErrorReason>) -> Result<a2::Response, a2::Error> {
        Err(a2::Error::ResponseError(a2::Response {
            error: reason.map(|reason| a2::ErrorBody {
                reason,
                timestamp: None,
            }),
            apns_id: Some("00000000-0000-0000-0000-000000000000".into()),
            code,
        }))
    }

    #[test]
    fn accepted_is_ok() {
        let ok = Ok(a2::Response {
            error: None,
            apns_id: None,
            code: 200,
        });
        assert_eq!(classify(ok), Ok(()));
    }

    #[test]
    fn a_dead_token_is_invalid_by_status_first() {
        for (code, reason) in [
            (400, Some(ErrorReason::BadDeviceToken)),
            (410, Some(ErrorReason::Unregistered)),
            // An unknown reason (a2 parses it to None) on 410 is still a dead token.
            (410, None),
        ] {
            let err = classify(response(code, reason)).unwrap_err();
            assert!(
                matches!(err, PushError::InvalidToken { status, .. } if status == code),
                "{code}: {err:?}"
            );
        }
    }

    #[test]
    fn other_400s_are_rejected_not_a_reason_to_drop_the_token() {
        for reason in [
            Some(ErrorReason::BadTopic),
            Some(ErrorReason::PayloadTooLarge),
            None,
        ] {
            let err = classify(response(400, reason)).unwrap_err();
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
        let err = classify(response(403, Some(ErrorReason::InvalidProviderToken))).unwrap_err();
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
        for (code, reason) in [
            (429, Some(ErrorReason::TooManyRequests)),
            (500, Some(ErrorReason::InternalServerError)),
            (503, Some(ErrorReason::ServiceUnavailable)),
            (503, None),
        ] {
            let err = classify(response(code, reason)).unwrap_err();
            assert!(
                matches!(err, PushError::Retryable { status: Some(s), .. } if s == code),
                "{code}: {err:?}"
            );
        }
    }

    #[test]
    fn no_answer_in_time_may_have_been_delivered() {
        let timeout = classify(Err(a2::Error::RequestTimeout(2))).unwrap_err();
        assert!(
            matches!(timeout, PushError::MaybeDelivered { .. }),
            "{timeout:?}"
        );
    }
}
