//! What tests need of a minute's count being an estimate (`koe::domain::due::raises_count`:
//! one call id in `COUNT_STEP` raises it by `COUNT_STEP`): call ids chosen to count or not, and
//! the count creates leave.

use koe::domain::due::{COUNT_STEP, raises_count};
use koe::domain::reservation::CallId;

/// A fresh call id whose create raises its minute's count (`counts`), or one whose does not.
pub(crate) fn call_id_that_counts(counts: bool) -> CallId {
    loop {
        let id = CallId::generate();
        if raises_count(&id) == counts {
            return id;
        }
    }
}

/// The count a fresh minute's creates leave with these call ids: [`COUNT_STEP`] for each one
/// that counts.
pub(crate) fn count_after<'a>(call_ids: impl IntoIterator<Item = &'a CallId>) -> u32 {
    call_ids
        .into_iter()
        .filter(|id| raises_count(id))
        .map(|_| COUNT_STEP)
        .sum()
}
