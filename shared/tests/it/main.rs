//! Every test of the library that needs no process of its own, as one binary (one link of the
//! SDK, reqwest, a2 and jsonwebtoken instead of one per file). The log tests, which install a
//! global subscriber, are binaries of their own beside this folder.

mod agent_auth;
mod agent_limit;
mod api_agent;
mod api_calls;
mod api_chat;
mod api_chat_stream;
mod api_devices;
mod api_idempotency;
mod api_meta;
mod apns_errors;
mod contract_files;
mod deploy_commands;
mod dispatch_fan_out;
mod dispatch_held_replies;
mod dispatch_inflated_count;
mod dispatch_lambda;
mod dispatch_late_push;
mod dispatch_load;
mod dispatch_runs;
mod docs_links;
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
mod observability;
mod observability_template;
mod oidc;
mod spend_guard;
mod spend_guard_paths;
mod store_contract;
mod template_secrets;
mod time_budgets;
mod wiring_modes;
