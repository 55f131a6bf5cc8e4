//! The Lambdas' AWS client section: region and endpoints (`AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_EVENTBRIDGE`, `AWS_ENDPOINT_URL_SECRETS_MANAGER`).
//!
//! Credentials are not read here: the SDK's environment provider reads them itself, at each
//! refresh, so they never pass through this crate.

use super::Vars;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsConfig {
    /// `AWS_REGION`, else `AWS_DEFAULT_REGION` (the Lambda service sets both).
    pub region: Option<String>,
    /// Every AWS client's endpoint instead of AWS's regional ones (`AWS_ENDPOINT_URL`, for local
    /// runs of the Lambda binaries).
    pub endpoint_url: Option<String>,
    /// The EventBridge client's endpoint (`AWS_ENDPOINT_URL_EVENTBRIDGE`, as the SDK's own
    /// environment loader reads it; a stand-in bus in local runs). DynamoDB's is the store's
    /// (`AWS_ENDPOINT_URL_DYNAMODB`, `super::StoreConfig`).
    pub eventbridge_endpoint_url: Option<String>,
    /// The Secrets Manager client's endpoint (`AWS_ENDPOINT_URL_SECRETS_MANAGER`; a stand-in in
    /// local runs of the binaries and their tests).
    pub secretsmanager_endpoint_url: Option<String>,
}

impl AwsConfig {
    /// `AWS_REGION`, `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_EVENTBRIDGE` and
    /// `AWS_ENDPOINT_URL_SECRETS_MANAGER`. Passed to the SDK as they
    /// are (it reports a bad one at the first request), so this cannot fail.
    pub fn from_vars(vars: &Vars) -> AwsConfig {
        AwsConfig {
            region: vars
                .get("AWS_REGION")
                .or_else(|| vars.get("AWS_DEFAULT_REGION")),
            endpoint_url: vars.get("AWS_ENDPOINT_URL"),
            eventbridge_endpoint_url: vars.get("AWS_ENDPOINT_URL_EVENTBRIDGE"),
            secretsmanager_endpoint_url: vars.get("AWS_ENDPOINT_URL_SECRETS_MANAGER"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    const OWN: &[&str] = &[
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_EVENTBRIDGE",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    ];

    #[test]
    fn the_region_falls_back_to_the_default_region() {
        let from = |pairs: &[(&str, &str)]| AwsConfig::from_vars(&Vars::from_pairs(pairs));
        assert_eq!(from(&[]), AwsConfig::default());
        let both = from(&[
            ("AWS_REGION", "ap-northeast-1"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ]);
        assert_eq!(both.region.as_deref(), Some("ap-northeast-1"));
        let fallback = from(&[("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "us-east-1")]);
        assert_eq!(fallback.region.as_deref(), Some("us-east-1"));
        let local = from(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]);
        assert_eq!(local.endpoint_url.as_deref(), Some("http://127.0.0.1:4566"));
        let bus = from(&[("AWS_ENDPOINT_URL_EVENTBRIDGE", "http://127.0.0.1:4010")]);
        assert_eq!(
            bus.eventbridge_endpoint_url.as_deref(),
            Some("http://127.0.0.1:4010")
        );
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(reads_only(OWN, AwsConfig::from_vars), AwsConfig::default());
    }
}
