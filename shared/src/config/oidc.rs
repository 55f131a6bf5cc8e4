//! The OIDC section: who may call POST /internal/dispatch (`DISPATCH_OIDC_*`, all or none).

use super::{ConfigError, Vars};

/// Who may call POST /internal/dispatch (`DISPATCH_OIDC_*`, all or none): an OIDC ID token from
/// `issuer`, for `audience`, of the service account `service_account`, signed by a key of
/// `jwks_url`. Absent: that route answers 401 to everyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    pub jwks_url: String,
    pub issuer: String,
    pub audience: String,
    pub service_account: String,
}

impl OidcConfig {
    /// `DISPATCH_OIDC_JWKS_URL` (an http(s) URL), `DISPATCH_OIDC_ISSUER`,
    /// `DISPATCH_OIDC_AUDIENCE` and `DISPATCH_OIDC_SERVICE_ACCOUNT`: `None` when none is set.
    pub fn from_vars(vars: &Vars) -> Result<Option<OidcConfig>, ConfigError> {
        let Some([jwks_url, issuer, audience, service_account]) = vars.all_or_none([
            "DISPATCH_OIDC_JWKS_URL",
            "DISPATCH_OIDC_ISSUER",
            "DISPATCH_OIDC_AUDIENCE",
            "DISPATCH_OIDC_SERVICE_ACCOUNT",
        ])?
        else {
            return Ok(None);
        };
        Ok(Some(OidcConfig {
            jwks_url: vars.url_or("DISPATCH_OIDC_JWKS_URL", &jwks_url)?,
            issuer,
            audience,
            service_account,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{broken_except, names, variables_read};

    const OWN: &[&str] = &[
        "DISPATCH_OIDC_JWKS_URL",
        "DISPATCH_OIDC_ISSUER",
        "DISPATCH_OIDC_AUDIENCE",
        "DISPATCH_OIDC_SERVICE_ACCOUNT",
    ];

    fn from(pairs: &[(&'static str, String)]) -> Result<Option<OidcConfig>, ConfigError> {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        OidcConfig::from_vars(&Vars::from_pairs(&pairs))
    }

    #[test]
    fn oidc_is_all_or_none_with_a_url_for_the_jwks() {
        let vars = |url: &str| {
            vec![
                ("DISPATCH_OIDC_JWKS_URL", url.to_owned()),
                (
                    "DISPATCH_OIDC_ISSUER",
                    "https://accounts.google.com".to_owned(),
                ),
                (
                    "DISPATCH_OIDC_AUDIENCE",
                    "https://koe.example/dispatch".to_owned(),
                ),
                (
                    "DISPATCH_OIDC_SERVICE_ACCOUNT",
                    "scheduler@koe.iam.gserviceaccount.com".to_owned(),
                ),
            ]
        };
        assert_eq!(from(&[]).unwrap(), None);
        let oidc = from(&vars("https://www.googleapis.com/oauth2/v3/certs"))
            .unwrap()
            .expect("OIDC configured");
        assert_eq!(oidc.audience, "https://koe.example/dispatch");
        assert_eq!(
            from(&vars("not a url")).unwrap_err().var,
            "DISPATCH_OIDC_JWKS_URL"
        );
        let partial: Vec<_> = vars("https://x.example/certs")
            .into_iter()
            .filter(|(k, _)| *k != "DISPATCH_OIDC_AUDIENCE")
            .collect();
        assert_eq!(from(&partial).unwrap_err().var, "DISPATCH_OIDC_AUDIENCE");
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(
            variables_read(|vars| drop(OidcConfig::from_vars(vars))),
            names(OWN)
        );
        assert_eq!(OidcConfig::from_vars(&broken_except(OWN)).unwrap(), None);
    }
}
