//! Exactly once when a reply is lost: the SDK (or the caller) makes a write again whose reply did
//! not arrive, and the new attempt's condition then meets the item its first attempt wrote. The
//! dispatcher's claim, push mark, release and outcome carry the token of the run that makes them
//! (`claimToken`, `finishToken`: `RunToken`, one per run), and each condition also accepts the
//! item that run already wrote, so a write made again is recognised as this run's while another
//! run's is refused as before. A create recognises its own `callId` (random per reservation)
//! the same way, and so does a cancel (its record `cancelled` with that `callId`); a counter's
//! `ADD` its own `lastAdd` token (`keyed.rs`), a device registration its new secret's hash
//! (`devices.rs`).
//! `shared/tests/it/faults_lost_replies.rs` and `faults_slow_replies.rs` lose and hold real
//! replies of DynamoDB Local.

pub(super) const CLAIM_TOKEN: &str = "claimToken";
pub(super) const FINISH_TOKEN: &str = "finishToken";

/// A token for one counter's `ADD` (`keyed.rs`), the same in the SDK's retries of that call.
pub(super) fn write_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}
