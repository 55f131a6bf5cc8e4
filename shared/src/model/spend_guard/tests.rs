//! The spend guard's estimate of a request's tokens, and its lease plan at each ceiling.

use super::*;
use crate::domain::chat::{ChatMessage, Role};

fn request(contents: &[&str], max_tokens: u32) -> ModelRequest {
    ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: contents
            .iter()
            .map(|c| ChatMessage {
                role: Role::User,
                content: (*c).to_owned(),
            })
            .collect(),
        max_tokens,
        response_format: None,
    }
}

#[test]
fn text_costs_a_third_of_a_token_per_ascii_character_and_one_per_other() {
    assert_eq!(text_tokens(""), 0);
    assert_eq!(text_tokens("hi"), 1);
    assert_eq!(text_tokens("hello world!"), 4);
    assert_eq!(text_tokens("こんにちは"), 5);
    assert_eq!(text_tokens("明日 10時"), 3 + 1, "3 others, 3 ASCII");
    // A 16,000-character English message: about 4,000 tokens billed, 5,334 counted.
    assert_eq!(text_tokens(&"word ".repeat(3_200)), 5_334);
}

#[test]
fn the_reservation_is_the_prompts_estimate_and_max_tokens_within_the_context() {
    assert_eq!(token_bound(&request(&["hi"], 14)), 1 + 8 + 16 + 14);
    assert_eq!(prompt_tokens(&request(&["こんにちは", ""], 0)), 5 + 16 + 16);
    let huge = "あ".repeat(200_000);
    assert_eq!(
        prompt_tokens(&request(&[&huge], 4096)),
        MODEL_CONTEXT_TOKENS
    );
    assert_eq!(
        token_bound(&request(&[&huge], 4096)),
        MODEL_CONTEXT_TOKENS + 4096
    );
    // The largest prompt the contract allows in ASCII (128,000 characters): about a third.
    let max_ascii = "a".repeat(16_000);
    let eight: Vec<&str> = vec![&max_ascii; 8];
    assert_eq!(prompt_tokens(&request(&eight, 1)), 8 * (5_334 + 8) + 16);
    let mut structured = request(&["hi"], 1);
    structured.response_format = Some(serde_json::json!({"type": "json_schema"}));
    assert_eq!(
        token_bound(&structured),
        token_bound(&request(&["hi"], 1)) + r#"{"type":"json_schema"}"#.len().div_ceil(3) as u64
    );
}

#[test]
fn each_ceiling_has_one_counter_per_two_largest_calls_up_to_eight() {
    use lease::{LARGEST_CALL, LeasePlan};
    assert_eq!(LARGEST_CALL, 132_096);
    let shards = |c| LeasePlan::for_ceiling(c).shards;
    assert_eq!(shards(1000), 1);
    assert_eq!(shards(60_000), 1);
    assert_eq!(shards(2 * LARGEST_CALL * 2 - 1), 1);
    assert_eq!(shards(2 * LARGEST_CALL * 2), 2);
    assert_eq!(shards(1_000_000), 3);
    assert_eq!(shards(5_000_000), 8);
    assert_eq!(shards(10_000_000_000), 8);
    let plan = LeasePlan::for_ceiling(1_000_000);
    assert!(u64::from(plan.shards) * plan.share >= 1_000_000);
    assert_eq!(plan.slack(400), 3 * 400);
}

#[test]
fn a_lease_is_a_block_that_fits_whole_then_the_calls_own_then_nothing() {
    use lease::{LeasePlan, Want};
    let plan = LeasePlan::for_ceiling(60_000);
    // Far from the share: 8 calls' tokens.
    assert_eq!(plan.lease(400, 0), Some(Want::Block(3200)));
    // A quarter of what is left, down to one call's tokens.
    assert_eq!(plan.lease(400, 60_000 - 4000), Some(Want::Block(1000)));
    assert_eq!(plan.lease(400, 60_000 - 1600), Some(Want::Block(400)));
    // Then the call's own tokens while below the share, then nothing.
    assert_eq!(plan.lease(400, 60_000 - 1599), Some(Want::Own(400)));
    assert_eq!(plan.lease(400, 59_999), Some(Want::Own(400)));
    assert_eq!(plan.lease(400, 60_000), None);
    assert_eq!(plan.lease(400, 70_000), None);
    // A block is added only while count + block <= share; a call's own while count < share.
    assert_eq!(Want::Block(1000).limit(60_000), 59_001);
    assert_eq!(Want::Own(400).limit(60_000), 60_000);
}
