//! A stand-in AWS Secrets Manager on loopback for processes that use the real SDK
//! (`AWS_ENDPOINT_URL_SECRETS_MANAGER`): answers `secretsmanager.GetSecretValue` (AWS JSON 1.1)
//! with the values the test set, `ResourceNotFoundException` for any other id, and counts the
//! reads and the credentials they were signed with (the access key id, not checked: a stand-in
//! has no secret to check a signature with). [`StandInSecretsManager::hold_answers`] makes it
//! take reads and never answer them, as a connection stuck across a Lambda freeze does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::loopback::{self, Loopback, aws_json_1_1 as respond};

#[derive(Default)]
struct Shared {
    values: Mutex<HashMap<String, String>>,
    /// The `SecretId` of every read, in order.
    reads: Mutex<Vec<String>>,
    /// Reads are taken (and counted) but never answered.
    holding: AtomicBool,
}

pub struct StandInSecretsManager {
    server: Loopback,
    shared: Arc<Shared>,
}

impl StandInSecretsManager {
    /// Starts on a free loopback port, holding no secret yet.
    pub async fn start() -> StandInSecretsManager {
        let start_on = StandInSecretsManager::start_on;
        loopback::on_a_free_port("stand-in Secrets Manager", start_on).await
    }

    /// Starts on `addr` (port 0: a free port), holding no secret yet.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<StandInSecretsManager> {
        let shared = Arc::new(Shared::default());
        let served = shared.clone();
        let server = Loopback::start_on(addr, move |request| {
            let shared = served.clone();
            async move {
                let target = loopback::amz_target(&request);
                let body = loopback::body_bytes(request.into_body()).await;
                let answer = answer(&shared, &target, &body);
                if shared.holding.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                answer
            }
        })
        .await?;
        Ok(StandInSecretsManager { server, shared })
    }

    /// Starts on `addr` holding exactly the secrets `events/env.json` names, with the values the
    /// fixtures expect ([`crate::fixtures::secrets`]): `secrets-manager-local` and the tests.
    pub async fn start_with_fixture_secrets(
        addr: SocketAddr,
    ) -> std::io::Result<StandInSecretsManager> {
        let standin = StandInSecretsManager::start_on(addr).await?;
        for (arn, value) in crate::fixtures::secrets() {
            standin.set(&arn, value);
        }
        Ok(standin)
    }

    /// The value for `AWS_ENDPOINT_URL_SECRETS_MANAGER`.
    pub fn endpoint(&self) -> String {
        self.server.url()
    }

    /// Sets (or rotates) the secret `arn` to `value`.
    pub fn set(&self, arn: &str, value: &str) {
        let mut values = self.shared.values.lock().unwrap();
        values.insert(arn.to_owned(), value.to_owned());
    }

    /// From now on (`true`) reads are taken and counted but never answered: the connection
    /// stays open and silent. `false`: later reads are answered again (held ones never are).
    pub fn hold_answers(&self, hold: bool) {
        self.shared.holding.store(hold, Ordering::SeqCst);
    }

    /// The `SecretId` of every read so far, in order.
    pub fn reads(&self) -> Vec<String> {
        self.shared.reads.lock().unwrap().clone()
    }
}

fn answer(shared: &Shared, target: &str, body: &[u8]) -> loopback::Response {
    if target != "secretsmanager.GetSecretValue" {
        return respond(
            400,
            json!({"__type": "UnknownOperationException", "message": format!("stand-in knows GetSecretValue only, not {target:?}")}),
        );
    }
    let id = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["SecretId"].as_str().map(str::to_owned))
        .unwrap_or_default();
    shared.reads.lock().unwrap().push(id.clone());
    match shared.values.lock().unwrap().get(&id) {
        Some(value) => respond(
            200,
            json!({"ARN": id, "Name": id, "SecretString": value, "VersionId": "v1", "VersionStages": ["AWSCURRENT"], "CreatedDate": 1.7e9}),
        ),
        None => respond(
            400,
            json!({"__type": "ResourceNotFoundException", "message": "Secrets Manager can't find the specified secret."}),
        ),
    }
}
