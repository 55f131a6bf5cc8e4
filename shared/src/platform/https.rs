//! Every HTTPS client of ours (OpenAI, the OIDC issuer's JWKS, and the AWS SDK's through
//! `aws_http`): reqwest over rustls with Mozilla's root certificates compiled in
//! (webpki-roots).
//!
//! reqwest's default verifier, like the SDK's own HTTPS client, reads and parses the system's
//! certificate store when a client is built, about a millisecond of every cold start of the
//! functions that have one (measured with `bench/run.sh`); the compiled-in roots are trust
//! anchors already, nothing to load or parse.

use std::sync::Arc;

/// A client builder whose TLS trusts the webpki roots (with aws-lc-rs, as everywhere else).
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(tls_config())
}

/// TLS that trusts the webpki roots, with aws-lc-rs (also the APNs connections', `push::connection`).
pub fn tls_config() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("aws-lc-rs supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_builds_with_the_compiled_in_roots() {
        super::client_builder().build().unwrap();
    }
}
