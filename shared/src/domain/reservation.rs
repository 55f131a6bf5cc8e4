//! Call reservations: at most one per device, `scheduled` → `claimed` → `sent` | `failed`,
//! `scheduled` → `missed`, `scheduled` → `cancelled` (read as absent: the API's "deleted").

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, Utc};
use serde::Serialize;

use super::Invalid;
use super::device::DeviceId;

/// How soon a reservation may be: the dispatcher needs a moment to see it.
pub const MIN_LEAD: Duration = Duration::seconds(10);
/// How far ahead a reservation may be.
pub const MAX_LEAD: Duration = Duration::days(30);
/// Longest `callerName`, in characters.
pub const MAX_CALLER_NAME_CHARS: usize = 64;
/// Terminal records stay readable (GET /calls) this long, then expire by TTL.
pub const TERMINAL_RETENTION: Duration = Duration::days(7);
/// Every reservation carries a TTL from its creation: this long after its scheduled time, past
/// any outcome (the grace period and claim timeout are at most an hour and ten minutes, the
/// template's bounds) plus [`TERMINAL_RETENTION`]. So a reservation that no run ever finishes
/// (the dispatcher down for days, a bug) is deleted by DynamoDB's TTL instead of staying for ever.
pub const UNFINISHED_EXPIRY: Duration = Duration::days(8);

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct CallId(String);

impl CallId {
    /// 32 hex digits from the operating system's random generator (a call id keys its claim
    /// and its tombstone: it must not repeat across processes).
    pub fn generate() -> CallId {
        CallId(super::random_hex::<16>())
    }

    pub fn from_stored(raw: String) -> CallId {
        CallId(raw)
    }

