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
    /// `DISPATCH_OIDC_JWKS_URL` (an https URL; http only on loopback), `DISPATCH_OIDC_ISSUER`,
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
            jwks_url: https_unless_loopback(
                "DISPATCH_OIDC_JWKS_URL",
                vars.url_or("DISPATCH_OIDC_JWKS_URL", &jwks_url)?,
            )?,
            issuer,
            audience,
            service_account,
        }))
    }
}

/// The JWKS decides whose tokens start dispatch runs: fetched over plain HTTP, anyone on the
/// path could serve their own keys. So `https`, except on loopback (127.0.0.0/8, ::1,
/// `localhost`), where a local stand-in issuer or test serves it and no network is crossed.
fn https_unless_loopback(var: &'static str, url: String) -> Result<String, ConfigError> {
    let parsed = reqwest::Url::parse(&url).map_err(|_| ConfigError {
        var,
        reason: "must be an http(s) URL".into(),
    })?;
    if parsed.scheme() == "https" || parsed.host_str().is_some_and(is_loopback) {
        return Ok(url);
    }
    Err(ConfigError {
        var,
        reason: "must be an https URL (http only on loopback: 127.0.0.0/8, ::1, localhost)".into(),
    })
}

/// Whether a URL's host (as `Url::host_str` gives it: lower case, IPv6 in brackets) is this
/// machine's loopback.
fn is_loopback(host: &str) -> bool {
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

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
    fn the_jwks_url_is_https_except_on_loopback() {
        let with_url = |url: &str| {
            from(&[
                ("DISPATCH_OIDC_JWKS_URL", url.to_owned()),
                ("DISPATCH_OIDC_ISSUER", "https://issuer.example".to_owned()),
                ("DISPATCH_OIDC_AUDIENCE", "aud".to_owned()),
                ("DISPATCH_OIDC_SERVICE_ACCOUNT", "sa@example.com".to_owned()),
            ])
        };
        for accepted in [
            "https://www.googleapis.com/oauth2/v3/certs",
            "https://203.0.113.7/jwks",
            "http://127.0.0.1:8080/jwks",
            "http://127.8.9.10/jwks",
            "http://[::1]:9000/jwks",
            "http://localhost:9000/jwks",
            "http://LOCALHOST/jwks",
        ] {
            let oidc = with_url(accepted).unwrap_or_else(|e| panic!("{accepted}: {e}"));
            assert_eq!(oidc.expect("configured").jwks_url, accepted);
        }
        for refused in [
            "http://www.googleapis.com/oauth2/v3/certs",
            "http://203.0.113.7/jwks",
            "http://10.0.0.1/jwks",
            "http://0.0.0.0/jwks",
            "http://[::ffff:127.0.0.1]/jwks",
            "http://localhost.example.com/jwks",
            "http://127.0.0.1.nip.io/jwks",
        ] {
            let error = with_url(refused).expect_err(refused);
            assert_eq!(error.var, "DISPATCH_OIDC_JWKS_URL", "{refused}");
            assert!(error.to_string().contains("https"), "{refused}: {error}");
        }
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(reads_only(OWN, OidcConfig::from_vars).unwrap(), None);
    }
}
