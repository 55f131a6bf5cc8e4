//! AWS Secrets Manager `GetSecretValue` (aws-sdk-secretsmanager) as a [`SecretSource`].

use async_trait::async_trait;
use aws_sdk_secretsmanager::error::DisplayErrorContext;
use tokio::sync::OnceCell;

use super::{SecretError, SecretSource};
use crate::platform::aws::LoadConfig;

/// Reads secrets with the function role's credentials. The client is built on the first read
/// (cold start, when a function has secrets at all).
pub struct SecretsManager {
    load: LoadConfig,
    client: OnceCell<aws_sdk_secretsmanager::Client>,
}

impl SecretsManager {
    pub fn new(load: LoadConfig) -> SecretsManager {
        SecretsManager {
            load,
            client: OnceCell::new(),
        }
    }
}

#[async_trait]
impl SecretSource for SecretsManager {
    async fn read(&self, arn: &str) -> Result<String, SecretError> {
        let client = self
            .client
            .get_or_init(|| async { aws_sdk_secretsmanager::Client::new(&(self.load)().await) })
            .await;
        let out = client
            .get_secret_value()
            .secret_id(arn)
            .send()
            .await
            .map_err(|e| {
                SecretError(format!(
                    "GetSecretValue failed: {}",
                    DisplayErrorContext(&e)
                ))
            })?;
        // A secret the stack created and nobody has set yet has no string: read as empty.
        Ok(out.secret_string().unwrap_or_default().to_owned())
    }
}
