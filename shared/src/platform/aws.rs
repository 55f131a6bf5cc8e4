//! Where the AWS SDK clients (DynamoDB, EventBridge) get their configuration.
//!
//! A Lambda takes it from the environment the Lambda service sets (`AWS_REGION` and the
//! function role's `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`) and from
//! nothing else: no profile files, SSO, web identity, ECS or IMDS providers, so none of them
//! (nor the STS and IMDS clients behind them) is linked into the function or set up at its cold
//! start. koe-local and the tests use the SDK's whole default chain, so a developer's profile or
//! DynamoDB Local's variables work as usual. Adapters take the loader as a function pointer:
//! only the one a process names is linked. Both give the SDK our HTTP client
//! ([`crate::platform::aws_http`]), not the SDK's own.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

use crate::platform::aws_http::sdk_http_client;
use crate::platform::config::{AwsConfig, Vars};

/// Loads an [`SdkConfig`]; called once per client, when the client is built.
pub type LoadConfig = fn() -> Pin<Box<dyn Future<Output = SdkConfig> + Send>>;

/// The SDK's default chain (environment, profiles, web identity, ECS, IMDS).
pub fn default_chain() -> Pin<Box<dyn Future<Output = SdkConfig> + Send>> {
    Box::pin(
        aws_config::defaults(BehaviorVersion::latest())
            .http_client(sdk_http_client())
            .load(),
    )
}

/// A Lambda's configuration: region and credentials from the environment, the SDK's standard
/// retries and connect timeout; `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_EVENTBRIDGE` are
/// honoured (local runs of the binaries, `sam local invoke --env-vars`).
pub fn lambda_environment() -> Pin<Box<dyn Future<Output = SdkConfig> + Send>> {
    let config = AwsConfig::from_vars(&Vars::from_env());
    Box::pin(std::future::ready(lambda_config(&config)))
}

/// The SDK's default connect timeout (what the default chain would set).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

/// [`lambda_environment`]'s configuration from `config` (tests build it from other variables
/// than the process's: `shared/tests/it/local_secrets.rs`).
pub fn lambda_config(config: &AwsConfig) -> SdkConfig {
    let credentials = aws_config::environment::EnvironmentVariableCredentialsProvider::new();
    let mut builder = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(config.region.clone().map(Region::new))
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
            credentials,
        ))
        .http_client(sdk_http_client())
        .retry_config(RetryConfig::standard())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build(),
        );
    if let Some(url) = &config.endpoint_url {
        builder = builder.endpoint_url(url);
    }
    let endpoints: Vec<(&'static str, String)> = [
        ("EventBridge", &config.eventbridge_endpoint_url),
        ("Secrets Manager", &config.secretsmanager_endpoint_url),
    ]
    .into_iter()
    .filter_map(|(service, url)| url.clone().map(|url| (service, url)))
    .collect();
    if !endpoints.is_empty() {
        builder = builder.service_config(ServiceEndpoints(endpoints));
    }
    builder.build()
}

/// Services' own endpoints, answered the way the SDK's environment loader answers
/// `AWS_ENDPOINT_URL_<SERVICE>` (each client asks for key `AWS_ENDPOINT_URL` with its service id).
#[derive(Debug)]
struct ServiceEndpoints(Vec<(&'static str, String)>);

impl aws_types::service_config::LoadServiceConfig for ServiceEndpoints {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        if key.env() != "AWS_ENDPOINT_URL" {
            return None;
        }
        self.0
            .iter()
            .find(|(service, _)| *service == key.service_id())
            .map(|(_, url)| url.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lambda_config_has_credentials_retries_and_a_timeout_without_the_default_chain() {
        let config = lambda_environment().await;
        assert!(config.credentials_provider().is_some());
        assert!(
            config.http_client().is_some(),
            "ours, not the SDK's default"
        );
        assert_eq!(config.retry_config().unwrap().max_attempts(), 3);
        assert_eq!(
            config.timeout_config().unwrap().connect_timeout(),
            Some(CONNECT_TIMEOUT)
        );
    }

    #[test]
    fn region_and_endpoint_come_from_the_aws_section() {
        let config = lambda_config(&AwsConfig {
            region: Some("ap-northeast-1".into()),
            endpoint_url: Some("http://127.0.0.1:4566".into()),
            ..AwsConfig::default()
        });
        assert_eq!(config.region().map(Region::as_ref), Some("ap-northeast-1"));
        assert_eq!(config.endpoint_url(), Some("http://127.0.0.1:4566"));
        let bare = lambda_config(&AwsConfig::default());
        assert_eq!(bare.region(), None);
        assert_eq!(bare.endpoint_url(), None);
    }

    /// A Lambda's configuration gives `AWS_ENDPOINT_URL_EVENTBRIDGE` to the EventBridge client
    /// only, and `AWS_ENDPOINT_URL_SECRETS_MANAGER` to the Secrets Manager client only.
    #[test]
    fn the_eventbridge_endpoint_reaches_the_eventbridge_client_only() {
        let vars = Vars::from_pairs(&[
            ("AWS_ENDPOINT_URL_EVENTBRIDGE", "http://127.0.0.1:4010"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:4011"),
        ]);
        let config = lambda_config(&AwsConfig::from_vars(&vars));
        let endpoints = config.service_config().expect("a service config");
        let key = |service_id| {
            aws_types::service_config::ServiceConfigKey::builder()
                .service_id(service_id)
                .env("AWS_ENDPOINT_URL")
                .profile("endpoint_url")
                .build()
                .unwrap()
        };
        assert_eq!(
            endpoints.load_config(key("EventBridge")).as_deref(),
            Some("http://127.0.0.1:4010")
        );
        assert_eq!(
            endpoints.load_config(key("Secrets Manager")).as_deref(),
            Some("http://127.0.0.1:4011")
        );
        assert_eq!(endpoints.load_config(key("DynamoDB")), None);
        // (That the client really goes there: functions/tests/fixtures/, POST /internal/dispatch
        // through the dispatch binary to the stand-in EventBridge.)
    }
}
