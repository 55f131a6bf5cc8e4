//! A proxy in front of DynamoDB Local that loses replies: it forwards every request, and for the
//! next requests matching a rule (operation and a piece of the body) it lets the write happen,
//! then closes the connection without answering, as a network failure after the request
//! reached DynamoDB would. The SDK sees an I/O error and retries the same request, whose
//! condition now meets the item its first attempt wrote: what the fault tests check is that
//! such a retry is recognised as the write that already happened. It can also refuse requests
//! (DynamoDB's 500 `InternalServerError`, nothing carried out), for a store error that is not
//! a lost write, and hold replies back (the write happens at once, its answer comes late), as
//! a slow network or a busy DynamoDB front end would: past the client's attempt timeout, the
//! answer is as good as lost. It also watches requests ([`Watch`]): how many of a kind are out
//! at once, as DynamoDB sees them, and when each was answered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::front;
use crate::loopback::Loopback;

/// Which replies to lose: the next `remaining` requests of `operation` (`UpdateItem`,
/// `PutItem`, ...; empty: any) whose JSON body contains `needle`, received within `window` if
/// it has one.
struct Rule {
    operation: String,
    needle: String,
    remaining: usize,
    action: Action,
    window: Option<(Instant, Instant)>,
}

#[derive(Clone, Copy, PartialEq)]
enum Action {
    /// Forward, then close the connection unanswered.
    Drop,
    /// Answer 500 without forwarding (nothing written).
    Refuse,
    /// Forward, then answer only this much later.
    Hold(Duration),
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    rules: Mutex<Vec<Rule>>,
    dropped: AtomicUsize,
    /// Requests of each rule's operation seen (the SDK's retries included).
    seen: Mutex<Vec<String>>,
    watches: Mutex<Vec<Arc<Watch>>>,
    /// A brownout: every request's first sending answered this late, its SDK retries this late.
    brownout: Mutex<Option<(Duration, Duration)>>,
    /// Requests still let through before every later one is refused unforwarded (a process
    /// stopped after that many requests: nothing after them reaches DynamoDB).
    let_through: Mutex<Option<usize>>,
}

/// The forwarded requests that match any of its (operation, piece of the body) pairs: how many
/// were in flight at once at most, and when each was answered (or its reply lost).
pub struct Watch {
    matches: Vec<(String, String)>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
    answered: Mutex<Vec<Instant>>,
}

impl Watch {
    /// The most matching requests in flight at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    /// When each matching request was answered, in order.
    pub fn answered(&self) -> Vec<Instant> {
        self.answered.lock().unwrap().clone()
    }

    fn matches(&self, operation: &str, body: &str) -> bool {
        self.matches
            .iter()
            .any(|(op, needle)| (op.is_empty() || op == operation) && body.contains(needle))
    }
}

/// One watched request in flight: counted out when dropped (answered, refused or lost).
struct Watched(Vec<Arc<Watch>>);

impl Watched {
    fn start(shared: &Shared, operation: &str, body: &[u8]) -> Watched {
        let text = String::from_utf8_lossy(body);
        let watches: Vec<_> = shared
            .watches
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.matches(operation, &text))
            .cloned()
            .collect();
        for w in &watches {
            let now = w.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            w.most.fetch_max(now, Ordering::SeqCst);
        }
        Watched(watches)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for w in &self.0 {
            w.in_flight.fetch_sub(1, Ordering::SeqCst);
            w.answered.lock().unwrap().push(Instant::now());
        }
    }
}

pub struct ReplyDropper {
    server: Loopback,
    shared: Arc<Shared>,
}

