//! The table as a whole: writes on distinct partitions past the table's warm throughput, or the
//! per-table quota, answered with the SDK's `ThrottlingException` and its reason.

use aws_sdk_dynamodb::operation::put_item::PutItemError;

use super::*;

/// 150 reservations, each on its own device and due minute (no partition limit binds), through
/// a proxy whose tables take 100 WRU a second under the limit `limit` picks (the others the
/// defaults): 100 written, 50 throttled; the next one's throttling reason.
async fn past_the_table(limit: fn(&mut Limits) -> &mut f64) -> (Calls, Puts, String) {
    let mut limits = Limits::default();
    *limit(&mut limits) = 100.0;
    let calls = Calls::start(LimitsModel::with_frozen_clock(limits)).await;
    let client = calls.client(RetryConfig::disabled());
    let minute = |i: usize| format!("2026-01-01T{:02}:{:02}Z", i / 60, i % 60);
    let puts = put_all(&client, &calls.table, devices(150, minute)).await;
    assert_eq!((puts.written.len(), puts.throttled.len()), (100, 50));
    let err = client
        .put_item()
        .table_name(&calls.table)
        .set_item(Some(reservation("another", "2026-01-02T00:00Z", 1)))
        .send()
        .await
        .unwrap_err();
    let reason = match err.as_service_error() {
        Some(PutItemError::ThrottlingException(t)) => t.throttling_reasons()[0].clone(),
        _ => panic!("not a ThrottlingException: {}", DisplayErrorContext(&err)),
    };
    assert_eq!(
        reason.resource(),
        Some(
            format!(
                "arn:aws:dynamodb:{}:000000000000:table/{}",
                crate::dynamodb::REGION,
                calls.table
            )
            .as_str()
        )
    );
    (calls, puts, reason.reason().unwrap().to_owned())
}

#[tokio::test]
async fn writes_past_the_table_s_warm_throughput_are_throttled_at_the_table_and_not_written() {
    let (calls, puts, reason) = past_the_table(|l| &mut l.table_write_units).await;
    let stats = calls.proxy.stats();
    eprintln!("150 PutItems on distinct partitions, tables at 100 WRU/s: {stats}");
    assert_eq!(calls.stored().await, puts.written);
    let base = Target::base(&calls.table);
    assert_eq!(stats.throttled_table_by_target[&base], 51);
    assert_eq!(stats.throttled_partition(), 0);
    assert_eq!(stats.peak(&base).wcu, 100.0);
    assert_eq!(stats.peak(&calls.gsi()).wcu, 100.0);
    assert_eq!(reason, "TableWriteKeyRangeThroughputExceeded");
}

#[tokio::test]
async fn writes_past_the_per_table_quota_answer_account_limit_exceeded() {
    let (calls, _puts, reason) = past_the_table(|l| &mut l.quota_write_units).await;
    assert_eq!(calls.proxy.stats().throttled_table(), 51);
    assert_eq!(reason, "TableWriteAccountLimitExceeded");
}
