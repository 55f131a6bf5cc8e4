//! A minimal lambda_http "hello" function: the floor the Koe functions' cold start and memory are
//! measured against (see bench/run.sh).

use lambda_http::{Body, Error, Request, Response, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::run(service_fn(|_: Request| async {
        Ok::<_, Error>(
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::from(r#"{"status":"ok"}"#))
                .unwrap(),
        )
    }))
    .await
}
