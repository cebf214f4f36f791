//! Who may read the operator view: whoever shows the configured token, as
//! `Authorization: Bearer <token>` (the API, kubectl-gpusched) or as the cookie the login form
//! sets (browsers). Comparisons are of SHA-256 digests in constant time; the cookie holds a
//! digest of the token, not the token.

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const COOKIE_NAME: &str = "gpusched_web";

type Hash = [u8; 32];

fn sha(s: &str) -> Hash {
    Sha256::digest(s.as_bytes()).into()
}

fn same(a: &Hash, b: &Hash) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token's check.
#[derive(Clone)]
pub struct Auth {
    token: Hash,
    cookie_value: String,
    cookie: Hash,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}

/// The bearer token of an `Authorization` header, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The value of our cookie, if sent.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == COOKIE_NAME).then_some(v)
        })
}

impl Auth {
    /// The check of `token`.
    pub fn new(token: &str) -> Auth {
        let cookie_value = hex(&sha(&format!("gpusched-web-session\0{token}")));
        Auth {
            token: sha(token),
            cookie: sha(&cookie_value),
            cookie_value,
        }
    }

    /// Whether the request carries the token (bearer) or the session cookie.
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|t| same(&sha(t), &self.token))
            || cookie(headers).is_some_and(|c| same(&sha(c), &self.cookie))
    }

    /// The `Set-Cookie` value for a login with `given`, if it is the token.
    pub fn login(&self, given: &str) -> Option<String> {
        same(&sha(given.trim()), &self.token).then(|| {
            format!(
                "{COOKIE_NAME}={}; Path=/; HttpOnly; SameSite=Strict",
                self.cookie_value
            )
        })
    }

    /// The `Set-Cookie` value that ends the session.
    pub fn logout() -> String {
        format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    }
}

fn hex(h: &Hash) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(axum::http::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                k.clone(),
                HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    /// Each row: the request's headers and whether it is let in.
    #[test]
    fn only_the_token_or_its_cookie_lets_in() {
        let token = "0123456789abcdef-token";
        let a = Auth::new(token);
        let set = a.login(token).unwrap_or_default();
        let session = set.split(';').next().unwrap_or_default().to_owned();
        let rows: Vec<(HeaderMap, bool)> = vec![
            (headers(&[]), false),
            (
                headers(&[(AUTHORIZATION, &format!("Bearer {token}"))]),
                true,
            ),
            (
                headers(&[(AUTHORIZATION, &format!("bearer  {token} "))]),
                true,
            ),
            (
                headers(&[(AUTHORIZATION, &format!("Basic {token}"))]),
                false,
            ),
            (
                headers(&[(AUTHORIZATION, "Bearer 0123456789abcdef-tokeX")]),
                false,
            ),
            (headers(&[(AUTHORIZATION, "Bearer ")]), false),
            (headers(&[(COOKIE, &format!("a=b; {session}"))]), true),
            (
                headers(&[(COOKIE, &format!("{COOKIE_NAME}={token}"))]),
                false,
            ),
            (headers(&[(COOKIE, &format!("{COOKIE_NAME}="))]), false),
            (headers(&[(COOKIE, "other=1")]), false),
        ];
        for (i, (h, want)) in rows.iter().enumerate() {
            assert_eq!(a.allows(h), *want, "row {i}: {h:?}");
        }
        assert!(a.login("wrong").is_none());
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        assert!(!set.contains(token), "the cookie does not hold the token");
        assert!(Auth::logout().contains("Max-Age=0"));
    }
}
