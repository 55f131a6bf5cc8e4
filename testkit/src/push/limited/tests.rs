//! The stand-in APNs's own tests: streams, handshakes, latency, answers and a prepared pool.

use super::*;
use crate::push::push_and_device;

fn send_all(
    connection: &Arc<dyn PushSender>,
    n: usize,
) -> tokio::task::JoinSet<Result<(), PushError>> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let connection = connection.clone();
        tasks.spawn(async move {
            let (push, device) = push_and_device("c1", "d1");
            connection.send(&push, &device).await
        });
    }
    tasks
}

fn exact(streams: usize) -> ApnsLimits {
    ApnsLimits {
        streams_per_connection: streams,
        latency: Duration::from_millis(100),
        jitter: Duration::ZERO,
        connect_time: Duration::from_millis(150),
        ..ApnsLimits::default()
    }
}

fn ms_after(start: Instant, at: Instant) -> u128 {
    (at - start).as_millis()
}

#[tokio::test(start_paused = true)]
async fn a_connection_carries_its_streams_and_queues_the_rest_in_order_after_its_handshake() {
    let apns = LimitedApns::new(exact(2));
    let start = Instant::now();
    let connection = apns.connection();
    let results = send_all(&connection, 5).join_all().await;
    assert!(results.iter().all(Result::is_ok));

    let records = apns.records();
    let left: Vec<u128> = records.iter().map(|r| ms_after(start, r.left)).collect();
    let answered: Vec<u128> = records
        .iter()
        .map(|r| ms_after(start, r.answered))
        .collect();
    assert_eq!(left, [150, 150, 250, 250, 350]);
    assert_eq!(answered, [250, 250, 350, 350, 450]);
    let stats = apns.stats();
    assert_eq!(stats.queued, 3);
    assert_eq!(stats.max_in_flight_per_connection, 2);
    assert_eq!(stats.cold_connects, 1);
    assert_eq!((stats.connections_opened, stats.connections_used), (1, 1));
    assert_eq!(stats.accepted, 5);
}

