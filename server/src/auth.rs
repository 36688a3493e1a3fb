//! Bearer tokens with scopes. The server only ever holds the SHA-256 of a token; a presented
//! token is hashed and compared against every configured hash in constant time. Only the
//! `Authorization: Bearer` header carries a token: no cookie does (the console's sign-in
//! cookie is a MAC keyed by a token's hash, which only the console checks).

use std::fmt;

use axum::http::{HeaderMap, header};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read channels and blobs when the deployment is private (some token has this scope).
    Read,
    /// Upload packs and publish channel documents. Implies `read`.
    Publish,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Read => "read",
            Scope::Publish => "publish",
        })
    }
}

/// One `[[tokens]]` entry of the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// A label for logs; never the token itself.
    #[serde(default)]
    pub name: Option<String>,
    /// Lowercase hex SHA-256 of the token (`packd hash-token`).
    pub sha256: String,
    pub scopes: Vec<Scope>,
}

/// A configured token: its name, its hash and its scopes.
#[derive(Debug, Clone)]
pub struct Token {
    name: String,
    hash: [u8; 32],
    scopes: Vec<Scope>,
}

impl Token {
    /// The name the config gives it (`token-N`, N its place in the config, without one).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SHA-256 the config holds for it.
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// `publish` if it has that scope, else `read` if it has that one.
    pub fn widest_scope(&self) -> Option<Scope> {
        self.scopes.iter().max().copied()
    }
}

/// The configured tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    tokens: Vec<Token>,
}

/// Why a request's token was refused. The API turns it into its `401` / `403` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing or unknown bearer token")]
    Unauthorized,
    #[error("this token lacks the {needed} scope")]
    Forbidden { needed: Scope },
}

/// Why a token entry of the config was refused.
#[derive(Debug, thiserror::Error)]
#[error("token {index} ({name}): expected sha256 as 64 hex digits, found {found_len} characters")]
pub struct BadTokenHash {
    pub index: usize,
    pub name: String,
    pub found_len: usize,
}

impl Tokens {
    pub fn new(configs: &[TokenConfig]) -> Result<Self, BadTokenHash> {
        let mut tokens = Vec::with_capacity(configs.len());
        for (index, config) in configs.iter().enumerate() {
            let name = config
                .name
                .clone()
                .unwrap_or_else(|| format!("token-{index}"));
            let mut hash = [0u8; 32];
            hex::decode_to_slice(config.sha256.trim().to_ascii_lowercase(), &mut hash).map_err(
                |_| BadTokenHash {
                    index,
                    name: name.clone(),
                    found_len: config.sha256.trim().len(),
                },
            )?;
            tokens.push(Token {
                name,
                hash,
                scopes: config.scopes.clone(),
            });
        }
        Ok(Tokens { tokens })
    }

    /// Reads are open unless some token carries the `read` scope (a private deployment).
    pub fn reads_need_token(&self) -> bool {
        self.tokens.iter().any(|t| t.scopes.contains(&Scope::Read))
    }

    /// The configured token `presented` is, if any.
    pub fn find(&self, presented: &str) -> Option<&Token> {
        let hash = sha256(presented.as_bytes());
        // Compare against every token, without stopping at the first match, so the time
        // taken does not tell which (or whether a) prefix matched.
        let mut found: Option<&Token> = None;
        for token in &self.tokens {
            if bool::from(token.hash.ct_eq(&hash)) {
                found = Some(token);
            }
        }
        found
    }

    /// Every configured token named `name` (the config does not require names to differ).
    pub fn named<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a Token> {
        self.tokens.iter().filter(move |t| t.name == name)
    }

    /// Checks the request's bearer token for `needed`. Returns the token's name.
    pub fn authorize(&self, headers: &HeaderMap, needed: Scope) -> Result<String, AuthError> {
        self.authorize_header(authorization(headers), needed)
    }

