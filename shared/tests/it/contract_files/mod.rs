//! The route table, `template.yaml` and `openapi.yaml` describe the same API: same functions,
//! binaries, methods and paths, same error codes. Change one without the others and this fails.

mod agent_tools;
mod error_messages;
mod functions;
mod gateway_throttles;
mod invalid_requests;
mod routes;
mod scripts;

use serde_norway::Value;

/// The value under a CloudFormation short-form tag (`!Ref X` → `X`), or the value itself.
pub(super) fn untag(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => &tagged.value,
        other => other,
    }
}

pub(super) fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut v = value;
    for key in path {
        v = untag(v).get(*key)?;
    }
    untag(v).as_str()
}

/// The function ids and binaries of every `AWS::Serverless::Function` in the template.
/// Function `id`'s `Timeout` in the template (seconds), or the `Globals` one it inherits.
pub(super) fn function_timeout(template: &Value, id: &str) -> u64 {
    template["Resources"][id]["Properties"]["Timeout"]
        .as_u64()
        .or_else(|| template["Globals"]["Function"]["Timeout"].as_u64())
        .unwrap_or_else(|| panic!("{id} has a timeout"))
}

pub(super) fn template_functions(template: &Value) -> Vec<(String, String)> {
    template["Resources"]
        .as_mapping()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Serverless::Function"))
        .map(|(id, r)| {
            let id = id.as_str().unwrap().to_owned();
            let binary = str_at(r, &["Metadata", "BuildProperties", "Binary"])
                .unwrap_or_else(|| panic!("{id} has no BuildProperties.Binary"))
                .to_owned();
            (id, binary)
        })
        .collect()
}
