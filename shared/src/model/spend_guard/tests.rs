//! The spend guard's estimate of a request's tokens.

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
