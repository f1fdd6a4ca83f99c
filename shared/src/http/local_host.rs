//! The local server's guard against DNS rebinding: only loopback names of its own address are
//! answered.

use axum::Json;
use axum::response::{IntoResponse, Response};

/// Whether a request's `Host` header (`host`) names a server listening on `addr` by a
/// loopback name: `addr` itself, or `localhost`, `127.0.0.1` or `[::1]` with its port. The
/// local runtime and the CLI's dashboard answer only these, so a page of another site that
/// rebinds its DNS name to 127.0.0.1 (its requests carry its own name) cannot reach the
/// unauthenticated local API or read the dashboard (DNS rebinding). A missing header is
/// refused.
pub fn is_local_host(host: Option<&str>, addr: std::net::SocketAddr) -> bool {
    let Some(host) = host else { return false };
    let port = addr.port();
    host == addr.to_string() || ["localhost", "127.0.0.1", "[::1]"].iter().any(|name| host == format!("{name}:{port}"))
}

/// The local runtime's answer to a request whose `Host` is not a loopback name of the server
/// (see [`is_local_host`]): 421 in the API's error shape, `misdirected_request`.
pub fn misdirected(addr: std::net::SocketAddr) -> Response {
    let body = serde_json::json!({"error": {
        "code": "misdirected_request",
        "message": format!("this local server answers only requests to http://{addr} or http://localhost:{} (a Host of another name is refused: DNS rebinding)", addr.port()),
    }});
    (axum::http::StatusCode::MISDIRECTED_REQUEST, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::is_local_host;

    /// Issue #34, failing input 7: `make run` answered any Host, so a page on another site
    /// could reach the unauthenticated admin API by DNS rebinding.
    #[test]
    fn only_loopback_names_of_the_local_server_are_answered() {
        let addr: std::net::SocketAddr = "127.0.0.1:3000".parse().unwrap_or_else(|_| unreachable!());
        for ok in ["127.0.0.1:3000", "localhost:3000", "[::1]:3000"] {
            assert!(is_local_host(Some(ok), addr), "{ok}");
        }
        for refused in ["attacker.example", "attacker.example:3000", "localhost:3001", "127.0.0.1", ""] {
            assert!(!is_local_host(Some(refused), addr), "{refused}");
        }
        assert!(!is_local_host(None, addr));
    }
}
