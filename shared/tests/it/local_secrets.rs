//! The local Secrets Manager of `sam local invoke` (`secrets-manager-local`, docs/local.md) holds
//! every secret `events/env.json` names, readable through the functions' own code: each
//! function's variables from env.json, its endpoint pointed at the stand-in, through
//! `koe::platform::secrets::Secrets::resolve` and the SDK client a deployed function reads with. So the
//! fixtures' ARNs, the stand-in's secrets and the documented plain values cannot drift apart.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use aws_config::SdkConfig;
use aws_sdk_secretsmanager::config::{Credentials, SharedCredentialsProvider};
use koe::platform::clock::SystemClock;
use koe::platform::config::AwsConfig;
use koe::platform::config::Vars;
use koe::platform::secrets::secretsmanager::SecretsManager;
use koe::platform::secrets::{NOT_SET, SECRET_VARS, SecretSource, Secrets};
use koe_testkit::fixtures;
use koe_testkit::secretsmanager::StandInSecretsManager;
use koe_testkit::template::repo_root;

/// env.json's `Parameters` with the Secrets Manager endpoint pointed at the stand-in (the one
/// test here sets it once; a `LoadConfig` is a plain `fn`).
static PARAMETERS: OnceLock<Vars> = OnceLock::new();

/// A function's SDK configuration (`koe::platform::aws::lambda_config`) from [`PARAMETERS`], with env.json's
/// credentials (the Lambda configuration reads them from the process environment).
fn env_json_config() -> std::pin::Pin<Box<dyn std::future::Future<Output = SdkConfig> + Send>> {
    let vars = PARAMETERS.get().expect("set by the test");
    let credentials = Credentials::new(
        vars.get("AWS_ACCESS_KEY_ID").unwrap(),
        vars.get("AWS_SECRET_ACCESS_KEY").unwrap(),
        None,
        None,
        "events/env.json",
    );
    let config = koe::platform::aws::lambda_config(&AwsConfig::from_vars(vars))
        .to_builder()
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .build();
    Box::pin(std::future::ready(config))
}

#[tokio::test]
async fn the_local_secrets_manager_answers_every_secret_env_json_names_with_the_documented_value() {
    let standin = StandInSecretsManager::start_with_fixture_secrets("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind the local Secrets Manager");
    let env_json = fixtures::env_json();
    let documented_url = &env_json["Parameters"]["AWS_ENDPOINT_URL_SECRETS_MANAGER"];
    assert_eq!(
        documented_url,
        &format!(
            "http://host.docker.internal:{}",
            fixtures::secrets_manager_port()
        ),
        "events/env.json: SAM's containers reach the host's secrets-manager-local there"
    );
    let mut parameters: HashMap<String, String> =
        env_json["Parameters"].clone().into_iter().collect();
    parameters.insert(
        "AWS_ENDPOINT_URL_SECRETS_MANAGER".into(),
        standin.endpoint(),
    );
    assert!(PARAMETERS.set(Vars::from_map(parameters.clone())).is_ok());
    let source: Arc<dyn SecretSource> = Arc::new(SecretsManager::new(env_json_config));
    let local_doc = std::fs::read_to_string(repo_root().join("docs/local.md")).unwrap();

    let mut resolved = 0;
    let template = koe_testkit::template::load_yaml("template.yaml");
    for function in koe_testkit::template::resources_of_type(&template, "AWS::Serverless::Function")
    {
        // The function's variables as SAM sets them, the secrets' endpoint the stand-in's.
        let section = koe_testkit::local_env::local_env(&function);
        let mut vars = section.clone();
        vars.insert(
            "AWS_ENDPOINT_URL_SECRETS_MANAGER".into(),
            standin.endpoint(),
        );
        let vars = Vars::from_map(vars.into_iter().collect());
        let secrets = Secrets::resolve(&vars, source.clone(), Arc::new(SystemClock))
            .await
            .unwrap_or_else(|e| panic!("{function}'s secrets from the local Secrets Manager: {e}"));
        let values = secrets.over(vars);
        for (var, arn_var) in SECRET_VARS {
            if section.contains_key(arn_var) {
                let want = fixtures::secret_value(arn_var);
                // ("not-set", the stack's placeholder, reads as not set.)
                let expected = Some(want).filter(|v| *v != NOT_SET);
                assert_eq!(values.get(var).as_deref(), expected, "{function}: {var}");
                // The cargo-lambda way sets the same values as plain variables.
                assert!(
                    want == NOT_SET || local_doc.contains(&format!("{var}={want}")),
                    "docs/local.md does not set {var}={want} for cargo-lambda"
                );
                resolved += 1;
            }
        }
    }
    assert!(resolved > 0, "events/env.json names no secret");
    let mut read: Vec<String> = standin.reads();
    read.sort();
    read.dedup();
    let held: Vec<String> = fixtures::secrets().into_keys().collect();
    assert_eq!(
        read, held,
        "every secret held is one env.json names, read over the SDK"
    );
}