    /// [`Tokens::authorize`] given the request's `Authorization` value (its first, when it
    /// is visible ASCII).
    pub fn authorize_header(
        &self,
        authorization: Option<&str>,
        needed: Scope,
    ) -> Result<String, AuthError> {
        let presented = authorization
            .and_then(bearer)
            .ok_or(AuthError::Unauthorized)?;
        let token = self.find(presented).ok_or(AuthError::Unauthorized)?;
        let allowed = match needed {
            Scope::Read => {
                token.scopes.contains(&Scope::Read) || token.scopes.contains(&Scope::Publish)
            }
            Scope::Publish => token.scopes.contains(&Scope::Publish),
        };
        if !allowed {
            return Err(AuthError::Forbidden { needed });
        }
        Ok(token.name.clone())
    }

    /// For read routes: nothing to check on a public deployment.
    pub fn authorize_read(&self, headers: &HeaderMap) -> Result<(), AuthError> {
        self.authorize_read_header(authorization(headers))
    }

    /// [`Tokens::authorize_read`] given the request's `Authorization` value.
    pub fn authorize_read_header(&self, authorization: Option<&str>) -> Result<(), AuthError> {
        if self.reads_need_token() {
            self.authorize_header(authorization, Scope::Read)?;
        }
        Ok(())
    }
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// The hash to put in the config for `token` (surrounding whitespace ignored).
pub fn hash_token(token: &str) -> String {
    hex::encode(sha256(token.trim().as_bytes()))
}

/// A fresh random token: `ppt_` and 32 random bytes in hex.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("ppt_{}", hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn tokens() -> Tokens {
        Tokens::new(&[
            TokenConfig {
                name: Some("ci".into()),
                sha256: hash_token("publish-token"),
                scopes: vec![Scope::Publish],
            },
            TokenConfig {
                name: None,
                sha256: hash_token("read-token"),
                scopes: vec![Scope::Read],
            },
        ])
        .unwrap()
    }

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn scopes_are_enforced() {
        let t = tokens();
        assert_eq!(
            t.authorize(&headers("Bearer publish-token"), Scope::Publish)
                .unwrap(),
            "ci"
        );
        assert!(
            t.authorize(&headers("bearer publish-token"), Scope::Read)
                .is_ok()
        );
        assert!(matches!(
            t.authorize(&headers("Bearer read-token"), Scope::Publish),
            Err(AuthError::Forbidden {
                needed: Scope::Publish
            })
        ));
        assert!(matches!(
            t.authorize(&headers("Bearer nope"), Scope::Read),
            Err(AuthError::Unauthorized)
        ));
        assert!(matches!(
            t.authorize(&HeaderMap::new(), Scope::Read),
            Err(AuthError::Unauthorized)
        ));
        assert!(matches!(
            t.authorize(&headers("Basic publish-token"), Scope::Publish),
            Err(AuthError::Unauthorized)
        ));
        assert!(t.reads_need_token());
    }

    #[test]
    fn a_cookie_carries_no_token() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("packd_console=publish-token; token=publish-token"),
        );
        assert!(matches!(
            tokens().authorize(&h, Scope::Read),
            Err(AuthError::Unauthorized)
        ));
    }

    #[test]
    fn a_token_is_found_by_its_text_or_its_name() {
        let t = tokens();
        let ci = t.find("publish-token").unwrap();
        assert_eq!((ci.name(), ci.widest_scope()), ("ci", Some(Scope::Publish)));
        assert_eq!(
            ci.hash().to_vec(),
            hex::decode(hash_token("publish-token")).unwrap()
        );
        assert!(t.find("publish-token ").is_none());
        assert_eq!(t.named("token-1").count(), 1);
        assert_eq!(t.named("nobody").count(), 0);
    }

    #[test]
    fn bad_hash_is_refused() {
        let err = Tokens::new(&[TokenConfig {
            name: None,
            sha256: "abc".into(),
            scopes: vec![],
        }])
        .unwrap_err();
        assert_eq!(err.found_len, 3);
    }
}
