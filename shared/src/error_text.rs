//! How errors are shown: an error with its sources on one line, and an AWS SDK error as an
//! answer may show it (the detail in the log only, under an error id). Below every adapter
//! (store, queue, notify, token keys) and the service errors that wrap theirs.

/// An AWS SDK error as answers may show it: `what` failed, in our words, with a random error
/// id; the SDK's own text (which can name the account, a role ARN, a table ARN) goes only to
/// the log line carrying the same id (issue #34: a 503 body named the account and the role).
/// `validation` logs it as an error (a request we built wrong), otherwise as a warning.
pub fn aws_detail_logged(what: &str, detail: &str, validation: bool) -> String {
    let id = format!("{:016x}", rand::random::<u64>());
    if validation {
        tracing::error!(error_id = %id, error = %detail, "{what} refused a request we built");
    } else {
        tracing::warn!(error_id = %id, error = %detail, "{what} call failed");
    }
    format!("{what} call failed (error id {id}: its detail is in the service's log under that id)")
}

/// An error and its sources, joined with `: `, for logs and attempt records.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
