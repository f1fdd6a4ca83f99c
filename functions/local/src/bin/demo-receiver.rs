//! A webhook receiver for the local demo: prints every request it gets and answers with a
//! chosen status. `--secret` verifies the Standard Webhooks signature.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use clap::Parser;
use std::net::SocketAddr;
use std::sync::Arc;

/// The demo's webhook receiver: prints every request it gets on 127.0.0.1 (its `webhook-id`,
/// `webhook-attempt`, `webhook-timestamp` and body) and answers with `--status`; with
/// `--secret` it also checks the `webhook-signature` and answers 400 to a request whose
/// signature does not verify, as a real receiver must.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Port on 127.0.0.1.
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// HTTP status to answer with (try 500 to watch retries; 410 disables the endpoint under
    /// the standard policy, holding its deliveries).
    #[arg(long, default_value_t = 200)]
    status: u16,
    /// The endpoint's `whsec_` secret, to verify signatures.
    #[arg(long)]
    secret: Option<String>,
}

/// What every request is answered with, parsed once at start.
struct Receiver {
    /// The status to answer with.
    status: StatusCode,
    /// The signature check, when `--secret` was given.
    verifier: Option<standardwebhooks::Webhook>,
}

async fn receive(State(rx): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
    let (verdict, refused) = match &rx.verifier {
        None => ("not checked (no --secret)".to_string(), false),
        Some(v) => match v.verify(&body, &headers) {
            Ok(()) => ("valid".to_string(), false),
            Err(e) => (format!("INVALID ({e}): answered 400"), true),
        },
    };
    println!(
        "webhook-id={} attempt={} timestamp={} signature {verdict}\n  {}",
        h("webhook-id"),
        h("webhook-attempt"),
        h("webhook-timestamp"),
        String::from_utf8_lossy(&body)
    );
    if refused { StatusCode::BAD_REQUEST } else { rx.status }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let verifier = match &args.secret {
        None => None,
        // Refused here rather than reported as an invalid signature on every request.
        Some(secret) if secret.trim().is_empty() => {
            return Err("--secret is empty: give the endpoint's whsec_ secret, or leave --secret out".into());
        }
        Some(secret) => {
            Some(standardwebhooks::Webhook::new(secret).map_err(|e| format!("--secret is not a webhook secret: {e}"))?)
        }
    };
    let status = StatusCode::from_u16(args.status).unwrap_or(StatusCode::OK);
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("demo receiver on http://{addr}/hook answering {}", args.status);
    axum::serve(listener, Router::new().fallback(receive).with_state(Arc::new(Receiver { status, verifier }))).await?;
    Ok(())
}
