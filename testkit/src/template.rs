//! Reading `template.yaml` and `openapi.yaml` (CloudFormation's `!Ref`-style tags included).

use std::path::PathBuf;

use serde_norway::Value;

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit sits in the workspace")
        .to_path_buf()
}

pub fn load_yaml(name: &str) -> Value {
    let path = repo_root().join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}
