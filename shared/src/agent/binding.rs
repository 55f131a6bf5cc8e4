//! Round 2 bound to a counted round 1: the step ids a round-1 plan carries are signed,
//! short-lived tokens, and round 2 is answered only for ids the server issued.
//!
//! A step id is `s<step>.<plan>.<device>.<expiry>.<mac>` (64 characters, the contract's most
//! for `stepId`): the step's number (1 to 5), a random plan id (14 base64url characters), the device's salted log hash (12 hex digits), the expiry in epoch seconds and
//! the first 128 bits of HMAC-SHA256 over all of them (22 base64url characters), keyed by
//! `AGENT_STEP_KEY`. The app only echoes the id, so it sends nothing new. A round 2 is answered
//! only when every result's id verifies, all belong to one plan, none has expired, the plan's
//! device is the round's `deviceId` (which round 2 must name), and the plan has been answered
//! fewer than [`MAX_ANSWERS_PER_PLAN`] times (one atomic counter per plan in the store, with a
//! TTL).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::domain::agent::{MAX_STEP_ID_CHARS, PlanStep, StepResult};
use crate::platform::config::Secret;

/// How long a plan's step ids are good for: the app runs its calendar query and sends round 2
/// within seconds; ten minutes leave room for a slow network and a retry.
pub const STEP_ID_TTL: chrono::Duration = chrono::Duration::minutes(10);
/// How many round 2s one plan may be answered: the first, and two retries after a lost answer.
pub const MAX_ANSWERS_PER_PLAN: u32 = 3;
/// How long the per-plan answer counter is kept after the plan expires (then TTL deletes it).
pub const ANSWER_COUNTER_RETENTION: chrono::Duration = chrono::Duration::days(1);

const MAC_BYTES: usize = 16;
const PLAN_ID_BYTES: usize = 10;
const DOMAIN: &[u8] = b"koe-step-id-v1";

/// HMAC-SHA256 (RFC 2104) over `parts`, each prefixed with its length so that no two different
/// lists of parts sign the same bytes.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let mut inner = Sha256::new().chain_update(pad(0x36));
    for part in parts {
        inner.update((part.len() as u32).to_be_bytes());
        inner.update(part);
    }
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner.finalize())
        .finalize()
        .into()
}

/// The parts of one step id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StepToken<'a> {
    step: u8,
    plan: &'a str,
    device: &'a str,
    expires: i64,
    mac: &'a str,
}

impl<'a> StepToken<'a> {
    fn parse(raw: &'a str) -> Option<StepToken<'a>> {
        let mut parts = raw.split('.');
        let step = parts.next()?.strip_prefix('s')?;
        let (plan, device, expires, mac) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || step.len() != 1 {
            return None;
        }
        Some(StepToken {
            step: step.parse().ok()?,
            plan,
            device,
            expires: expires.parse().ok()?,
            mac,
        })
    }
}

/// Why a round 2's step ids were refused. Each names the result it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No results: round 2 needs the ids of a round-1 plan.
    NoResults,
    /// The id was not issued by this server (made up, altered, or signed with another key).
    NotIssued {
        index: usize,
    },
    Expired {
        index: usize,
    },
    /// The id belongs to another plan than the first result's, or repeats a step.
    OtherPlan {
        index: usize,
    },
    /// The plan was issued for another device than the round's `deviceId`. Answered as
    /// [`Refusal::NotIssued`] is, so that the answer does not tell whether an id is genuine for
    /// some other device; only the log tells the two apart.
    OtherDevice {
        index: usize,
    },
    /// The plan has been answered [`MAX_ANSWERS_PER_PLAN`] times already.
    Reused,
}

impl Refusal {
    /// The field the refusal is about, and the message's rest.
    pub fn field_and_reason(&self) -> (String, String) {
        let field = |i: &usize| format!("results[{i}].stepId");
        match self {
            Refusal::NoResults => (
                "results".into(),
                "must hold the results of a round-1 plan (at least one)".into(),
            ),
            Refusal::NotIssued { index } | Refusal::OtherDevice { index } => (
                field(index),
                "was not issued by round 1 for this deviceId: send the ids of the plan's steps \
                 unchanged, with the deviceId of round 1"
                    .into(),
            ),
            Refusal::Expired { index } => (
                field(index),
                format!(
                    "has expired ({} minutes after its plan): start again with round 1",
                    STEP_ID_TTL.num_minutes()
                ),
            ),
            Refusal::OtherPlan { index } => (
                field(index),
                "belongs to another plan than results[0] or repeats a step".into(),
            ),
            Refusal::Reused => (
                "results[0].stepId".into(),
                format!(
                    "belongs to a plan already answered {MAX_ANSWERS_PER_PLAN} times: start \
                     again with round 1"
                ),
            ),
        }
    }
}

