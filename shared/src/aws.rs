//! Where the AWS SDK clients (DynamoDB, EventBridge) get their configuration.
//!
//! A Lambda takes it from the environment the Lambda service sets (`AWS_REGION` and the
//! function role's `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`) and from
//! nothing else: no profile files, SSO, web identity, ECS or IMDS providers, so none of them
//! (nor the STS and IMDS clients behind them) is linked into the function or set up at its cold
//! start. koe-local and the tests use the SDK's whole default chain, so a developer's profile or
//! DynamoDB Local's variables work as usual. Adapters take the loader as a function pointer:
//! only the one a process names is linked. Both give the SDK our HTTP client
//! ([`crate::aws_http`]), not the SDK's own.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

use crate::aws_http::sdk_http_client;
use crate::config::{AwsConfig, Vars};

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
/// retries and connect timeout; `AWS_ENDPOINT_URL` is honoured (local runs of the binaries).
pub fn lambda_environment() -> Pin<Box<dyn Future<Output = SdkConfig> + Send>> {
    let config = AwsConfig::from_vars(&Vars::from_env());
    Box::pin(std::future::ready(lambda_config(&config)))
}

/// The SDK's default connect timeout (what the default chain would set).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

fn lambda_config(config: &AwsConfig) -> SdkConfig {
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
    builder.build()
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
        });
        assert_eq!(config.region().map(Region::as_ref), Some("ap-northeast-1"));
        assert_eq!(config.endpoint_url(), Some("http://127.0.0.1:4566"));
        let bare = lambda_config(&AwsConfig::default());
        assert_eq!(bare.region(), None);
        assert_eq!(bare.endpoint_url(), None);
    }
}
