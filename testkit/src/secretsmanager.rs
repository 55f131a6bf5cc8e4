//! A stand-in AWS Secrets Manager on loopback for processes that use the real SDK
//! (`AWS_ENDPOINT_URL_SECRETS_MANAGER`): answers `secretsmanager.GetSecretValue` (AWS JSON 1.1)
//! with the values the test set, `ResourceNotFoundException` for any other id, and counts the
//! reads and the credentials they were signed with (the access key id, not checked: a stand-in
//! has no secret to check a signature with). [`StandInSecretsManager::hold_answers`] makes it
//! take reads and never answer them, as a connection stuck across a Lambda freeze does.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

#[derive(Default)]
struct Shared {
    values: Mutex<HashMap<String, String>>,
    /// The `SecretId` of every read, in order.
    reads: Mutex<Vec<String>>,
    /// Reads are taken (and counted) but never answered.
    holding: AtomicBool,
}

pub struct StandInSecretsManager {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for StandInSecretsManager {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandInSecretsManager {
    pub async fn start() -> StandInSecretsManager {
        StandInSecretsManager::start_on("127.0.0.1:0".parse().unwrap())
            .await
            .expect("bind stand-in Secrets Manager")
    }

    /// Starts on `addr` (port 0: a free port), holding no secret yet.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<StandInSecretsManager> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(serve(listener, shared.clone()));
        Ok(StandInSecretsManager { addr, shared, task })
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
        format!("http://{}", self.addr)
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

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    let target = request
                        .headers()
                        .get("x-amz-target")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let answer = answer(&shared, &target, &body);
                    if shared.holding.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, Infallible>(answer)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(shared: &Shared, target: &str, body: &[u8]) -> hyper::Response<Full<Bytes>> {
    let respond = |status: u16, body: Value| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amzn-requestid", "00000000-0000-0000-0000-000000000000")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
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
