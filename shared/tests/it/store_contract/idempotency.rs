//! Kept idempotent answers: the first one wins until it expires.

use chrono::{DateTime, Duration, Utc};
use koe::store::IdempotentAnswer;

use super::{DynStore, t0};

fn idempotent_answer(key: &str, body: &str, expire_at: DateTime<Utc>) -> IdempotentAnswer {
    IdempotentAnswer {
        key: key.to_owned(),
        request_hash: format!("hash-of-{body}"),
        status: 201,
        body: body.to_owned(),
        expire_at: expire_at.timestamp(),
    }
}

async fn idempotent_answers_are_kept_first_wins_until_they_expire(store: DynStore) {
    let key = format!("calls#{:016x}", fastrand::u64(..));
    let now = t0();
    let day = now + Duration::hours(24);
    assert_eq!(store.idempotent_answer(&key, now).await.unwrap(), None);

    let first = idempotent_answer(&key, r#"{"callId":"a","callerName":"こえ"}"#, day);
    assert!(store.keep_idempotent_answer(&first, now).await.unwrap());
    assert_eq!(
        store.idempotent_answer(&key, now).await.unwrap(),
        Some(first.clone())
    );
    // The first one wins while it lives.
    let second = idempotent_answer(&key, r#"{"callId":"b"}"#, day + Duration::hours(1));
    assert!(!store.keep_idempotent_answer(&second, now).await.unwrap());
    assert_eq!(
        store
            .idempotent_answer(&key, day - Duration::seconds(1))
            .await
            .unwrap(),
        Some(first)
    );
    // Expired (even before TTL deletes it): absent, and a new answer can be kept.
    assert_eq!(store.idempotent_answer(&key, day).await.unwrap(), None);
    assert!(store.keep_idempotent_answer(&second, day).await.unwrap());
    assert_eq!(
        store.idempotent_answer(&key, day).await.unwrap(),
        Some(second)
    );
    // Another key is another record; no device's reservation is touched.
    let other = format!("calls#{:016x}", fastrand::u64(..));
    assert_eq!(store.idempotent_answer(&other, now).await.unwrap(), None);
}

contract_suite!(idempotent_answers_are_kept_first_wins_until_they_expire);
