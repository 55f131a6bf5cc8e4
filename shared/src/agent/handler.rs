//! POST /agent: one round of agent mode. Round 1 is counted against the device's daily limit
//! and answered by the planner (a plan or the answer); round 2 is answered by the responder.
//! With `AGENT_REQUIRE_DEVICE_SECRET`, round 1 first needs the device's proven secret.

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::{HeaderName, HeaderValue, StatusCode};

use crate::agent::binding::{MAX_ANSWERS_PER_PLAN, Refusal, StepSigner};
use crate::agent::daily_limit::{self, Allowance};
use crate::agent::{planner, responder};
use crate::devices::{self, SecretRule};
use crate::domain::agent::{AgentReply, AgentReplyView, AgentRequest, Round1, Round2};
use crate::model::{ModelProvider, ProviderError};
use crate::platform::config::AgentConfig;
use crate::platform::error::{ApiError, ErrorCode};
use crate::platform::json::parse_object;
use crate::platform::{Request, Response, json_response};
use crate::store::UsageOutcome;
use crate::store::prelude::*;

pub const RATE_LIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub const RATE_LIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");

/// What the handler talks to.
pub struct AgentContext<'a> {
    pub model: &'a dyn ModelProvider,
    pub store: &'a dyn Store,
    pub now: DateTime<Utc>,
    pub settings: &'a AgentConfig,
    /// Total time for the round's provider work, the retry of an invalid output included.
    pub budget: Duration,
    pub signer: &'a StepSigner,
}

/// One round, its store counters and model calls all within the round's budget
/// (`PROVIDER_TIMEOUT_MS`), so that with its error notification it fits the function's timeout
/// (`crate::app::budgets`) however slow the store or the provider.
pub async fn agent(cx: &AgentContext<'_>, request: Request) -> Result<Response, ApiError> {
    let round = AgentRequest::parse(&parse_object(request.body())?)?;
    within_budget(cx.budget, async {
        match round {
            AgentRequest::Round1(round) => {
                // With `AGENT_REQUIRE_DEVICE_SECRET` (docs/security.md, "The agent's daily limit
                // and device ids"): before the daily limit counts anything.
                if cx.settings.require_device_secret {
                    devices::admitted(
                        cx.store,
                        &request,
                        &round.device_id,
                        cx.now,
                        &cx.settings.device_hash_salt,
                        SecretRule::Proven,
                    )
                    .await?;
                }
                round_1(cx, &round).await
            }
            AgentRequest::Round2(round) => round_2(cx, &round).await,
        }
    })
    .await
}

fn number(n: impl Into<u64>) -> HeaderValue {
    HeaderValue::from(n.into())
}

/// Runs the round within the budget (its counters and two completions must not together
/// outlast what API Gateway waits).
async fn within_budget<F>(budget: Duration, work: F) -> Result<Response, ApiError>
where
    F: std::future::Future<Output = Result<Response, ApiError>>,
{
    match tokio::time::timeout(budget, work).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                budget_ms = budget.as_millis() as u64,
                "agent round ran out of its time budget"
            );
            Err(ProviderError::Timeout.into())
        }
    }
}

fn answer(reply: &AgentReply, headers: Vec<(HeaderName, HeaderValue)>) -> Response {
    let mut response = json_response(StatusCode::OK, &AgentReplyView::from(reply));
    response.headers_mut().extend(headers);
    response
}

fn kind(reply: &AgentReply) -> (&'static str, usize) {
    match reply {
        AgentReply::Plan(steps) => ("plan", steps.len()),
        AgentReply::Answer { .. } => ("answer", 0),
    }
}

