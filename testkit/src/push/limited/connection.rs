//! One simulated connection: its handshake, its streams, and each push's latency and answer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use koe::domain::device::Device;
use koe::push::{PushError, PushSender, VoipPush};
use tokio::time::Instant;

use super::{Answer, ApnsRecord, LimitedConnection, Shared, call_key};

impl Shared {
    /// How long the next push takes and how it is answered.
    fn draw(&self) -> (Duration, Answer) {
        let limits = &self.limits;
        let mut rng = self.rng.lock().unwrap();
        let jitter = limits.jitter.as_micros() as i64;
        let micros = limits.latency.as_micros() as i64 + rng.i64(-jitter..=jitter);
        let roll = rng.f64();
        let scripted = self.scripted.lock().unwrap().pop_front();
        let answer = if let Some(answer) = scripted {
            answer
        } else if roll < limits.p429 {
            Answer::TooManyRequests
        } else if roll < limits.p429 + limits.p500 {
            Answer::InternalServerError
        } else if roll < limits.p429 + limits.p500 + limits.p410 {
            Answer::Unregistered
        } else {
            Answer::Accepted
        };
        (Duration::from_micros(micros.max(0) as u64), answer)
    }
}

impl LimitedConnection {
    async fn connect(&self, by_a_push: bool) {
        self.state
            .handshake
            .get_or_init(|| async {
                if by_a_push {
                    self.shared.cold_connects.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(self.shared.limits.connect_time).await;
            })
            .await;
    }
}

#[async_trait]
impl PushSender for LimitedConnection {
    async fn send(&self, push: &VoipPush, _: &Device) -> Result<(), PushError> {
        let sent = Instant::now();
        self.state.used.fetch_add(1, Ordering::Relaxed);
        self.connect(true).await;
        let stream = match self.state.streams.try_acquire() {
            Ok(stream) => stream,
            Err(_) => {
                self.shared.queued.fetch_add(1, Ordering::Relaxed);
                self.state.streams.acquire().await.expect("never closed")
            }
        };
        let left = Instant::now();
        let in_flight = self.state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.state
            .max_in_flight
            .fetch_max(in_flight, Ordering::SeqCst);
        let (latency, answer) = self.shared.draw();
        tokio::time::sleep(latency).await;
        self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        drop(stream);
        self.shared.records.lock().unwrap().push(ApnsRecord {
            call: call_key(&push.call_id),
            connection: self.id,
            sent,
            left,
            answered: Instant::now(),
            answer,
        });
        answer.result()
    }

    /// Performs the handshake now (taking `connect_time`) if no push has started it.
    async fn warm(&self) {
        self.connect(false).await;
    }
}
