//! The conditions on a reservation's dispatch writes that say which run may make them (the run
//! tokens of docs/dispatch.md, "Exactly once"), shared by the claim, the mark and the outcome.

/// The condition under which a reservation may be claimed (or marked missed): still
/// `scheduled`, or `claimed` before `:abandonedBeforeMs` (the claiming run died) and its push
/// never started (no `pushStartedAtMs`: a started push may have left; no `markBatchMs`: its
/// batch's mark is not yet known, `DispatchStore::settle_batch`).
pub(super) const CLAIMABLE: &str = "#callId = :callId AND (#status = :scheduled OR \
     (#status = :claimed AND #claimedAtMs < :abandonedBeforeMs \
      AND attribute_not_exists(#pushStartedAtMs) AND attribute_not_exists(#markBatchMs)))";

/// A claim's extra condition: a call waiting for its push again (`pushes` set) is not claimed
/// before `:dueByMs` (its due time less `PUSH_AGAIN_CLAIM_LEAD`).
pub(super) const NOT_EARLY: &str = "(attribute_not_exists(#pushes) OR #scheduledAtMs <= :dueByMs)";

/// A claim made before `:abandonedBeforeMs` whose push started, to a device that confirms its
/// calls: the push may have left; it counts, and the call goes again.
pub(super) const PUSHED_THEN_ABANDONED: &str = "#callId = :callId AND #status = :claimed \
     AND #claimedAtMs < :abandonedBeforeMs AND attribute_exists(#pushStartedAtMs) \
     AND #confirms = :true";

/// The reservation is claimed by the run whose token is `:run` (its own claim, whatever became
/// of the reply that said so).
pub(super) const CLAIMED_BY_RUN: &str =
    "#callId = :callId AND #status = :claimed AND #claimToken = :run";