impl ReplyDropper {
    /// Forwards to the DynamoDB at `upstream` (an `http://host:port` URL).
    pub async fn start(upstream: &str) -> ReplyDropper {
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            rules: Mutex::new(Vec::new()),
            dropped: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            watches: Mutex::new(Vec::new()),
            brownout: Mutex::new(None),
            let_through: Mutex::new(None),
        });
        let server = front::start_proxy("the reply dropper", &shared, forward).await;
        ReplyDropper { server, shared }
    }

    /// The endpoint clients use instead of DynamoDB's.
    pub fn endpoint(&self) -> String {
        self.server.url()
    }

    /// Loses the replies of the next `times` requests of `operation` whose body contains
    /// `needle` (after DynamoDB has carried them out).
    pub fn drop_replies(&self, operation: &str, needle: &str, times: usize) {
        self.add(operation, needle, times, Action::Drop, None);
    }

    /// Holds back the replies of the next `times` requests of `operation` whose body contains
    /// `needle` by `hold` (after DynamoDB has carried them out).
    pub fn hold_replies(&self, operation: &str, needle: &str, times: usize, hold: Duration) {
        self.add(operation, needle, times, Action::Hold(hold), None);
    }

    /// Holds back by `hold` the reply of every request of `operation` (empty: any operation)
    /// received between `from` and `until` (a slow window), after DynamoDB has carried it out.
    pub fn hold_replies_between(
        &self,
        operation: &str,
        hold: Duration,
        from: Instant,
        until: Instant,
    ) {
        self.add(
            operation,
            "",
            usize::MAX,
            Action::Hold(hold),
            Some((from, until)),
        );
    }

    fn add(
        &self,
        operation: &str,
        needle: &str,
        times: usize,
        action: Action,
        window: Option<(Instant, Instant)>,
    ) {
        self.shared.rules.lock().unwrap().push(Rule {
            operation: operation.to_owned(),
            needle: needle.to_owned(),
            remaining: times,
            action,
            window,
        });
    }

    /// Answers the next `times` requests of `operation` whose body contains `needle` with
    /// DynamoDB's 500 `InternalServerError`, without forwarding them (nothing is written).
    pub fn refuse_requests(&self, operation: &str, needle: &str, times: usize) {
        self.add(operation, needle, times, Action::Refuse, None);
    }

    /// A brownout of every request, as DynamoDB's front end has them: each request is carried
    /// out at once, its answer comes `first` late on its first sending (past the SDK's attempt
    /// timeout: as good as lost) and `retry` late on the SDK's retries (header
    /// `amz-sdk-request: attempt=N`).
    pub fn brownout(&self, first: Duration, retry: Duration) {
        *self.shared.brownout.lock().unwrap() = Some((first, retry));
    }

    /// Forwards the next `n` requests, then refuses every later one without forwarding it: what
    /// DynamoDB sees of a process stopped after its `n`th request.
    pub fn stop_after(&self, n: usize) {
        *self.shared.let_through.lock().unwrap() = Some(n);
    }

    /// Forgets every rule: from now on every request is forwarded and answered as it comes.
    pub fn clear(&self) {
        self.shared.rules.lock().unwrap().clear();
        *self.shared.brownout.lock().unwrap() = None;
        *self.shared.let_through.lock().unwrap() = None;
    }

    /// How many replies were lost, held back or refused so far.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Watches the requests from now on that match any of `matches` (operation, empty: any; a
    /// piece of the JSON body).
    pub fn watch(&self, matches: &[(&str, &str)]) -> Arc<Watch> {
        let watch = Arc::new(Watch {
            matches: matches
                .iter()
                .map(|(op, needle)| ((*op).to_owned(), (*needle).to_owned()))
                .collect(),
            in_flight: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            answered: Mutex::new(Vec::new()),
        });
        self.shared.watches.lock().unwrap().push(watch.clone());
        watch
    }

    /// The operations of every request forwarded so far, in order (`UpdateItem`, ...).
    pub fn operations(&self) -> Vec<String> {
        self.shared.seen.lock().unwrap().clone()
    }
}

/// Forwards one request; `Err` (after the upstream answered) closes the connection unanswered.
async fn forward(
    shared: Arc<Shared>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<front::Response, std::io::Error> {
    let shared = shared.as_ref();
    let io = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(|e| io(&e))?.to_bytes();
    let operation = front::operation(&parts.headers);
    shared.seen.lock().unwrap().push(operation.clone());
    let _watched = Watched::start(shared, &operation, &body);
    let received = Instant::now();
    let mut action = take_rule(shared, &operation, &body, received);
    if let Some(left) = shared.let_through.lock().unwrap().as_mut() {
        if *left == 0 {
            action = Some(Action::Refuse);
        } else {
            *left -= 1;
        }
    }
    if action.is_none()
        && let Some((first, retry)) = *shared.brownout.lock().unwrap()
    {
        let attempt = parts
            .headers
            .get("amz-sdk-request")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("attempt=1");
        let first_sending = attempt.split(';').any(|p| p.trim() == "attempt=1");
        action = Some(Action::Hold(if first_sending { first } else { retry }));
    }
    if action == Some(Action::Refuse) {
        shared.dropped.fetch_add(1, Ordering::SeqCst);
        return Ok(hyper::Response::builder()
            .status(500)
            .header("content-type", "application/x-amz-json-1.0")
            .body(Full::new(Bytes::from_static(
                br#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error (test)"}"#,
            )))
            .expect("a valid response"));
    }
    let mut upstream = shared
        .client
        .request(
            parts.method.clone(),
            format!("{}{}", shared.upstream, parts.uri),
        )
        .body(body.clone());
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            upstream = upstream.header(name, value);
        }
    }
    let answer = upstream.send().await.map_err(|e| io(&e))?;
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.map_err(|e| io(&e))?;
    match action {
        Some(Action::Drop) => {
            shared.dropped.fetch_add(1, Ordering::SeqCst);
            return Err(std::io::Error::other("reply lost (test)"));
        }
        Some(Action::Hold(hold)) => {
            shared.dropped.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep_until((received + hold).into()).await;
        }
        Some(Action::Refuse) | None => {}
    }
    Ok(front::respond(status.as_u16(), &headers, bytes))
}

/// The action of the first rule that applies to the request (received at `at`), counting it
/// down.
fn take_rule(shared: &Shared, operation: &str, body: &[u8], at: Instant) -> Option<Action> {
    let text = String::from_utf8_lossy(body);
    let mut rules = shared.rules.lock().unwrap();
    let rule = rules.iter_mut().find(|r| {
        r.remaining > 0
            && (r.operation.is_empty() || r.operation == operation)
            && text.contains(&r.needle)
            && r.window
                .is_none_or(|(from, until)| from <= at && at < until)
    })?;
    rule.remaining -= 1;
    Some(rule.action)
}
