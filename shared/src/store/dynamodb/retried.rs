//! Exactly once when a reply is lost: the SDK retries a write whose reply did not arrive, and the
//! retry's condition then meets the item its first attempt wrote. Each claim and finish writes a
//! token of its own (`claimToken`, `finishToken`: random per call, the same in the SDK's retries
//! of that call), and its condition also accepts the item it already wrote, so a retried claim
//! is recognised as won and a retried finish as done, while another caller's is refused as
//! before. A create recognises its own `callId` (random per reservation) the same way.
//! `shared/tests/it/faults_lost_replies.rs` loses real replies of DynamoDB Local.

pub(super) const CLAIM_TOKEN: &str = "claimToken";
pub(super) const FINISH_TOKEN: &str = "finishToken";

/// A token for one claim or finish call.
pub(super) fn write_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}
