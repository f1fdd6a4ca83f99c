//! `make run`: the whole service in one process against the AWS emulator (or real AWS).

use std::net::SocketAddr;
use webhooks::{App, Config, bootstrap};
use webhooks_local::Options;

fn defaults(name: &str) -> Option<String> {
    Some(match name {
        "WEBHOOKS_TABLE" => "webhooks-local".into(),
        "WEBHOOKS_QUEUE_URL" => "webhooks-local".into(),
        "WEBHOOKS_SLOW_QUEUE_URL" => "webhooks-local-slow".into(),
        "WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS" => "true".into(),
        _ => return None,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    webhooks::init_tracing();
    let mut config = Config::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()).or_else(|| defaults(k)))?;
    let sdk = webhooks::app::aws_sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    bootstrap::create_table(&dynamodb, &config.table, config.endpoint_copies).await?;
    if !config.queue_url.contains('/') {
        config.queue_url = bootstrap::create_queue(&sqs, &config.queue_url, 60).await?;
    }
    if let Some(slow) = config.slow_queue_url.as_mut().filter(|u| !u.contains('/')) {
        *slow = bootstrap::create_queue(&sqs, slow, 60).await?;
    }
    if config.allow_private_destinations {
        eprintln!(
            "note: WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS is on, so receivers on loopback and private addresses are allowed (never set it on Lambda)"
        );
    }
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let options = Options { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..Options::default() };
    let table = config.table.clone();
    let queue = config.queue_url.clone();
    let interval = config.sweep_interval.as_secs();
    let app = App::from_aws(config).await?;
    let running = webhooks_local::start(app, sqs, options).await?;
    let addr = running.addr;
    eprintln!("webhooks local runtime listening on http://{addr}");
    eprintln!("  table {table}, queue {queue}, sweeper every {interval} s");
    eprintln!("  try: curl -s -X POST http://{addr}/v1/endpoints -H 'content-type: application/json' \\");
    eprintln!("         -d '{{\"tenant_id\":\"acme\",\"url\":\"http://127.0.0.1:9000/hook\"}}'");
    eprintln!("  ops dashboard: http://{addr}/dashboard");
    eprintln!("  a tenant's portal: curl -s -X POST http://{addr}/v1/tenants/acme/portal-sessions  (open its url)");
    eprintln!("  Ctrl-C stops it.");
    tokio::signal::ctrl_c().await?;
    eprintln!("stopping");
    running.stop().await;
    Ok(())
}
