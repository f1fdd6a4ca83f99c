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

/// Whether a request's `Origin` header (`origin`) allows it on the local server listening on
/// `addr`: absent (not a browser's cross-origin request), or one of the server's own loopback
/// origins (`http://` + a name [`is_local_host`] takes). A browser sends `Origin` with every
/// cross-origin POST, so a page of another site cannot make it act on the unauthenticated
/// local API even with a bodiless POST (enable, disable, replay), which no `Content-Type`
/// rule catches. (`Origin: null`, from sandboxed frames and local files, is refused.) The
/// local runtime checks it on the API's routes (`/v1/...`); the portal's and dashboard's forms
/// carry form tokens instead (their pages are `no-referrer`, so browsers send `Origin: null`
/// with their POSTs).
pub fn is_local_origin(origin: Option<&str>, addr: std::net::SocketAddr) -> bool {
    match origin {
        None => true,
        Some(o) => o.strip_prefix("http://").is_some_and(|host| is_local_host(Some(host), addr)),
    }
}

/// The local runtime's answer to a request from a page of another origin (see
/// [`is_local_origin`]): 403 in the API's error shape, `cross_origin_request`.
pub fn cross_origin(addr: std::net::SocketAddr) -> Response {
    let body = serde_json::json!({"error": {
        "code": "cross_origin_request",
        "message": format!("this local server takes requests other than GET only from its own pages (Origin http://{addr} or http://localhost:{}): a page of another site is refused", addr.port()),
    }});
    (axum::http::StatusCode::FORBIDDEN, Json(body)).into_response()
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

    /// Issue #54, item 7: a page of another site must not act on the local API.
    #[test]
    fn only_the_local_servers_own_origins_may_post() {
        let addr: std::net::SocketAddr = "127.0.0.1:3000".parse().unwrap_or_else(|_| unreachable!());
        for ok in [None, Some("http://127.0.0.1:3000"), Some("http://localhost:3000")] {
            assert!(super::is_local_origin(ok, addr), "{ok:?}");
        }
        for refused in ["https://attacker.example", "null", "http://localhost:3001", "https://127.0.0.1:3000", ""] {
            assert!(!super::is_local_origin(Some(refused), addr), "{refused}");
        }
    }
}
