//! The parts: a part's own process, and the trigger that starts one per handed-out part.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::dispatch::RunCause;
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe::domain::due::Part;
use koe::store::memory::MemoryStore;
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::Limits;
use koe_testkit::push::limited::{ApnsLimits, LimitedApns};

use crate::args::Args;
use crate::measured::Measured;
use crate::setup::{PART_MB, dispatch_store, dispatcher, model, seed, settings};

/// A part's process: the same reservations, this part of the window, results to `--out`.
pub(super) async fn run_part(args: Args, (index, of): (u32, u32)) {
    let t0 = DateTime::from_timestamp_millis(args.t0_ms.expect("--t0-ms")).unwrap();
    let inner = Arc::new(MemoryStore::new());
    let scheduled = seed(&inner, &args, t0).await;
    assert!(
        Utc::now() < t0 - chrono::Duration::seconds(4),
        "part {index}: set-up ended too late to select in time"
    );
    // The tables' throughput is shared by every part: each process models its share.
    let store = Arc::new(LimitedStore::new(
        inner,
        model(Limits::from_env().table_share(of), t0),
    ));
    let (dispatched, held) = dispatch_store(&store, &args, t0, 2 + u64::from(index));
    let apns = LimitedApns::new(ApnsLimits::default());
    let dispatcher = dispatcher(dispatched, &apns, settings(&args, t0, PART_MB));
    let part = Part::new(index, of).expect("--part < --of");
    let report = dispatcher.run_part(RunCause::Part, part).await;
    Measured::of(&report, &store, held.as_deref(), &apns, &scheduled)
        .write(args.out.as_ref().expect("--out"));
}

/// Starts each handed-out part as a process of its own.
pub(super) struct ProcessTrigger {
    pub(super) args: Args,
    pub(super) t0: DateTime<Utc>,
    pub(super) dir: PathBuf,
    pub(super) started: Mutex<Vec<(Child, PathBuf)>>,
}

#[async_trait]
impl DispatchTrigger for ProcessTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError("not used".into()))
    }

    async fn hand_out(&self, parts: &[Part]) -> Result<(), TriggerError> {
        let me = std::env::current_exe().map_err(|e| TriggerError(e.to_string()))?;
        for part in parts {
            let out = self
                .dir
                .join(format!("part-{}-of-{}.txt", part.index, part.of));
            let mut command = Command::new(&me);
            command
                .args(["--calls", &self.args.calls.to_string()])
                .args([
                    "--calls-per-worker",
                    &self.args.calls_per_worker.to_string(),
                ])
                .args([
                    "--part",
                    &part.index.to_string(),
                    "--of",
                    &part.of.to_string(),
                ])
                .args(["--t0-ms", &self.t0.timestamp_millis().to_string()])
                .args(["--held", &self.args.held.to_string()])
                .args(["--hold-ms", &self.args.hold_ms.to_string()])
                .args([
                    "--window-ms",
                    &format!("{},{}", self.args.window_ms.0, self.args.window_ms.1),
                ])
                .arg("--out")
                .arg(&out)
                .stdout(Stdio::null());
            if self.args.spike {
                command.arg("--spike");
            }
            if let Some(n) = self.args.store_concurrency {
                command.args(["--store-concurrency", &n.to_string()]);
            }
            let child = command.spawn().map_err(|e| TriggerError(e.to_string()))?;
            self.started.lock().unwrap().push((child, out));
        }
        Ok(())
    }
}
