//! The deploy as documented (README.md and docs/deploy.md) against samconfig.toml and
//! template.yaml: each documented `deploy` names an environment samconfig.toml has and passes
//! no `--parameter-overrides` (which would replace the environment's list); each documented
//! `put-secret-value` names a secret the template creates, in a stack samconfig.toml deploys;
//! every secret a first deploy must set is set by the documented first deploy; every parameter
//! samconfig.toml or the docs set exists in the template, with an allowed value.

use std::collections::{BTreeMap, BTreeSet};

use koe_testkit::template::{load_yaml, repo_root};
use serde_norway::Value;

/// samconfig.toml's environments: name → (stack name, parameter_overrides), read line by line
/// (its tables are flat `key = "value"` lines).
fn samconfig() -> BTreeMap<String, (String, String)> {
    let text = std::fs::read_to_string(repo_root().join("samconfig.toml")).unwrap();
    let mut envs: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut env = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(table) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            env = table.split('.').next().unwrap().to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_owned();
        let entry = envs.entry(env.clone()).or_default();
        match key.trim() {
            "stack_name" => entry.0 = value,
            "parameter_overrides" => entry.1 = value,
            _ => {}
        }
    }
    envs
}

/// `Name=value` pairs of a parameter_overrides string.
fn overrides(list: &str) -> Vec<(String, String)> {
    list.split_whitespace()
        .map(|pair| {
            let (name, value) = pair.split_once('=').expect("Name=value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// The command lines of every ```sh block in the file.
fn commands(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut joined = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = line.split(" # ").next().unwrap().trim_end();
        joined.push_str(line.trim_end_matches('\\'));
        if !line.ends_with('\\') {
            out.push(std::mem::take(&mut joined).trim().to_owned());
        }
    }
    out
}

/// The template's secrets by the name they get (`${AWS::StackName}/<name>`), with whether the
/// stack generates their value.
fn template_secrets(template: &Value) -> BTreeMap<String, bool> {
    template["Resources"]
        .as_mapping()
        .unwrap()
        .values()
        .filter(|r| r["Type"] == "AWS::SecretsManager::Secret")
        .map(|r| {
            let name = match &r["Properties"]["Name"] {
                Value::Tagged(t) => t.value.as_str().unwrap().to_owned(),
                other => panic!("a secret's Name is !Sub ${{AWS::StackName}}/...: {other:?}"),
            };
            let name = name
                .strip_prefix("${AWS::StackName}/")
                .expect("named under the stack")
                .to_owned();
            (name, r["Properties"].get("GenerateSecretString").is_some())
        })
        .collect()
}

fn check_parameter(template: &Value, name: &str, value: &str, wherein: &str) {
    let parameter = &template["Parameters"][name];
    assert!(
        !parameter.is_null(),
        "{wherein} sets {name}, which template.yaml does not declare"
    );
    if let Some(allowed) = parameter["AllowedValues"].as_sequence() {
        let allowed: Vec<String> = allowed
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => serde_norway::to_string(other).unwrap().trim().to_owned(),
            })
            .collect();
        assert!(
            allowed.iter().any(|a| a == value),
            "{wherein}: {name}={value} is not one of {allowed:?}"
        );
    }
}

#[test]
fn the_documented_deploy_agrees_with_samconfig_and_the_template() {
    let template = load_yaml("template.yaml");
    let envs = samconfig();
    let stacks: BTreeMap<&str, &str> = envs
        .iter()
        .filter(|(_, (stack, _))| !stack.is_empty())
        .map(|(env, (stack, _))| (stack.as_str(), env.as_str()))
        .collect();
    for (env, (_, list)) in &envs {
        for (name, value) in overrides(list) {
            check_parameter(&template, &name, &value, &format!("samconfig.toml [{env}]"));
        }
    }
    let secrets = template_secrets(&template);

    let mut deployed = BTreeSet::new();
    let mut stored: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in ["README.md", "docs/deploy.md"] {
        let commands = commands(file);
        assert!(!commands.is_empty(), "{file} shows the commands");
        for command in commands {
            let words: Vec<&str> = command.split_whitespace().collect();
            if words
                .windows(2)
                .any(|w| w[1] == "deploy" && w[0].ends_with("sam.sh"))
                || words.starts_with(&["sam", "deploy"])
            {
                assert!(
                    !command.contains("--parameter-overrides"),
                    "{file}: `{command}` would replace samconfig.toml's parameter_overrides"
                );
                let at = words
                    .iter()
                    .position(|w| *w == "--config-env")
                    .unwrap_or_else(|| panic!("{file}: `{command}` names no --config-env"));
                let env = words[at + 1];
                assert!(
                    envs.get(env).is_some_and(|(stack, _)| !stack.is_empty()),
                    "{file}: samconfig.toml has no environment {env}"
                );
                deployed.insert(envs[env].0.clone());
            }
            if command.starts_with("aws secretsmanager put-secret-value") {
                let at = words.iter().position(|w| *w == "--secret-id").unwrap();
                let (stack, name) = words[at + 1].split_once('/').expect("<stack>/<name>");
                assert!(
                    stacks.contains_key(stack),
                    "{file}: no samconfig.toml environment deploys the stack {stack}"
                );
                assert_eq!(
                    secrets.get(name),
                    Some(&false),
                    "{file}: {name} is not a secret the template leaves for you to set"
                );
                stored
                    .entry(stack.to_owned())
                    .or_default()
                    .insert(name.to_owned());
            }
        }
    }
    // A first deploy sets what chat and the agent API need: the OpenAI key and the agent keys
    // (the APNs key is optional: without it pushes are only logged).
    let dev = &envs["dev"].0;
    assert!(deployed.contains(dev), "the docs deploy {dev}");
    for needed in ["openai-api-key", "agent-api-keys"] {
        assert!(
            stored.get(dev).is_some_and(|s| s.contains(needed)),
            "the documented first deploy of {dev} stores {needed}"
        );
    }
    let settable: BTreeSet<&String> = secrets
        .iter()
        .filter(|(_, g)| !**g)
        .map(|(n, _)| n)
        .collect();
    let documented: BTreeSet<&String> = stored.values().flatten().collect();
    assert_eq!(
        settable, documented,
        "every secret you set is shown being set"
    );

    // The example parameter_overrides line in docs/deploy.md.
    let deploy = std::fs::read_to_string(repo_root().join("docs/deploy.md")).unwrap();
    let example = deploy
        .lines()
        .find_map(|l| l.strip_prefix("parameter_overrides = "))
        .expect("docs/deploy.md shows a parameter_overrides line");
    for (name, value) in overrides(example.trim_matches('"')) {
        check_parameter(&template, &name, &value, "docs/deploy.md");
    }
}

/// Every `aws` command of docs/deploy.md (in its ```sh blocks and its inline code) names the
/// region samconfig.toml deploys to, so it works whatever the reader's default region is; and
/// no secret is rotated with `rotate-secret`, which needs a rotation function the stack has not.
#[test]
fn the_documented_aws_commands_name_their_region() {
    let text = std::fs::read_to_string(repo_root().join("samconfig.toml")).unwrap();
    let regions: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("region = "))
        .map(|r| r.trim_matches('"'))
        .collect();
    assert_eq!(
        regions.len(),
        1,
        "one region in samconfig.toml: {regions:?}"
    );
    let region = format!("--region {}", regions.first().unwrap());
    let deploy = std::fs::read_to_string(repo_root().join("docs/deploy.md")).unwrap();
    let inline = deploy
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.starts_with("aws ") && *span != "aws configure")
        .map(str::to_owned);
    let mut seen = 0;
    for command in commands("docs/deploy.md")
        .into_iter()
        .filter(|c| c.starts_with("aws "))
        .chain(inline)
    {
        seen += 1;
        assert!(
            command.contains(&region),
            "docs/deploy.md: `{command}` names no {region}"
        );
    }
    assert!(seen >= 6, "the commands were found ({seen})");
    assert!(
        !deploy.contains("rotate-secret"),
        "docs/deploy.md: rotation is put-secret-value"
    );
}
