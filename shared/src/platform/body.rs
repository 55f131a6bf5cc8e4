//! Reading a request body under its endpoint's cap, from any `http_body::Body` (lambda_http's,
//! the local server's, a test's).

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use std::time::Duration;

use super::error::ApiError;

/// How much of an oversized body is read and thrown away, and for how long, before the 400 goes
/// out. A client that is still sending when the server answers and closes would otherwise see a
/// reset connection (broken pipe) instead of the 400; beyond these bounds it may.
const DRAIN_CAP: usize = 16 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Reads the body, keeping at most `limit` bytes. A longer one is refused (400 naming `body`);
/// its remainder is drained (within `DRAIN_CAP` and `DRAIN_TIME`) so that the refusal reaches
/// the client.
pub async fn read_limited<B>(mut body: B, limit: usize) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let mut kept = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ApiError::invalid("body", "could not be read"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if kept.len() + data.len() > limit {
            let mut seen = kept.len() + data.len();
            let drain = async {
                while seen <= DRAIN_CAP {
                    match body.frame().await {
                        Some(Ok(frame)) => {
                            seen += frame.data_ref().map_or(0, Bytes::len);
                        }
                        Some(Err(_)) | None => break,
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            return Err(too_large(limit));
        }
        kept.extend_from_slice(&data);
    }
    Ok(kept.freeze())
}

pub fn too_large(limit: usize) -> ApiError {
    ApiError::invalid("body", format!("must be at most {limit} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn bodies_up_to_the_cap_pass_and_longer_ones_name_the_field() {
        let ok = read_limited(Full::new(Bytes::from(vec![b'a'; 10])), 10).await;
        assert_eq!(ok.unwrap().len(), 10);
        let err = read_limited(Full::new(Bytes::from(vec![b'a'; 11])), 10)
            .await
            .unwrap_err();
        assert_eq!(err.message, "body must be at most 10 bytes");
    }
}