    /// A `callId` as the API gives it out: 32 lowercase hexadecimal digits.
    pub fn parse(field: &str, raw: &str) -> Result<CallId, Invalid> {
        if raw.len() == 32 && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(CallId(raw.to_owned()))
        } else {
            Err(Invalid::new(
                field,
                "must be a callId as POST /calls answered it (32 lowercase hex digits)",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The token of one dispatch run: every write the run makes on a reservation (claim, push mark,
/// outcome, release) carries it, and each such write's condition also accepts a record that
/// already holds it. So a write whose reply was lost or came too late is resolved by its own run
/// by making it again: the answer says whether the record is this run's (docs/reliability.md,
/// "Lost replies"). 128 random bits from the operating system, as hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunToken(String);

impl RunToken {
    pub fn generate() -> RunToken {
        RunToken(super::random_hex::<16>())
    }

    pub fn from_stored(raw: String) -> RunToken {
        RunToken(raw)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReservationStatus {
    Scheduled,
    Claimed,
    Sent,
    Failed,
    Missed,
    /// Cancelled by its device. Kept (with its `callId`) as a tombstone until its TTL, so that a
    /// retry of the create that made it can never bring it back; every read of the API treats it
    /// as absent, and a new reservation replaces it.
    Cancelled,
    /// Its device (one that confirms its call pushes) confirmed a push: the phone rang.
    Rang,
    /// Every push left (or the grace period ended), and none was confirmed by the end of the
    /// last wait.
    Unconfirmed,
}

impl ReservationStatus {
    pub const ALL: [ReservationStatus; 8] = [
        ReservationStatus::Scheduled,
        ReservationStatus::Claimed,
        ReservationStatus::Sent,
        ReservationStatus::Failed,
        ReservationStatus::Missed,
        ReservationStatus::Cancelled,
        ReservationStatus::Rang,
        ReservationStatus::Unconfirmed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReservationStatus::Scheduled => "scheduled",
            ReservationStatus::Claimed => "claimed",
            ReservationStatus::Sent => "sent",
            ReservationStatus::Failed => "failed",
            ReservationStatus::Missed => "missed",
            ReservationStatus::Cancelled => "cancelled",
            ReservationStatus::Rang => "rang",
            ReservationStatus::Unconfirmed => "unconfirmed",
        }
    }

    pub fn from_stored(raw: &str) -> Option<ReservationStatus> {
        ReservationStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == raw)
    }

    /// Sent, failed, missed and cancelled records are history: a new POST may replace them.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ReservationStatus::Sent
                | ReservationStatus::Failed
                | ReservationStatus::Missed
                | ReservationStatus::Cancelled
                | ReservationStatus::Rang
                | ReservationStatus::Unconfirmed
        )
    }
}

/// A reservation time: RFC 3339 with an explicit offset, at least [`MIN_LEAD`] and at most
/// [`MAX_LEAD`] after `now`. Keeps the client's offset for display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledAt(DateTime<FixedOffset>);

impl ScheduledAt {
    pub fn parse(field: &str, raw: &str, now: DateTime<Utc>) -> Result<ScheduledAt, Invalid> {
        let at = DateTime::parse_from_rfc3339(raw).map_err(|_| {
            Invalid::new(
                field,
                "must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T07:00:00+09:00",
            )
        })?;
        let lead = at.with_timezone(&Utc) - now;
        if lead < MIN_LEAD || lead > MAX_LEAD {
            return Err(Invalid::new(
                field,
                "must be at least 10 seconds and at most 30 days ahead",
            ));
        }
        Ok(ScheduledAt(at))
    }

    pub fn from_stored(at: DateTime<FixedOffset>) -> ScheduledAt {
        ScheduledAt(at)
    }

    pub fn utc(self) -> DateTime<Utc> {
        self.0.with_timezone(&Utc)
    }

    pub fn with_offset(self) -> DateTime<FixedOffset> {
        self.0
    }

    /// The dispatcher's time bucket: the UTC minute, e.g. `2026-01-01T22:00Z`.
    pub fn due_minute(self) -> String {
        minute_bucket(self.utc())
    }
}

/// The time-bucket key of the minute containing `t`.
pub fn minute_bucket(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%MZ").to_string()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub call_id: CallId,
    pub device_id: DeviceId,
    pub scheduled_at: ScheduledAt,
    pub status: ReservationStatus,
    pub caller_name: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Time of the last state change.
    pub updated_at: DateTime<Utc>,
    /// Set while `claimed` (and kept after): when the dispatcher claimed it.
    pub claimed_at: Option<DateTime<Utc>>,
    /// Set by the claiming run just before it pushes (`Store::mark_push_started`): from then on
    /// the push may have left, so the claim is never taken over (a run that dies after this
    /// leaves the call `failed`, never pushed twice).
    pub push_started_at: Option<DateTime<Utc>>,
    /// Set by a claim made [`ClaimMark::InBatch`](crate::store::ClaimMark::InBatch): the batch
    /// (a tenth of a second, by its start) whose mark (`Store::mark_batch`, one write for all of
    /// a run's pushes in it) stands for this call's push mark. A claim abandoned with it is
    /// taken over only once its batch is fenced (`Store::fence_batch`) and the claim settled
    /// (`Store::settle_batch`).
    pub mark_batch: Option<DateTime<Utc>>,
    /// The token of the run that claimed it (`claimToken`), while and after `claimed`.
    pub claimed_by: Option<RunToken>,
    /// The token of the run that recorded its outcome (`finishToken`), once terminal.
    pub finished_by: Option<RunToken>,
    /// When its next push is due: `scheduled_at` for the first, the end of the confirmation wait
    /// for a push again (a device that confirms its calls). The bucket index's sort key
    /// (`scheduledAtMs`).
    pub due_at: DateTime<Utc>,
    /// How many pushes left for it (or may have: a push whose run stopped after its mark).
    pub pushes: u32,
    /// The push being made now is to a device that confirms its calls (set with the push mark):
    /// if its run stops, the push counts as left and a later run pushes again.
    pub confirms: bool,
    /// When its device confirmed a push (`rang`).
    pub rang_at: Option<DateTime<Utc>>,
    /// The run that claimed its missed-call notice (`noticeClaim`; docs/dispatch.md,
    /// "Missed-call notice").
    pub notice_claimed_by: Option<RunToken>,
    /// When its missed-call notice left (`noticeSentAt` in the API).
    pub notice_sent_at: Option<DateTime<Utc>>,
    /// Its notice was released for a later run (`noticeRetry`: every push of it surely failed)
    /// and is back in the bucket index, due at `due_at`, until a run claims it again.
    pub notice_retry: bool,
    /// TTL (epoch seconds) after which the record is gone: from creation
    /// [`UNFINISHED_EXPIRY`] after the scheduled time, from its outcome [`TERMINAL_RETENTION`]
    /// after that. `None` only on records written before every reservation had one.
    pub expire_at: Option<i64>,
}

impl Reservation {
    pub fn new(
        device_id: DeviceId,
        scheduled_at: ScheduledAt,
        caller_name: Option<String>,
        now: DateTime<Utc>,
    ) -> Reservation {
        Reservation {
            call_id: CallId::generate(),
            device_id,
            scheduled_at,
            status: ReservationStatus::Scheduled,
            caller_name,
            created_at: now,
            updated_at: now,
            claimed_at: None,
            push_started_at: None,
            mark_batch: None,
            claimed_by: None,
            finished_by: None,
            due_at: scheduled_at.utc(),
            pushes: 0,
            confirms: false,
            rang_at: None,
            notice_claimed_by: None,
            notice_sent_at: None,
            notice_retry: false,
            expire_at: Some((scheduled_at.utc() + UNFINISHED_EXPIRY).timestamp()),
        }
    }

    /// True once TTL has passed: treated as absent even before DynamoDB deletes it.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expire_at.is_some_and(|t| t <= now.timestamp())
    }

    /// Its status as the API shows it: a `scheduled` reservation due before `missed_before`
    /// (now minus the grace period) can no longer ring, so it reads as `missed` whether or not
    /// a dispatch run has recorded it yet (the next run that selects it does).
    pub fn status_seen(&self, missed_before: DateTime<Utc>) -> ReservationStatus {
        match self.status {
            // A push left and the next waits for the device's confirmation.
            ReservationStatus::Scheduled | ReservationStatus::Claimed if self.pushes > 0 => {
                ReservationStatus::Sent
            }
            ReservationStatus::Scheduled if self.scheduled_at.utc() < missed_before => {
                ReservationStatus::Missed
            }
            status => status,
        }
    }
}

/// Expiry (epoch seconds) of a record that became terminal at `at`.
pub fn terminal_expiry(at: DateTime<Utc>) -> i64 {
    (at + TERMINAL_RETENTION).timestamp()
}

pub fn rfc3339_millis(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The JSON view of a reservation, as the API returns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationView {
    pub call_id: String,
    pub device_id: String,
    pub scheduled_at: String,
    pub status: ReservationStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_name: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// How many pushes left for it.
    pub pushes: u32,
    /// When its device confirmed a push (status `rang`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rang_at: Option<String>,
    /// When its missed-call notice left (an alert push to the device's `alertToken`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice_sent_at: Option<String>,
}

impl ReservationView {
    /// The view with the status as the API shows it at a moment ([`Reservation::status_seen`]).
    pub fn seen(r: &Reservation, missed_before: DateTime<Utc>) -> ReservationView {
        ReservationView {
            status: r.status_seen(missed_before),
            ..ReservationView::from(r)
        }
    }
}

impl From<&Reservation> for ReservationView {
    fn from(r: &Reservation) -> ReservationView {
        ReservationView {
            call_id: r.call_id.as_str().to_owned(),
            device_id: r.device_id.as_str().to_owned(),
            scheduled_at: r
                .scheduled_at
                .with_offset()
                .to_rfc3339_opts(SecondsFormat::AutoSi, true),
            status: r.status,
            caller_name: r.caller_name.clone(),
            created_at: rfc3339_millis(r.created_at),
            updated_at: rfc3339_millis(r.updated_at),
            pushes: r.pushes,
            rang_at: r.rang_at.map(rfc3339_millis),
            notice_sent_at: r.notice_sent_at.map(rfc3339_millis),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn scheduled_at_needs_an_offset_and_a_lead_of_10s_to_30_days() {
        let ok = ScheduledAt::parse("scheduledAt", "2026-01-01T09:00:10+09:00", now()).unwrap();
        assert_eq!(ok.utc(), now() + Duration::seconds(10));
        assert_eq!(ok.due_minute(), "2026-01-01T00:00Z");
        assert!(ScheduledAt::parse("scheduledAt", "2026-01-01T00:00:09Z", now()).is_err());
        assert!(ScheduledAt::parse("scheduledAt", "2026-01-31T00:00:00Z", now()).is_ok());
        assert!(ScheduledAt::parse("scheduledAt", "2026-01-31T00:00:01Z", now()).is_err());
        let no_offset =
            ScheduledAt::parse("scheduledAt", "2026-01-01T00:01:00", now()).unwrap_err();
        assert!(
            no_offset
                .to_string()
                .starts_with("scheduledAt must be an RFC 3339")
        );
    }

    #[test]
    fn the_view_keeps_the_clients_offset() {
        let at = ScheduledAt::parse("scheduledAt", "2026-01-01T09:30:00+09:00", now()).unwrap();
        let device = DeviceId::parse("deviceId", "d1").unwrap();
        let r = Reservation::new(device, at, None, now());
        let view = serde_json::to_value(ReservationView::from(&r)).unwrap();
        assert_eq!(view["scheduledAt"], "2026-01-01T09:30:00+09:00");
        assert_eq!(view["status"], "scheduled");
        assert!(view.get("callerName").is_none());
    }

    #[test]
    fn run_tokens_are_128_random_bits() {
        let (a, b) = (RunToken::generate(), RunToken::generate());
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn statuses_round_trip_and_know_which_are_terminal() {
        for s in ReservationStatus::ALL {
            assert_eq!(ReservationStatus::from_stored(s.as_str()), Some(s));
        }
        assert!(!ReservationStatus::Scheduled.is_terminal());
        assert!(!ReservationStatus::Claimed.is_terminal());
        assert!(ReservationStatus::Missed.is_terminal());
    }
}
