//! The [`Dispatcher`]: the ports and settings every run of it shares (its runs: `run`).

use std::sync::Arc;

use super::in_flight::InFlight;
use super::plan::WritePlan;
use super::store_gate::StoreGate;
use super::sweep::Sweep;
use super::trigger::DispatchTrigger;
use crate::platform::clock::Clock;
use crate::platform::config::DispatchConfig;
use crate::platform::metrics::Metrics;
use crate::push::PushSender;
use crate::store::prelude::*;

/// The dispatcher's ports and settings. Cheap to clone; build one per run or keep one.
#[derive(Clone)]
pub struct Dispatcher {
    pub(super) store: Arc<dyn Store>,
    pub(super) push: Arc<dyn PushSender>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: DispatchConfig,
    /// Salt of the device hashes in logs.
    pub(super) salt: String,
    pub(super) in_flight: InFlight,
    /// The minutes this process's runs have selected (`sweep`).
    pub(super) sweep: Sweep,
    /// Where a coordinating run hands out parts of a big minute (`fan_out`).
    pub(super) fan_out: Option<Arc<dyn DispatchTrigger>>,
    /// Where each run's metrics go (`dispatch::metrics`).
    pub(super) metrics: Metrics,
    /// When this process's runs make each call's writes (`plan`).
    pub(super) plan: WritePlan,
    /// How many of this process's store requests are out at once (`store_gate`).
    pub(super) store_gate: Arc<StoreGate>,
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        push: Arc<dyn PushSender>,
        clock: Arc<dyn Clock>,
        settings: DispatchConfig,
        salt: impl Into<String>,
    ) -> Dispatcher {
        Dispatcher {
            plan: WritePlan::new(settings.write_budget),
            store_gate: Arc::new(StoreGate::new(settings.store_concurrency)),
            store,
            push,
            clock,
            settings,
            salt: salt.into(),
            in_flight: InFlight::default(),
            sweep: Sweep::default(),
            fan_out: None,
            metrics: Metrics::off(),
        }
    }

    /// Each run's metrics to `metrics` (EMF lines, dimension `Function` = its function).
    pub fn measured_by(mut self, metrics: Metrics) -> Dispatcher {
        self.metrics = metrics;
        self
    }

    /// Runs of dispatchers that share an [`InFlight`] leave each other's calls alone (a
    /// process's overlapping runs). Runs in different processes do not know of each other;
    /// there the claim keeps each call to one push.
    pub fn sharing(mut self, in_flight: InFlight) -> Dispatcher {
        self.in_flight = in_flight;
        self
    }

    pub fn settings(&self) -> &DispatchConfig {
        &self.settings
    }
}