/// A round 2's verified plan: the counter key and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPlan {
    pub plan_id: String,
    /// When the plan's ids expire (epoch seconds).
    pub expires: i64,
}

impl VerifiedPlan {
    /// `expireAt` of the plan's answer counter.
    pub fn counter_expire_at(&self) -> i64 {
        self.expires + ANSWER_COUNTER_RETENTION.num_seconds()
    }
}

/// Signs and verifies step ids with the stack's key (`AGENT_STEP_KEY`).
#[derive(Clone)]
pub struct StepSigner {
    key: Secret,
}

impl StepSigner {
    pub fn new(key: Secret) -> StepSigner {
        StepSigner { key }
    }

    fn mac(&self, step: u8, plan: &str, device: &str, expires: i64) -> String {
        let digest = hmac_sha256(
            self.key.expose().as_bytes(),
            &[
                DOMAIN,
                &[step],
                plan.as_bytes(),
                device.as_bytes(),
                &expires.to_be_bytes(),
            ],
        );
        URL_SAFE_NO_PAD.encode(&digest[..MAC_BYTES])
    }

    /// Replaces the plan's step ids (`s1`, `s2`, ...) with signed ones for a new plan of the
    /// device whose log hash is `device_hash`, good for [`STEP_ID_TTL`] from `now`.
    pub fn sign_plan(&self, steps: &mut [PlanStep], device_hash: &str, now: DateTime<Utc>) {
        let plan_bytes: [u8; PLAN_ID_BYTES] = std::array::from_fn(|_| fastrand::u8(..));
        let plan = URL_SAFE_NO_PAD.encode(plan_bytes);
        let expires = (now + STEP_ID_TTL).timestamp();
        for (i, step) in steps.iter_mut().enumerate() {
            let number = i as u8 + 1;
            let mac = self.mac(number, &plan, device_hash, expires);
            step.id = format!("s{number}.{plan}.{device_hash}.{expires}.{mac}");
            debug_assert!(step.id.len() <= MAX_STEP_ID_CHARS, "{}", step.id);
        }
    }

