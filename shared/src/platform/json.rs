//! A request body as one JSON object, the form every JSON endpoint's domain parser reads.
//!
//! Parsed into `serde_json::Value`, whose syntax errors never quote the input.

use serde_json::{Map, Value};

use super::error::ApiError;

/// Parses a request body that must be one JSON object.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("body", "is required (a JSON object)"));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid("body", "must be a JSON object")),
        Err(e) => Err(ApiError::invalid(
            "body",
            format!(
                "is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_do_not_quote_the_input() {
        let err = parse_object(br#"{"secret-sentinel": "#).unwrap_err();
        assert!(err.message.starts_with("body is not valid JSON"));
        assert!(!err.message.contains("secret-sentinel"));
    }

    #[test]
    fn non_objects_and_empty_bodies_are_rejected() {
        assert_eq!(
            parse_object(b"[1]").unwrap_err().message,
            "body must be a JSON object"
        );
        assert_eq!(
            parse_object(b"  ").unwrap_err().message,
            "body is required (a JSON object)"
        );
    }
}