#[tokio::test(start_paused = true)]
async fn each_connection_has_its_own_streams() {
    let apns = LimitedApns::new(exact(2));
    let (a, b) = (apns.connection(), apns.connection());
    let (mut on_a, mut on_b) = (send_all(&a, 2), send_all(&b, 2));
    while on_a.join_next().await.is_some() || on_b.join_next().await.is_some() {}
    let stats = apns.stats();
    assert_eq!(stats.queued, 0);
    assert_eq!(stats.cold_connects, 2);
    let mut connections: Vec<usize> = apns.records().iter().map(|r| r.connection).collect();
    connections.sort();
    assert_eq!(connections, [0, 0, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_warmed_connection_does_not_pay_the_handshake_at_its_first_push() {
    let apns = LimitedApns::new(exact(10));
    let connection = apns.connection();
    let before = Instant::now();
    connection.warm().await;
    assert_eq!(
        ms_after(before, Instant::now()),
        150,
        "warming is the handshake"
    );
    connection.warm().await;
    let start = Instant::now();
    assert_eq!(
        start,
        before + Duration::from_millis(150),
        "a second warm is free"
    );

    send_all(&connection, 3).join_all().await;
    for record in apns.records() {
        assert_eq!(record.left, start);
        assert_eq!(ms_after(start, record.answered), 100);
    }
    assert_eq!(apns.stats().cold_connects, 0);
}

#[tokio::test(start_paused = true)]
async fn latency_is_uniform_within_its_jitter() {
    let apns = LimitedApns::new(ApnsLimits::default());
    let connection = apns.connection();
    connection.warm().await;
    send_all(&connection, 500).join_all().await;
    let took: Vec<u128> = apns
        .records()
        .iter()
        .map(|r| (r.answered - r.left).as_millis())
        .collect();
    assert!(took.iter().all(|ms| (90..=150).contains(ms)), "{took:?}");
    assert!(took.iter().any(|ms| *ms < 100) && took.iter().any(|ms| *ms > 140));
}

#[tokio::test(start_paused = true)]
async fn answers_come_with_their_probabilities_as_the_adapter_classifies_them() {
    let apns = LimitedApns::new(ApnsLimits {
        p429: 0.1,
        p500: 0.05,
        p410: 0.02,
        ..ApnsLimits::default()
    });
    let connection = apns.connection();
    let results = send_all(&connection, 10_000).join_all().await;
    let stats = apns.stats();
    assert_eq!(stats.queued, 9_000, "1,000 streams");
    assert_eq!(
        stats.accepted + stats.too_many_requests + stats.server_errors + stats.unregistered,
        10_000
    );
    // Generous bounds around 1,000 / 500 / 200 (several standard deviations).
    assert!((800..1200).contains(&stats.too_many_requests), "{stats:?}");
    assert!((350..650).contains(&stats.server_errors), "{stats:?}");
    assert!((100..300).contains(&stats.unregistered), "{stats:?}");

    let count = |wanted: &Result<(), PushError>| results.iter().filter(|r| *r == wanted).count();
    assert_eq!(count(&Answer::Accepted.result()), stats.accepted);
    assert_eq!(
        count(&Err(PushError::Retryable {
            status: Some(429),
            reason: "TooManyRequests".into()
        })),
        stats.too_many_requests
    );
    assert_eq!(
        count(&Err(PushError::Retryable {
            status: Some(500),
            reason: "InternalServerError".into()
        })),
        stats.server_errors
    );
    assert_eq!(
        count(&Err(PushError::InvalidToken {
            status: 410,
            reason: "Unregistered".into()
        })),
        stats.unregistered
    );
}

#[tokio::test(start_paused = true)]
async fn scripted_answers_come_first_and_a_reset_after_read_is_delivered_unanswered() {
    let apns = LimitedApns::new(exact(10));
    apns.answer_next([Answer::ResetAfterRead, Answer::RefusedStream]);
    let connection = apns.connection();
    let (push, device) = push_and_device("c1", "d1");
    let results = [
        connection.send(&push, &device).await,
        connection.send(&push, &device).await,
        connection.send(&push, &device).await,
    ];
    assert!(
        matches!(results[0], Err(PushError::MaybeDelivered { .. })),
        "{results:?}"
    );
    assert!(
        matches!(results[1], Err(PushError::Retryable { status: None, .. })),
        "{results:?}"
    );
    assert_eq!(results[2], Ok(()), "then drawn: accepted");
    let stats = apns.stats();
    assert_eq!(
        (
            stats.resets_after_read,
            stats.refused_streams,
            stats.accepted
        ),
        (1, 1, 1)
    );
    assert_eq!(stats.delivered, 2, "the reset one reached the device");
}

#[tokio::test(start_paused = true)]
async fn a_prepared_pool_stays_under_the_stream_limit_and_pays_no_handshake_in_the_second() {
    use koe::push::pool::{PoolSettings, PushPool};

    let apns = LimitedApns::new(ApnsLimits::default());
    let factory = {
        let apns = apns.clone();
        Arc::new(move || apns.connection())
    };
    let pool = Arc::new(PushPool::new(factory, PoolSettings::default()));
    pool.prepare(2_500).await;
    assert_eq!(apns.stats().connections_opened, 3);

    let pool: Arc<dyn PushSender> = pool;
    send_all(&pool, 2_500).join_all().await;
    let stats = apns.stats();
    assert_eq!(stats.connections_opened, 3);
    assert_eq!(stats.connections_used, 3);
    assert_eq!(stats.cold_connects, 0);
    assert_eq!(
        stats.queued, 0,
        "the pool keeps each connection under 1,000"
    );
    assert!(stats.max_in_flight_per_connection <= 900, "{stats:?}");
    assert_eq!(stats.accepted, 2_500);
}
