//! Measurements 6 and 7: the release binaries against a tiny local Lambda Runtime API.
//!
//! The server answers `GET /2018-06-01/runtime/invocation/next` (holding it open when it has
//! no event, as Lambda does between invocations) and takes responses and errors. "Ready" is
//! the moment a binary's first `next` request arrives: configuration read, SDK clients built,
//! the handler waiting for its first event (what Lambda reports as the init phase).

use crate::stack::{Res, err};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::net::SocketAddr;
use std::path::{Path as FsPath, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

#[derive(Default)]
struct Rt {
    nexts: AtomicU32,
    first_next: Mutex<Option<Instant>>,
    event: Mutex<Option<(String, serde_json::Value)>>,
    responses: Mutex<Vec<(String, String)>>,
    notify: Notify,
}

async fn next(State(rt): State<Arc<Rt>>) -> Response {
    let at = Instant::now();
    rt.nexts.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut f) = rt.first_next.lock() {
        f.get_or_insert(at);
    }
    rt.notify.notify_waiters();
    let event = rt.event.lock().ok().and_then(|mut e| e.take());
    match event {
        Some((id, body)) => {
            let mut headers = HeaderMap::new();
            let deadline = (chrono::Utc::now().timestamp_millis() + 60_000).to_string();
            for (k, v) in [
                ("lambda-runtime-aws-request-id", id.as_str()),
                ("lambda-runtime-deadline-ms", deadline.as_str()),
                ("lambda-runtime-invoked-function-arn", "arn:aws:lambda:us-east-1:000000000000:function:bench"),
                ("lambda-runtime-trace-id", "Root=1-00000000-000000000000000000000000"),
                ("content-type", "application/json"),
            ] {
                if let Ok(v) = HeaderValue::from_str(v) {
                    headers.insert(k, v);
                }
            }
            (StatusCode::OK, headers, body.to_string()).into_response()
        }
        None => {
            // Lambda holds the request until there is an event; the process is ended first.
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

async fn respond(State(rt): State<Arc<Rt>>, Path(id): Path<String>, body: String) -> StatusCode {
    if let Ok(mut r) = rt.responses.lock() {
        r.push((id, body));
    }
    rt.notify.notify_waiters();
    StatusCode::ACCEPTED
}

async fn init_error(State(rt): State<Arc<Rt>>, body: String) -> StatusCode {
    if let Ok(mut r) = rt.responses.lock() {
        r.push(("init".into(), body));
    }
    rt.notify.notify_waiters();
    StatusCode::ACCEPTED
}

/// The local Runtime API.
pub struct RuntimeApi {
    addr: SocketAddr,
    rt: Arc<Rt>,
    task: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    /// Starts it on a free loopback port.
    ///
    /// # Errors
    /// When it cannot bind.
    pub async fn start() -> Res<Self> {
        let rt = Arc::new(Rt::default());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let router = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(respond))
            .route("/2018-06-01/runtime/invocation/{id}/error", post(respond))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(rt.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { addr, rt, task })
    }

    fn reset(&self, event: Option<(String, serde_json::Value)>) {
        self.rt.nexts.store(0, Ordering::SeqCst);
        if let Ok(mut f) = self.rt.first_next.lock() {
            *f = None;
        }
        if let Ok(mut e) = self.rt.event.lock() {
            *e = event;
        }
        if let Ok(mut r) = self.rt.responses.lock() {
            r.clear();
        }
    }

    async fn wait_for(&self, within: Duration, done: impl Fn(&Rt) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let notified = self.rt.notify.notified();
            if done(&self.rt) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(20)), notified).await;
        }
    }

    /// Stops the server.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Where the release binaries are: beside this one.
pub fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(FsPath::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target/release"))
}

fn command(
    bin: &FsPath,
    api: &RuntimeApi,
    name: &str,
    env: &[(&str, &str)],
    log: &FsPath,
) -> Res<tokio::process::Command> {
    let mut c = tokio::process::Command::new(bin);
    c.env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench")
        // As Lambda starts a function: neither is set there (nor by the template); a caller
        // that wants them passes them in `env`.
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(log)?))
        .stderr(Stdio::from(std::fs::OpenOptions::new().append(true).open(log)?))
        .kill_on_drop(true);
    Ok(c)
}

