//! A first deploy that fails leaves nothing behind, and the likeliest failure is stopped before
//! it starts: the tables go with a failed create (`RetainExceptOnCreate`, still retained on
//! delete and replacement), and `scripts/concurrency-check.sh` (run by `scripts/sam.sh deploy`)
//! refuses a stack whose reservations the account's concurrency quota cannot hold, naming the
//! quota and `ReserveConcurrency=false`, which deploys with none.

use std::path::Path;
use std::process::Command;

use koe_testkit::template::{load_yaml, repo_root, resources_of_type};

#[test]
fn the_tables_go_with_a_failed_create_and_stay_otherwise() {
    let template = load_yaml("template.yaml");
    let tables = resources_of_type(&template, "AWS::DynamoDB::Table");
    assert_eq!(tables.len(), 3);
    for id in tables {
        let table = &template["Resources"][id.as_str()];
        assert_eq!(table["DeletionPolicy"], "RetainExceptOnCreate", "{id}");
        assert_eq!(table["UpdateReplacePolicy"], "Retain", "{id}");
    }
}

/// A stand-in `aws` that answers `lambda get-account-settings` with `quota` and notes each call.
fn fake_aws(dir: &Path, quota: u32) {
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> '{}/calls'\necho {quota}\n",
        dir.display()
    );
    let path = dir.join("aws");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A python with PyYAML: SAM's, as scripts/sam.sh runs the check, where it is installed.
