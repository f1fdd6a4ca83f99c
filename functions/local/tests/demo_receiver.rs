//! The demo receiver refuses a secret it could never verify with, at start, instead of
//! reporting every correctly signed request as having an invalid signature.
#![allow(clippy::expect_used)] // test helpers fail loudly
use std::process::Command;

fn start_with_secret(secret: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_demo-receiver"))
        .args(["--port", "0", "--secret", secret])
        .output()
        .expect("demo-receiver runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn an_empty_or_malformed_secret_is_refused_at_start() {
    let (code, stderr) = start_with_secret("");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--secret is empty"), "{stderr}");
    let (code, stderr) = start_with_secret("whsec_%%%");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--secret is not a webhook secret"), "{stderr}");
}

#[test]
fn a_valid_secret_starts_the_receiver() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_demo-receiver"))
        .args(["--port", "0", "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("demo-receiver runs");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    BufReader::new(stdout).read_line(&mut line).expect("first line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("demo receiver on http://127.0.0.1:"), "{line}");
}
