//! The console's sign-in cookie: a value only the console accepts, never a token.
//!
//! It holds `NAME.EXPIRES.MAC`: the token's config name (base64url), when the sign-in ends
//! (Unix seconds) and an HMAC-SHA256 of the two, keyed by the SHA-256 the config holds for
//! that token. Every node with the same config checks it without any shared state, and a
//! token taken out of the config (or given another hash) signs its browsers out, because
//! no configured hash makes the MAC any more. A stolen cookie opens the read-only console
//! until it expires, and nothing else: no `/v1` route reads cookies ([`crate::auth`]).
//!
//! Whoever knows a token's configured hash can make such a cookie: the config's hashes
//! open the console (never `/v1`), so the config file is kept from those who may not read it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use subtle::ConstantTimeEq;
use time::OffsetDateTime;

use crate::auth::{Token, Tokens};

/// The cookie's name.
pub const COOKIE: &str = "packd_console";
/// How long a sign-in lasts: 12 hours.
pub const LIFETIME_SECS: i64 = 12 * 3600;
/// Longest cookie value read (browsers keep at most 4096 bytes a cookie).
const MAX_VALUE_BYTES: usize = 4096;
/// What the MAC covers before the cookie's text, so no other HMAC keyed with a token's hash
/// could pass for a sign-in.
const CONTEXT: &[u8] = b"packd console sign-in v1\n";

/// Why a cookie signs nobody in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("expected NAME.EXPIRES.MAC (base64url, Unix seconds, base64url), found {found}")]
    Malformed { found: &'static str },
    #[error("the sign-in ended at {expired_at} (Unix seconds), it is now {now}")]
    Expired { expired_at: i64, now: i64 },
    #[error("no configured token named {name:?} has the hash that signed it")]
    NoToken { name: String },
}

/// The cookie value for `token` signed in at `now`: it lasts [`LIFETIME_SECS`].
pub fn issue(token: &Token, now: OffsetDateTime) -> String {
    issue_with_key(token.hash(), token.name(), now)
}

/// [`issue`] for the token named `name` whose configured hash is `key`.
pub fn issue_with_key(key: &[u8; 32], name: &str, now: OffsetDateTime) -> String {
    let signed = format!(
        "{}.{}",
        B64.encode(name),
        now.unix_timestamp() + LIFETIME_SECS
    );
    let mac = B64.encode(mac(key, &signed));
    format!("{signed}.{mac}")
}

/// The configured token a cookie `value` signs in at `now`.
pub fn check<'a>(
    tokens: &'a Tokens,
    value: &str,
    now: OffsetDateTime,
) -> Result<&'a Token, Refused> {
    let malformed = |found| Refused::Malformed { found };
    if value.len() > MAX_VALUE_BYTES {
        return Err(malformed("a value over 4096 bytes"));
    }
    let (signed, presented) = value
        .rsplit_once('.')
        .ok_or(malformed("no MAC after a dot"))?;
    let (name, expires) = signed
        .split_once('.')
        .ok_or(malformed("fewer than three parts"))?;
    if expires.is_empty() || !expires.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("an expiry that is not decimal digits"));
    }
    let expired_at: i64 = expires
        .parse()
        .map_err(|_| malformed("an expiry out of range"))?;
    let name = B64
        .decode(name)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or(malformed("a name that is not base64url of UTF-8"))?;
    let presented = B64
        .decode(presented)
        .map_err(|_| malformed("a MAC that is not base64url"))?;
    // Every token of that name is tried, without stopping at a match.
    let mut found = None;
    for token in tokens.named(&name) {
        if bool::from(mac(token.hash(), signed).as_slice().ct_eq(&presented)) {
            found = Some(token);
        }
    }
    let token = found.ok_or(Refused::NoToken { name })?;
    let now = now.unix_timestamp();
    if now >= expired_at {
        return Err(Refused::Expired { expired_at, now });
    }
    Ok(token)
}

#[allow(clippy::expect_used, reason = "HMAC takes a key of any length")]
fn mac(key: &[u8; 32], signed: &str) -> [u8; 32] {
    let mut mac =
        <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(CONTEXT);
    mac.update(signed.as_bytes());
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Scope, TokenConfig, hash_token};

    fn tokens(entries: &[(&str, &str)]) -> Tokens {
        let configs: Vec<TokenConfig> = entries
            .iter()
            .map(|(name, token)| TokenConfig {
                name: Some(name.to_string()),
                sha256: hash_token(token),
                scopes: vec![Scope::Read],
            })
            .collect();
        Tokens::new(&configs).unwrap()
    }

    #[test]
    fn a_cookie_signs_in_its_token_until_it_expires() {
        let t = tokens(&[("ci", "one"), ("ops", "two")]);
        let now = OffsetDateTime::now_utc();
        let value = issue(t.find("two").unwrap(), now);
        assert_eq!(check(&t, &value, now).unwrap().name(), "ops");
        let last = now + time::Duration::seconds(LIFETIME_SECS - 1);
        assert!(check(&t, &value, last).is_ok());
        let end = now + time::Duration::seconds(LIFETIME_SECS);
        assert!(matches!(
            check(&t, &value, end),
            Err(Refused::Expired { .. })
        ));
        assert!(!value.contains("two") && !value.contains(&B64.encode("two")));
    }

    #[test]
    fn a_cookie_is_checked_against_the_token_of_its_name() {
        // Two tokens may share a name: the one whose hash signed the cookie is the one.
        let t = tokens(&[("ci", "one"), ("ci", "two")]);
        let now = OffsetDateTime::now_utc();
        let value = issue(t.find("two").unwrap(), now);
        let token = check(&t, &value, now).unwrap();
        assert_eq!(token.hash(), t.find("two").unwrap().hash());
        // Another hash under the same name signs it out.
        let other = tokens(&[("ci", "three")]);
        assert_eq!(
            check(&other, &value, now).unwrap_err(),
            Refused::NoToken { name: "ci".into() }
        );
    }

    #[test]
    fn a_malformed_cookie_says_what_is_wrong() {
        let t = tokens(&[("ci", "one")]);
        let now = OffsetDateTime::now_utc();
        let value = issue(t.find("one").unwrap(), now);
        let (name, rest) = value.split_once('.').unwrap();
        let (expires, mac) = rest.split_once('.').unwrap();
        for (bad, found) in [
            ("", "no MAC after a dot"),
            (mac, "no MAC after a dot"),
            (&format!("{name}.{mac}"), "fewer than three parts"),
            (
                &format!("{name}.+{expires}.{mac}"),
                "an expiry that is not decimal digits",
            ),
            (
                &format!("{name}..{mac}"),
                "an expiry that is not decimal digits",
            ),
            (
                &format!("{name}.99999999999999999999.{mac}"),
                "an expiry out of range",
            ),
            (
                &format!("!.{expires}.{mac}"),
                "a name that is not base64url of UTF-8",
            ),
            (
                &format!("{name}.{expires}.!"),
                "a MAC that is not base64url",
            ),
        ] {
            assert_eq!(
                check(&t, bad, now).unwrap_err(),
                Refused::Malformed { found },
                "{bad}"
            );
        }
        let long = format!("{}.{expires}.{mac}", "A".repeat(MAX_VALUE_BYTES));
        assert!(matches!(
            check(&t, &long, now),
            Err(Refused::Malformed { .. })
        ));
    }
}