fn python() -> String {
    let sam_python = dirs_home().join(".cache/koe/venv-sam/bin/python");
    let has_yaml = |python: &Path| {
        Command::new(python)
            .args(["-c", "import yaml"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has_yaml(&sam_python) {
        sam_python.display().to_string()
    } else {
        "python3".to_owned()
    }
}

/// docs/deploy.md's quota is what the defaults reserve plus the 100 Lambda keeps.
#[test]
fn the_documented_quota_is_what_the_defaults_reserve() {
    let root = repo_root();
    let out = Command::new(python())
        .current_dir(&root)
        .args([
            "scripts/reserved-concurrency.py",
            "template.yaml",
            "samconfig.toml",
            "default",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let reserved: u32 = stdout.split_whitespace().nth(1).unwrap().parse().unwrap();
    let deploy = std::fs::read_to_string(root.join("docs/deploy.md")).unwrap();
    let said = format!(
        "quota of at least {}: the defaults reserve {reserved} ",
        reserved + 100
    );
    assert!(
        deploy
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&said),
        "docs/deploy.md says `{said}` ({stdout})"
    );
}

/// The check for `env` with the account's quota at `quota`: (passed, stderr, aws calls).
fn check(quota: u32, env: &str, samconfig: Option<&Path>) -> (bool, String, String) {
    let dir = Scratch::new("aws");
    fake_aws(dir.path(), quota);
    let python = python();
    let mut command = Command::new(repo_root().join("scripts/concurrency-check.sh"));
    command
        .args(["--config-env", env])
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.path().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("PYTHON", python);
    if let Some(samconfig) = samconfig {
        command.env("KOE_SAMCONFIG", samconfig);
    }
    let out = command.output().unwrap();
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap_or_default();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        calls,
    )
}

/// A directory of its own under the system's temporary one, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("koe-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dirs_home() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
}

#[test]
fn a_deploy_the_concurrency_quota_cannot_hold_stops_before_cloudformation() {
    // A new account's quota: the defaults' reservations do not fit.
    let (passed, message, calls) = check(10, "dev", None);
    assert!(!passed, "{message}");
    assert!(message.contains("reserves 188"), "{message}");
    assert!(
        calls.contains("lambda get-account-settings --region ap-northeast-1"),
        "{calls}"
    );
    for said in [
        "quota",
        "is 10",
        "ReserveConcurrency=false",
        "[dev.deploy.parameters]",
    ] {
        assert!(message.contains(said), "says {said:?}: {message}");
    }
    // The defaults' quota holds them.
    let (passed, message, _) = check(1000, "prod", None);
    assert!(passed, "{message}");

    // With reservations off, the new account's quota is enough, and it is not even asked.
    let dir = Scratch::new("samconfig");
    let text = std::fs::read_to_string(repo_root().join("samconfig.toml")).unwrap();
    let off = text.replace(
        "PushSender=auto\"",
        "PushSender=auto ReserveConcurrency=false\"",
    );
    assert_ne!(off, text);
    let samconfig = dir.path().join("samconfig.toml");
    std::fs::write(&samconfig, off).unwrap();
    let (passed, message, calls) = check(10, "dev", Some(&samconfig));
    assert!(passed, "{message}");
    assert_eq!(calls, "", "nothing reserved: no quota to ask for");
}

/// Lambda's limit on a function's whole environment: 4 KB of names and values together.
const ENVIRONMENT_LIMIT_BYTES: usize = 4096;
/// CloudFormation's longest stack name.
const STACK_NAME_MAX: usize = 128;
/// An ARN of a secret of the stack, at its longest: the partition, the longest region name,
/// the account, the stack's name, the secret's name and Secrets Manager's 7-character suffix.
fn secret_arn_bytes(secret: &str) -> usize {
    "arn:aws-us-gov:secretsmanager:".len()
        + "ap-southeast-5".len()
        + ":123456789012:secret:".len()
        + STACK_NAME_MAX
        + 1
        + secret.len()
        + "-AbCdEf".len()
}

/// The most bytes a variable's value can take once deployed (a parameter's text at its
/// `MaxLength`, 4 bytes a character, the widest UTF-8 takes, unless its pattern allows only
/// ASCII; a name under the stack's at its longest).
fn value_bytes(template: &serde_norway::Value, value: &serde_norway::Value) -> usize {
    use serde_norway::Value;
    match value {
        Value::String(s) => s.len(),
        Value::Number(n) => n.to_string().len(),
        Value::Tagged(t) if t.tag == "Ref" => {
            let name = t.value.as_str().unwrap();
            let parameter = &template["Parameters"][name];
            if !parameter.is_null() {
                if let Some(allowed) = parameter["AllowedValues"].as_sequence() {
                    return allowed
                        .iter()
                        .map(|v| serde_norway::to_string(v).unwrap().trim().len())
                        .max()
                        .unwrap();
                }
                if parameter["Type"] == "Number" {
                    return parameter["MaxValue"]
                        .as_u64()
                        .expect("a MaxValue")
                        .to_string()
                        .len();
                }
                let max = parameter["MaxLength"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name} reaches a function: it needs a MaxLength"));
                // Printable ASCII by its pattern (`[!-~]`, `[A-Za-z0-9...]`): a byte a
                // character; any text: up to 4.
                let ascii = parameter["AllowedPattern"]
                    .as_str()
                    .is_some_and(|p| !p.contains("\\S") && !p.contains(".*"));
                return if ascii { 1 } else { 4 } * max as usize;
            }
            let resource = &template["Resources"][name];
            match resource["Type"].as_str().unwrap() {
                "AWS::SecretsManager::Secret" => {
                    let secret = match &resource["Properties"]["Name"] {
                        Value::Tagged(t) => t.value.as_str().unwrap().to_owned(),
                        other => panic!("{other:?}"),
                    };
                    secret_arn_bytes(secret.rsplit('/').next().unwrap())
                }
                _ => {
                    let named = ["TableName", "Name"]
                        .iter()
                        .find_map(|key| match &resource["Properties"][*key] {
                            Value::Tagged(t) => t.value.as_str().map(str::to_owned),
                            _ => None,
                        })
                        .unwrap_or_else(|| panic!("{name}: named under the stack"));
                    named
                        .replace("${AWS::StackName}", &"s".repeat(STACK_NAME_MAX))
                        .len()
                }
            }
        }
        Value::Tagged(t) if t.tag == "If" => {
            let branches = t.value.as_sequence().unwrap();
            value_bytes(template, &branches[1]).max(value_bytes(template, &branches[2]))
        }
        other => panic!("a value the test does not size: {other:?}"),
    }
}

/// Every function's environment fits Lambda's 4 KB with every parameter at its longest, the
/// agent's persona included (`AgentPersona`'s `MaxLength` leaves room for the rest).
#[test]
fn every_environment_fits_lambdas_4_kb_at_its_longest() {
    let template = load_yaml("template.yaml");
    let globals = &template["Globals"]["Function"]["Environment"]["Variables"];
    for id in resources_of_type(&template, "AWS::Serverless::Function") {
        let own = &template["Resources"][id.as_str()]["Properties"]["Environment"]["Variables"];
        let mut bytes = 0;
        for variables in [globals, own] {
            for (name, value) in variables.as_mapping().into_iter().flatten() {
                bytes += name.as_str().unwrap().len() + value_bytes(&template, value);
            }
        }
        println!("{id}: at most {bytes} bytes of {ENVIRONMENT_LIMIT_BYTES}");
        assert!(
            bytes <= ENVIRONMENT_LIMIT_BYTES,
            "{id}: up to {bytes} bytes"
        );
    }
}
