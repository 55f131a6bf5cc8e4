//! What started a run ([`RunCause`]) and what it did ([`RunReport`], with lateness percentiles).

/// What started a run (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunCause {
    /// The every-minute EventBridge schedule.
    Schedule,
    /// POST /internal/dispatch, handed on through the stack's bus.
    Request,
    /// koe-local's in-process loop.
    Local,
    /// A part of a split minute, handed out by a coordinating run.
    Part,
}

impl RunCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RunCause::Schedule => "schedule",
            RunCause::Request => "request",
            RunCause::Local => "local",
            RunCause::Part => "part",
        }
    }
}

/// What one run did. Every reservation the run took on ends in exactly one of `sent`, `failed`,
/// `missed`, `lost` (its claim was refused: cancelled, or another run has it), `released` (this
/// run gave its claim back before pushing: its push mark could not be resolved in time; a later
/// selection sends it), `abandoned` (this run gave it up after claiming and could not give the
/// claim back; a later run recovers it) or a store error (a push that went out but could not be
/// recorded counts as `sent` and as a store error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    pub cause: &'static str,
    /// Store reads made to select: per minute bucket and selection, its count and each of this
    /// run's shards of it (none when nothing was made for the minute).
    pub queries: u32,
    /// Reservations taken on.
    pub selected: u32,
    pub claimed: u32,
    pub sent: u32,
    pub failed: u32,
    pub missed: u32,
    pub lost: u32,
    pub abandoned: u32,
    pub released: u32,
    /// Of `failed`: pushes that may have left, so are never sent again: claims found abandoned
    /// after their push had started (the run that started it is gone), and pushes of this run
    /// that got no answer after they were sent (the connection broke, no answer in time).
    pub push_unknown: u32,
    /// Store requests of the deliveries (device read, claim, push mark, release, outcome) that
    /// got no answer (a reply lost or late, a store error) and were then made again until
    /// answered: how often the run resolved a write whose outcome it did not know.
    pub resolved: u32,
    /// Device tokens removed because APNs called them invalid.
    pub tokens_removed: u32,
    pub store_errors: u32,
    /// For each sent push, how long after its `scheduledAt` it left, in milliseconds.
    pub lateness_ms: Vec<i64>,
    /// Parts of a split window this (coordinating) run handed out instead of running it.
    pub handed_out: u32,
}

impl RunReport {
    pub fn max_lateness_ms(&self) -> Option<i64> {
        self.lateness_ms.iter().copied().max()
    }

    /// The `p`-th percentile (0..=100) of the latenesses.
    pub fn lateness_percentile(&self, p: usize) -> Option<i64> {
        let mut sorted = self.lateness_ms.clone();
        sorted.sort_unstable();
        let last = sorted.len().checked_sub(1)?;
        sorted.get((last * p.min(100)).div_ceil(100)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_lateness() {
        let report = RunReport {
            lateness_ms: vec![30, 10, 20, 40, 1000],
            ..RunReport::default()
        };
        assert_eq!(report.max_lateness_ms(), Some(1000));
        assert_eq!(report.lateness_percentile(50), Some(30));
        assert_eq!(report.lateness_percentile(0), Some(10));
        assert_eq!(report.lateness_percentile(100), Some(1000));
        assert_eq!(RunReport::default().lateness_percentile(50), None);
    }
}
