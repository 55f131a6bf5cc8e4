//! The environment `sam local invoke --env-vars events/env.json` gives a function: each variable
//! template.yaml declares for it (its own and `Globals`'), valued from the function's section of
//! env.json, else from `Parameters`, else left as the template has it. SAM sets no other
//! variable, so env.json's `Parameters` serves every function and a section holds only what
//! differs for one (docs/local.md, "Fixtures and local invocation").

use std::collections::{BTreeMap, BTreeSet};

use serde_norway::Value;

use crate::fixtures::env_json;
use crate::template::load_yaml;

/// The variables template.yaml declares for `function`: its own and `Globals`'.
pub fn declared_variables(function: &str) -> BTreeSet<String> {
    static TEMPLATE: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| load_yaml("template.yaml"));
    let template = &*TEMPLATE;
    let names = |vars: &Value| -> Vec<String> {
        let vars = match vars {
            Value::Tagged(tagged) => &tagged.value,
            other => other,
        };
        vars.as_mapping()
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let resource = &template["Resources"][function];
    assert!(
        !resource.is_null(),
        "template.yaml has no function {function}"
    );
    let mut declared: BTreeSet<String> = names(&resource["Properties"]["Environment"]["Variables"])
        .into_iter()
        .collect();
    declared.extend(names(
        &template["Globals"]["Function"]["Environment"]["Variables"],
    ));
    declared
}

/// The variables of `Parameters` a Lambda container has whatever the template declares: the
/// region and credentials (SAM gives its containers its own; env.json's stand for them).
pub const RUNTIME_VARIABLES: [&str; 3] =
    ["AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];

/// `function`'s variables as `sam local invoke --env-vars events/env.json` sets them: every
/// declared one env.json gives a value (the function's section first, then `Parameters`), and
/// [`RUNTIME_VARIABLES`].
pub fn local_env(function: &str) -> BTreeMap<String, String> {
    let env_json = env_json();
    let section = env_json.get(function);
    let mut names = declared_variables(function);
    names.extend(RUNTIME_VARIABLES.map(str::to_owned));
    names
        .into_iter()
        .filter_map(|var| {
            let value = section
                .and_then(|s| s.get(&var))
                .or_else(|| env_json["Parameters"].get(&var))?;
            Some((var, value.clone()))
        })
        .collect()
}
