//! Reading `template.yaml` and `openapi.yaml` (CloudFormation's `!Ref`-style tags included).

use std::path::PathBuf;

use serde_norway::Value;

/// The text of `docs/<page>`'s section under `## heading`, to the next `## ` heading; panics
/// naming both if there is none.
pub fn doc_section(page: &str, heading: &str) -> String {
    let doc = format!("docs/{page}");
    let text =
        std::fs::read_to_string(repo_root().join(&doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let after = text
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{doc} has no section \"{heading}\""));
    after.split("\n## ").next().unwrap_or_default().to_owned()
}

/// The repository root (the workspace directory).
/// The checkout's root: the nearest directory holding `template.yaml` above the working
/// directory (cargo runs tests from their package's directory, scripts run from the root), else
/// the one testkit was compiled in. Found at run time, because a build cache shared between two
/// clones keeps the first clone's compile-time path.
pub fn repo_root() -> PathBuf {
    let here = std::env::current_dir().ok();
    here.iter()
        .flat_map(|dir| dir.ancestors())
        .find(|dir| dir.join("template.yaml").is_file() && dir.join("Cargo.toml").is_file())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("testkit sits in the workspace")
                .to_path_buf()
        })
}

pub fn load_yaml(name: &str) -> Value {
    let path = repo_root().join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// The logical ids of `template`'s resources of type `kind` (`AWS::Serverless::Function`, ...).
pub fn resources_of_type(template: &Value, kind: &str) -> Vec<String> {
    let resources = template["Resources"]
        .as_mapping()
        .expect("template Resources");
    resources
        .iter()
        .filter(|(_, resource)| resource["Type"] == kind)
        .map(|(id, _)| id.as_str().expect("a logical id").to_owned())
        .collect()
}
