//! Every test of the library that needs no process of its own, as one binary (one link of the
//! SDK, reqwest, h2 and jsonwebtoken instead of one per file). The log tests, which install a
//! global subscriber, are binaries of their own beside this folder.

/// Runs each named `async fn name(store: Arc<dyn Store>)` of the calling file once per store
/// adapter, as `memory::name` (the in-memory store) and `dynamodb::name` (DynamoDB Local, fresh
/// tables from `template.yaml` per test); the names after `multi_thread:` on two worker threads.
macro_rules! on_each_store {
    ($($name:ident),* $(,)? $(; multi_thread: $($threaded:ident),* $(,)?)?) => {
        on_each_store!(@adapters $($name),*; threads 2: $($($threaded),*)?);
    };
    // Both adapters' instantiations, the `threaded` ones on `threads` worker threads.
    (@adapters $($name:ident),*; threads $threads:tt: $($threaded:ident),*) => {
        mod memory {
            on_each_store!(@store koe::store::memory::MemoryStore::new();
                $($name),*; threads $threads: $($threaded),*);
        }

        mod dynamodb {
            on_each_store!(@store koe_testkit::dynamodb::fresh_store().await;
                $($name),*; threads $threads: $($threaded),*);
        }
    };
    // One store's instantiation: `store()` and a test per name, the `threaded` ones on that
    // many worker threads.
    (@store $store:expr; $($name:ident),* $(,)?; threads $threads:tt: $($threaded:ident),* $(,)?) => {
        async fn store() -> std::sync::Arc<dyn koe::store::Store> {
            std::sync::Arc::new($store)
        }

        $(
            #[tokio::test]
            async fn $name() {
                super::$name(store().await).await;
            }
        )*

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
            async fn $threaded() {
                super::$threaded(store().await).await;
            }
        )*
    };
}

mod agent_auth;
mod agent_device_secret;
mod agent_limit;
mod alarm_evaluation;
mod api_agent;
mod api_calls;
mod api_calls_confirm;
mod api_calls_refusals;
mod api_chat;
mod api_chat_stream;
mod api_devices;
mod api_idempotency;
mod api_meta;
mod apns_connections;
mod apns_errors;
mod apns_outside;
mod apns_strict;
mod capacity_table;
mod contract_files;
mod count_estimate;
mod deadlines;
mod deploy_apns_steps;
mod deploy_commands;
mod deploy_first_create;
mod dispatch_budget;
mod dispatch_confirm;
mod dispatch_fan_out;
mod dispatch_held_replies;
mod dispatch_inflated_count;
mod dispatch_killed_run;
mod dispatch_lambda;
mod dispatch_late_push;
mod dispatch_load;
mod dispatch_notice;
mod dispatch_notice_retry;
mod dispatch_outage;
mod dispatch_push_again;
mod dispatch_push_unknown;
mod dispatch_runs;
mod dispatch_strict_apns;
mod dispatch_wake;
mod dispatch_world;
mod dispatch_writes;
mod docs_facts;
mod docs_links;
mod docs_tables;
mod dynamodb_tables;
mod faults_dispatch;
mod faults_dispatch_writes;
mod faults_dynamodb;
mod faults_lost_replies;
mod faults_oversized_bodies;
mod faults_provider;
mod faults_slow_replies;
mod faults_throttling;
mod gateway_front;
mod lambda_fixtures;
mod layers;
mod local_model;
mod local_secrets;
mod observability;
mod observability_template;
mod oidc;
mod spend_guard;
mod spend_guard_paths;
mod spend_guard_scale;
mod store_contract;
mod store_contract_confirm;
mod store_contract_refusals;
mod store_contract_watch;
mod template_choices;
mod template_secrets;
mod template_settings;
mod time_budgets;
mod wiring_modes;