    /// Checks a round 2's step ids: issued here, unaltered, of `device_hash`'s plan (checked
    /// before the expiry, so another device's id is refused as a forged one is, expired or not),
    /// one plan, distinct steps, not expired at `now`.
    pub fn verify(
        &self,
        results: &[StepResult],
        device_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<VerifiedPlan, Refusal> {
        if results.is_empty() {
            return Err(Refusal::NoResults);
        }
        let mut first: Option<StepToken<'_>> = None;
        let mut steps_seen = Vec::new();
        for (index, result) in results.iter().enumerate() {
            let token = StepToken::parse(&result.step_id).ok_or(Refusal::NotIssued { index })?;
            let expected = self.mac(token.step, token.plan, token.device, token.expires);
            if !bool::from(expected.as_bytes().ct_eq(token.mac.as_bytes())) {
                return Err(Refusal::NotIssued { index });
            }
            if !bool::from(device_hash.as_bytes().ct_eq(token.device.as_bytes())) {
                return Err(Refusal::OtherDevice { index });
            }
            if token.expires <= now.timestamp() {
                return Err(Refusal::Expired { index });
            }
            if let Some(first) = &first
                && (first.plan != token.plan || steps_seen.contains(&token.step))
            {
                return Err(Refusal::OtherPlan { index });
            }
            steps_seen.push(token.step);
            first.get_or_insert(token);
        }
        let first = first.expect("results is not empty");
        Ok(VerifiedPlan {
            plan_id: first.plan.to_owned(),
            expires: first.expires,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::agent::tools::calendar::CALENDAR;
    use crate::domain::agent::{Capability, ToolOutput};

    use crate::platform::clock::utc as at;

    const DEVICE: &str = "0123456789ab";

    fn signer() -> StepSigner {
        StepSigner::new(Secret::new("k".repeat(40)))
    }

    fn plan(n: usize) -> Vec<PlanStep> {
        let t = DateTime::parse_from_rfc3339("2026-01-02T00:00:00+09:00").unwrap();
        (0..n)
            .map(|i| PlanStep {
                id: format!("s{}", i + 1),
                tool: Capability::of(&CALENDAR),
                from: t,
                to: t + chrono::Duration::days(1),
            })
            .collect()
    }

    fn results(ids: &[&str]) -> Vec<StepResult> {
        ids.iter()
            .map(|id| StepResult {
                step_id: (*id).to_owned(),
                output: ToolOutput::empty(Capability::of(&CALENDAR)),
            })
            .collect()
    }

    fn ids(steps: &[PlanStep]) -> Vec<&str> {
        steps.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        // One part, without our length prefix: check the bare construction.
        let mut block = [0u8; 64];
        block[..4].copy_from_slice(b"Jefe");
        let pad = |byte: u8| block.map(|b| b ^ byte);
        let inner = Sha256::new()
            .chain_update(pad(0x36))
            .chain_update(b"what do ya want for nothing?")
            .finalize();
        let outer: [u8; 32] = Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize()
            .into();
        let hex = crate::domain::hex(&outer);
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // hmac_sha256 is the same construction (only the message framing differs).
        assert_eq!(hmac_sha256(b"Jefe", &[b"x"]), hmac_sha256(b"Jefe", &[b"x"]));
        assert_ne!(hmac_sha256(b"Jefe", &[b"x"]), hmac_sha256(b"Jeff", &[b"x"]));
    }

    #[test]
    fn the_format_is_pinned_as_scripts_schemathesis_hooks_py_writes_it() {
        assert_eq!(
            signer().mac(1, "AAAAAAAAAAAAAA", "0123456789ab", 2_000_000_000),
            "Iv7ea5BBsMhEQo6WObG_EQ"
        );
    }

    #[test]
    fn signed_ids_fit_the_contract_and_verify() {
        let now = at("2026-01-01T12:00:00Z");
        let mut steps = plan(5);
        signer().sign_plan(&mut steps, DEVICE, now);
        for (i, step) in steps.iter().enumerate() {
            assert_eq!(step.id.len(), MAX_STEP_ID_CHARS, "{}", step.id);
            assert!(step.id.starts_with(&format!("s{}.", i + 1)));
        }
        let verified = signer()
            .verify(&results(&ids(&steps)), DEVICE, now)
            .unwrap();
        assert_eq!(verified.expires, (now + STEP_ID_TTL).timestamp());
        // A subset, in any order, verifies too.
        signer()
            .verify(&results(&[&steps[2].id, &steps[0].id]), DEVICE, now)
            .unwrap();
    }

    #[test]
    fn made_up_altered_foreign_expired_and_mixed_ids_are_refused() {
        let now = at("2026-01-01T12:00:00Z");
        let mut steps = plan(2);
        signer().sign_plan(&mut steps, DEVICE, now);
        let mut other = plan(1);
        signer().sign_plan(&mut other, DEVICE, now);
        let good = steps[0].id.clone();
        let verify = |ids: &[&str], device: &str, now| signer().verify(&results(ids), device, now);

        assert_eq!(verify(&[], DEVICE, now), Err(Refusal::NoResults));
        for made_up in ["s1", "s1.a.b.1.c", "", "s1.....", &good[..good.len() - 1]] {
            assert_eq!(
                verify(&[made_up], DEVICE, now),
                Err(Refusal::NotIssued { index: 0 }),
                "{made_up}"
            );
        }
        // Any changed character: step, plan, device, expiry or MAC.
        for i in 0..good.len() {
            let mut altered = good.clone().into_bytes();
            altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            assert!(verify(&[&altered], DEVICE, now).is_err(), "{altered}");
        }
        let foreign = {
            let mut steps = plan(1);
            StepSigner::new(Secret::new("other-key".repeat(5))).sign_plan(&mut steps, "d", now);
            steps[0].id.clone()
        };
        assert_eq!(
            verify(&[&foreign], DEVICE, now),
            Err(Refusal::NotIssued { index: 0 })
        );
        let later = now + STEP_ID_TTL;
        assert_eq!(
            verify(&[&good], DEVICE, later),
            Err(Refusal::Expired { index: 0 })
        );
        assert!(verify(&[&good], DEVICE, later - chrono::Duration::seconds(1)).is_ok());
        assert_eq!(
            verify(&[&good, &other[0].id], DEVICE, now),
            Err(Refusal::OtherPlan { index: 1 })
        );
        assert_eq!(
            verify(&[&good, &good], DEVICE, now),
            Err(Refusal::OtherPlan { index: 1 })
        );
        assert_eq!(
            verify(&[&good], "ffffffffffff", now),
            Err(Refusal::OtherDevice { index: 0 })
        );
        // Expired or not, another device's id is refused before its expiry is looked at, and
        // answered as a forged one is.
        assert_eq!(
            verify(&[&good], "ffffffffffff", later),
            Err(Refusal::OtherDevice { index: 0 })
        );
        assert_eq!(
            Refusal::OtherDevice { index: 1 }.field_and_reason(),
            Refusal::NotIssued { index: 1 }.field_and_reason()
        );
    }
}
