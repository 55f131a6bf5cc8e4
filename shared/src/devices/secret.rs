//! The device secret as every endpoint that acts for a device checks it (docs/security.md,
//! "Device-scoped access"): one public function, [`admitted`], used by `/calls`,
//! `/calls/confirm` and the agent's round 1, and by any new endpoint that names a device.
//! `PUT /devices` applies the same rule inside its conditional write
//! ([`DeviceStore::register_device`]).

use chrono::{DateTime, Utc};

use crate::domain::device::{DeviceId, DeviceSecret};
use crate::platform::Request;
use crate::platform::error::{ApiError, ErrorCode};
use crate::store::DeviceProof;
use crate::store::DeviceStore;

/// How much a request must show to act for a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretRule {
    /// The `/calls` rule, `PUT /devices`' own: once the device's app has proven its secret every
    /// request must carry it; before that, none or the right one passes, and the right one
    /// proves it. A device never registered has nothing to guard and passes.
    OnceProven,
    /// The agent's round 1 with `AGENT_REQUIRE_DEVICE_SECRET`: only a registered device whose
    /// app has proven its secret and that presents it; otherwise a made-up device id would pass.
    Proven,
}

/// The device's record as read for the check (its token's presence included), or 403
/// `DEVICE_SECRET_REQUIRED` when the request's `X-Device-Secret` does not satisfy `rule`;
/// 400 for a malformed header; 503 if the store fails (a check that cannot be made does not
/// pass). Under [`SecretRule::OnceProven`], a request presenting the device's unproven secret
/// proves it: from then on every request for the device must carry it.
pub async fn admitted(
    store: &dyn DeviceStore,
    request: &Request,
    device_id: &DeviceId,
    now: DateTime<Utc>,
    salt: &str,
    rule: SecretRule,
) -> Result<DeviceProof, ApiError> {
    let presented = DeviceSecret::presented_hash(request.headers())?;
    let proof = store.device_proof(device_id, now).await?;
    if let Some(refusal) = refusal(&proof, presented.as_deref(), rule) {
        let device = device_id.log_hash(salt);
        let presented = presented.is_some();
        match rule {
            SecretRule::OnceProven => tracing::warn!(
                %device,
                presented,
                refusal,
                "request refused: the device's secret was not presented"
            ),
            SecretRule::Proven => tracing::warn!(
                %device,
                presented,
                refusal,
                "agent round 1 refused: the device's proven secret was not presented"
            ),
        }
        return Err(match rule {
            SecretRule::OnceProven => ApiError::device_secret_required(),
            SecretRule::Proven => ApiError::new(
                ErrorCode::DeviceSecretRequired,
                "X-Device-Secret is missing or not this device's proven secret: agent requests \
                 need a device registered with PUT /devices whose deviceSecret was sent back as \
                 X-Device-Secret",
            ),
        });
    }
    if let (
        Some(hash),
        DeviceProof::Registered {
            secret_hash: Some(_),
            proven: false,
            ..
        },
    ) = (&presented, &proof)
        && store.prove_device(device_id, hash, now).await?
    {
        tracing::info!(device = %device_id.log_hash(salt), "device secret proven");
    }
    Ok(proof)
}

/// Why `rule` refuses a request presenting `presented` (the SHA-256 of its `X-Device-Secret`)
/// for a device in state `proof`, or `None` if it passes.
fn refusal(proof: &DeviceProof, presented: Option<&str>, rule: SecretRule) -> Option<&'static str> {
    if !proof.admits(presented) {
        return Some(match presented {
            None => "device secret not presented",
            Some(_) => "device secret not the device's",
        });
    }
    match (rule, proof, presented) {
        (SecretRule::OnceProven, _, _) => None,
        (SecretRule::Proven, DeviceProof::Unregistered, _) => Some("device not registered"),
        (SecretRule::Proven, DeviceProof::Registered { proven: false, .. }, _) => {
            Some("device secret not proven")
        }
        (SecretRule::Proven, _, None) => Some("device secret not presented"),
        (SecretRule::Proven, _, Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(proven: bool) -> DeviceProof {
        DeviceProof::Registered {
            secret_hash: Some("h".into()),
            proven,
            has_token: true,
        }
    }

    #[test]
    fn once_proven_needs_the_secret_only_after_it_was_proven() {
        let rule = SecretRule::OnceProven;
        assert_eq!(refusal(&DeviceProof::Unregistered, None, rule), None);
        assert_eq!(refusal(&registered(false), None, rule), None);
        assert_eq!(refusal(&registered(false), Some("h"), rule), None);
        assert!(refusal(&registered(false), Some("other"), rule).is_some());
        assert!(refusal(&registered(true), None, rule).is_some());
        assert!(refusal(&registered(true), Some("other"), rule).is_some());
        assert_eq!(refusal(&registered(true), Some("h"), rule), None);
    }

    #[test]
    fn proven_passes_only_a_registered_device_presenting_its_proven_secret() {
        let rule = SecretRule::Proven;
        assert_eq!(refusal(&registered(true), Some("h"), rule), None);
        for (proof, presented) in [
            (DeviceProof::Unregistered, None),
            (DeviceProof::Unregistered, Some("h")),
            (registered(false), None),
            (registered(false), Some("h")),
            (registered(true), None),
            (registered(true), Some("other")),
        ] {
            assert!(
                refusal(&proof, presented, rule).is_some(),
                "{proof:?} {presented:?}"
            );
        }
    }
}
