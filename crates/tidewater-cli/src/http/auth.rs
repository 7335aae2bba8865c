//! Who may listen where, and who may change jobs: pure decisions.
//!
//! The API binds loopback unless told otherwise; binding any other address
//! needs a token, and with a token set every mutating request must carry
//! it as `Authorization: Bearer TOKEN`.

use std::net::SocketAddr;

/// Whether the API may listen on `addr` with `token` (`Err`: why not,
/// and what to do).
pub fn may_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), String> {
    if let Some(token) = token
        && token.trim().len() < 16
    {
        return Err(format!(
            "the HTTP token is {} characters long: give at least 16 (e.g. `openssl rand -hex 16`)",
            token.trim().len()
        ));
    }
    if addr.ip().is_loopback() || token.is_some() {
        return Ok(());
    }
    Err(format!(
        "--http {addr} listens beyond this machine: give --http-token (or TIDEWATER_HTTP_TOKEN) \
         so that only holders of the token can cancel or submit jobs, or listen on 127.0.0.1"
    ))
}

/// Whether a mutating request with this `Authorization` header may go on.
pub fn authorized(token: Option<&str>, header: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    same(given.trim().as_bytes(), token.trim().as_bytes())
}

/// Compares in time that does not depend on where the first difference is,
/// so that timing does not reveal a token's prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef";

    #[test]
    fn binding_beyond_loopback_needs_a_long_enough_token() {
        let cases: [(&str, Option<&str>, bool); 7] = [
            ("127.0.0.1:7373", None, true),
            ("[::1]:7373", None, true),
            ("127.0.0.1:7373", Some(TOKEN), true),
            ("0.0.0.0:7373", None, false),
            ("10.1.2.3:7373", None, false),
            ("0.0.0.0:7373", Some(TOKEN), true),
            ("0.0.0.0:7373", Some("short"), false),
        ];
        for (addr, token, ok) in cases {
            let got = may_bind(addr.parse().unwrap(), token);
            assert_eq!(got.is_ok(), ok, "{addr} {token:?}: {got:?}");
        }
        let refused = may_bind("0.0.0.0:1".parse().unwrap(), None).unwrap_err();
        assert!(refused.contains("--http-token"), "{refused}");
    }

    #[test]
    fn a_mutating_request_needs_the_bearer_token_once_one_is_set() {
        let bearer = format!("Bearer {TOKEN}");
        let cases: [(Option<&str>, Option<&str>, bool); 6] = [
            (None, None, true),
            (None, Some("Bearer whatever"), true),
            (Some(TOKEN), None, false),
            (Some(TOKEN), Some(TOKEN), false),
            (Some(TOKEN), Some("Bearer 0123456789abcdeX"), false),
            (Some(TOKEN), Some(bearer.as_str()), true),
        ];
        for (token, header, ok) in cases {
            assert_eq!(authorized(token, header), ok, "{token:?} {header:?}");
        }
    }
}