/// `VmHWM` (peak resident set) and `VmRSS` of a process, KiB.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// One binary's cold starts.
#[derive(Debug, Clone)]
pub struct ColdStart {
    /// Binary name.
    pub name: String,
    /// File size, bytes.
    pub bytes: u64,
    /// Process start to first `next`, ms, sorted.
    pub ready_ms: Vec<f64>,
    /// Peak RSS at ready, KiB (median run).
    pub rss_kib: u64,
}

/// Starts `bin` `runs` times, each time until its first `next`, then ends it.
///
/// # Errors
/// When it cannot start or never asks for an event.
pub async fn cold_start(
    api: &RuntimeApi,
    name: &str,
    runs: usize,
    env: &[(&str, &str)],
    logs: &FsPath,
) -> Res<ColdStart> {
    let bin = bin_dir().join(name);
    let bytes = std::fs::metadata(&bin).map_err(|e| err(format!("{}: {e}", bin.display())))?.len();
    let mut ready = Vec::new();
    let mut rss = Vec::new();
    for i in 0..runs {
        api.reset(None);
        let log = logs.join(format!("{name}-cold-{i}.log"));
        let mut cmd = command(&bin, api, name, env, &log)?;
        let t0 = Instant::now();
        let mut child = cmd.spawn()?;
        let ok = api
            .wait_for(Duration::from_secs(10), |rt| rt.first_next.lock().map(|f| f.is_some()).unwrap_or(false))
            .await;
        let at = api.rt.first_next.lock().ok().and_then(|f| *f);
        let pid = child.id().unwrap_or(0);
        let (hwm, _) = memory_kib(pid);
        let _ = child.kill().await;
        match (ok, at) {
            (true, Some(at)) => {
                ready.push(at.duration_since(t0).as_secs_f64() * 1000.0);
                rss.push(hwm);
            }
            _ => {
                return Err(err(format!("{name} never asked for an event; see {}", log.display())));
            }
        }
    }
    ready.sort_by(f64::total_cmp);
    rss.sort_unstable();
    Ok(ColdStart {
        name: name.to_string(),
        bytes,
        ready_ms: ready,
        rss_kib: rss.get(rss.len() / 2).copied().unwrap_or(0),
    })
}

/// What deliver did with one batch.
#[derive(Debug, Clone)]
pub struct BatchMemory {
    /// Peak RSS after the batch, KiB.
    pub hwm_kib: u64,
    /// RSS after the batch, KiB.
    pub rss_kib: u64,
    /// Its response to the batch.
    pub response: String,
    /// Process start to the response, ms.
    pub ms: f64,
}

/// Runs the deliver binary on one SQS event and reads its peak RSS once it asks for the next.
///
/// # Errors
/// When it does not answer within 60 s.
pub async fn deliver_batch(
    api: &RuntimeApi,
    event: serde_json::Value,
    env: &[(&str, &str)],
    logs: &FsPath,
) -> Res<BatchMemory> {
    let bin = bin_dir().join("deliver");
    api.reset(Some(("bench-batch-1".into(), event)));
    let log = logs.join("deliver-batch.log");
    let mut cmd = command(&bin, api, "deliver", env, &log)?;
    let t0 = Instant::now();
    let mut child = cmd.spawn()?;
    let ok = api
        .wait_for(Duration::from_secs(60), |rt| {
            rt.nexts.load(Ordering::SeqCst) >= 2 && rt.responses.lock().map(|r| !r.is_empty()).unwrap_or(false)
        })
        .await;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let (hwm, rss) = memory_kib(child.id().unwrap_or(0));
    let _ = child.kill().await;
    let response = api.rt.responses.lock().ok().and_then(|r| r.first().map(|x| x.1.clone())).unwrap_or_default();
    if !ok {
        return Err(err(format!(
            "deliver did not finish the batch in 60 s (response: {response}); see {}",
            log.display()
        )));
    }
    Ok(BatchMemory { hwm_kib: hwm, rss_kib: rss, response, ms })
}