async fn round_1(cx: &AgentContext<'_>, round: &Round1) -> Result<Response, ApiError> {
    let limit = cx.settings.daily_limit;
    let device = round.device_id.log_hash(&cx.settings.device_hash_salt);
    // Counted before the planner runs: a request that passes validation uses one of the day's
    // calls even if the provider then fails.
    let remaining = match daily_limit::count_use(cx.store, &round.device_id, &device, limit, cx.now)
        .await
    {
        Allowance::Counted { remaining } => Some(remaining),
        Allowance::Unknown => None,
        Allowance::Exceeded { retry_after_secs } => {
            tracing::info!(device = %device, limit, retry_after_secs, "agent daily limit reached");
            return Err(ApiError::new(
                ErrorCode::DailyLimitExceeded,
                format!(
                    "deviceId has used its {limit} agent requests for today; the limit \
                     resets at 00:00 Japan time (see Retry-After)"
                ),
            )
            .with_header(http::header::RETRY_AFTER, number(retry_after_secs))
            .with_header(RATE_LIMIT_LIMIT, number(limit))
            .with_header(RATE_LIMIT_REMAINING, number(0u32)));
        }
    };

    let mut reply = planner::plan(cx.model, cx.settings, round, cx.now).await?;
    if let AgentReply::Plan(steps) = &mut reply {
        cx.signer.sign_plan(steps, &device, cx.now);
    }
    let (outcome, steps) = kind(&reply);
    tracing::info!(
        round = 1,
        device = %device,
        capabilities = round.capabilities.len(),
        outcome,
        steps,
        remaining,
        "agent round answered"
    );
    let mut headers = vec![(RATE_LIMIT_LIMIT, number(limit))];
    // Unknown when the counter failed (fail-open): then the header is left out.
    if let Some(remaining) = remaining {
        headers.push((RATE_LIMIT_REMAINING, number(remaining)));
    }
    Ok(answer(&reply, headers))
}

/// Round 2 is answered only as the follow-up of a counted round 1: its step ids must be ones
/// round 1 issued (signed, unaltered, unexpired, of one plan and of the device the round names:
/// another device's ids are refused as forged ones are), and the plan may
/// be answered at most [`MAX_ANSWERS_PER_PLAN`] times. A refusal is 400 and calls no model. If
/// the answer counter fails, the round is allowed (fail-open, as the daily limit): the
/// signature and expiry still hold.
async fn bind_to_round_1(
    cx: &AgentContext<'_>,
    round: &Round2,
    device: &str,
) -> Result<(), ApiError> {
    let refuse = |refusal: Refusal| {
        let (field, reason) = refusal.field_and_reason();
        tracing::info!(device, refusal = ?refusal, "agent round 2 refused: step ids not bound");
        ApiError::invalid(field, reason)
    };
    let plan = cx
        .signer
        .verify(&round.results, device, cx.now)
        .map_err(refuse)?;
    match cx
        .store
        .count_plan_answer(
            &plan.plan_id,
            MAX_ANSWERS_PER_PLAN,
            plan.counter_expire_at(),
        )
        .await
    {
        Ok(UsageOutcome::Counted { .. }) => Ok(()),
        Ok(UsageOutcome::LimitReached) => Err(refuse(Refusal::Reused)),
        Err(e) => {
            tracing::warn!(
                device,
                error = %e,
                "plan answer counter failed: round 2 allowed uncounted (fail-open)"
            );
            Ok(())
        }
    }
}

async fn round_2(cx: &AgentContext<'_>, round: &Round2) -> Result<Response, ApiError> {
    let device = round.device_id.log_hash(&cx.settings.device_hash_salt);
    bind_to_round_1(cx, round, &device).await?;
    let reply = responder::respond(cx.model, cx.settings, round, cx.now).await?;
    // How many items the tools read (events, ...): a count, never their contents.
    let items: usize = round.results.iter().map(|r| r.output.items.len()).sum();
    tracing::info!(
        round = 2,
        device = %device,
        results = round.results.len(),
        items,
        outcome = kind(&reply).0,
        "agent round answered"
    );
    // Round 2 is not counted and does not read the counter: only the limit is reported.
    Ok(answer(
        &reply,
        vec![(RATE_LIMIT_LIMIT, number(cx.settings.daily_limit))],
    ))
}
