//! koe-local's dispatcher: a run at start-up, one at every UTC minute (as the deployed schedule
//! does; each stays until the latest call due in its window), and one for each
//! POST /internal/dispatch and each wake of POST /calls. On shutdown no new run starts and the
//! running ones finish.

use std::sync::Arc;

use koe::dispatch::trigger::RunRequests;
use koe::dispatch::{Dispatcher, RunCause};
use koe::platform::clock::Clock;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub async fn every_minute(
    dispatcher: Dispatcher,
    clock: Arc<dyn Clock>,
    requests: Arc<RunRequests>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut runs = JoinSet::new();
    let spawn_run = |runs: &mut JoinSet<()>, cause| {
        let dispatcher = dispatcher.clone();
        runs.spawn(async move {
            dispatcher.run(cause).await;
        });
    };
    let spawn_woken = |runs: &mut JoinSet<()>, until| {
        let dispatcher = dispatcher.clone();
        runs.spawn(async move {
            dispatcher.woken(until).await;
        });
    };
    spawn_run(&mut runs, RunCause::Local);
    loop {
        while runs.try_join_next().is_some() {}
        let now = clock.now();
        let next_minute =
            chrono::DateTime::from_timestamp((now.timestamp().div_euclid(60) + 1) * 60, 0)
                .expect("a representable minute");
        tokio::select! {
            () = clock.sleep_until(next_minute) => {
                if clock.now() >= next_minute {
                    spawn_run(&mut runs, RunCause::Local);
                }
            }
            request = requests.next() => match request {
                Some(until) => spawn_woken(&mut runs, until),
                None => spawn_run(&mut runs, RunCause::Request),
            },
            _ = stopped.wait_for(|stop| *stop) => break,
        }
    }
    if !runs.is_empty() {
        tracing::info!(runs = runs.len(), "waiting for dispatch runs to finish");
        let _ = tokio::time::timeout(crate::DISPATCH_SHUTDOWN_WAIT, runs.join_all()).await;
    }
}
