//! Authenticity checks over the raw body bytes, before anything is parsed. Every check
//! tries all configured secrets without stopping at the first match and compares in
//! constant time, so response timing reveals neither a secret nor which one matched.

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};
use subtle::{Choice, ConstantTimeEq};

use super::HmacKey;

/// Why a delivery was not accepted as authentic. Said to the sender only as "401".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    MissingToken,
    WrongToken,
    MissingSignature,
    MalformedSignature,
    WrongSignature,
    /// A signed timestamp outside the source's tolerance: a replay, or a clock gone wrong.
    StaleTimestamp,
    /// A credential header given twice: which one counts is ambiguous, so neither does.
    Ambiguous,
    /// Checked and not authentic, from an address that failed too often lately: answered
    /// 429 (back off) and only counted, not logged.
    Throttled,
}

impl Rejected {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rejected::MissingToken => "missing_token",
            Rejected::WrongToken => "wrong_token",
            Rejected::MissingSignature => "missing_signature",
            Rejected::MalformedSignature => "malformed_signature",
            Rejected::WrongSignature => "wrong_signature",
            Rejected::StaleTimestamp => "stale_timestamp",
            Rejected::Ambiguous => "ambiguous_credentials",
            Rejected::Throttled => "throttled",
        }
    }
}

/// A static token, as `Authorization: Bearer <token>` or the bare token. Compared in
/// constant time so that response timing reveals nothing of the secret.
pub(crate) fn token(header: Option<&str>, expected: &str) -> Result<(), Rejected> {
    tokens(header, &[expected])
}

/// A configured token's text. Config's `Secret` is one; this layer cannot name it.
pub trait Token {
    fn text(&self) -> &str;
}

impl Token for &str {
    fn text(&self) -> &str {
        self
    }
}

/// A static token (`Bearer <token>` or verbatim) that must equal one of `expected`.
/// Both sides are hashed first, so the comparison's time does not depend on the length.
pub fn tokens<T: Token>(header: Option<&str>, expected: &[T]) -> Result<(), Rejected> {
    let given = header.ok_or(Rejected::MissingToken)?.trim();
    let bare = given
        .strip_prefix("Bearer ")
        .or_else(|| given.strip_prefix("bearer "))
        .unwrap_or(given)
        .trim();
    let given_bare = Sha256::digest(bare.as_bytes());
    let given_verbatim = Sha256::digest(given.as_bytes());
    let mut ok = Choice::from(0);
    for t in expected {
        let want = Sha256::digest(t.text().as_bytes());
        ok |= given_bare.as_slice().ct_eq(want.as_slice());
        ok |= given_verbatim.as_slice().ct_eq(want.as_slice());
    }
    if bool::from(ok) {
        Ok(())
    } else {
        Err(Rejected::WrongToken)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha256,
    Sha1,
}

fn mac(algorithm: Algorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    match algorithm {
        Algorithm::Sha256 => {
            let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        Algorithm::Sha1 => {
            let mut m = Hmac::<Sha1>::new_from_slice(key).expect("HMAC accepts any key length");
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
    }
}

/// Whether `given` equals the MAC of `parts` under any of `keys`; all keys are tried.
fn any_key(algorithm: Algorithm, keys: &[HmacKey], parts: &[&[u8]], given: &[u8]) -> bool {
    let mut ok = Choice::from(0);
    for k in keys {
        ok |= mac(algorithm, k.expose(), parts).as_slice().ct_eq(given);
    }
    bool::from(ok)
}

/// A hex HMAC of the raw body. `prefix` (`sha256=`) is required when given, so that a
/// header of another scheme is never read as this one.
pub fn hmac_hex(
    header: Option<&str>,
    prefix: Option<&str>,
    algorithm: Algorithm,
    keys: &[HmacKey],
    body: &[u8],
) -> Result<(), Rejected> {
    let given = header.ok_or(Rejected::MissingSignature)?.trim();
    let hex_part = match prefix {
        Some(p) => given.strip_prefix(p).ok_or(Rejected::MalformedSignature)?,
        None => given,
    };
    let signature = hex::decode(hex_part).map_err(|_| Rejected::MalformedSignature)?;
    if any_key(algorithm, keys, &[body], &signature) {
        Ok(())
    } else {
        Err(Rejected::WrongSignature)
    }
}

/// HMAC-SHA256 of the raw body, given as `sha256=<hex>` (or bare hex).
#[cfg(test)]
pub(crate) fn hmac_sha256(header: Option<&str>, secret: &str, body: &[u8]) -> Result<(), Rejected> {
    let given = header.ok_or(Rejected::MissingSignature)?.trim();
    let bare = given.strip_prefix("sha256=").unwrap_or(given);
    hmac_hex(
        Some(bare),
        None,
        Algorithm::Sha256,
        &[HmacKey::new(secret.as_bytes())],
        body,
    )
}

/// `sha256=<hex>` for `body`: what a sender puts in its signature header.
#[cfg(test)]
pub(crate) fn sign(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(mac(Algorithm::Sha256, secret.as_bytes(), &[body]))
    )
}

/// The Standard Webhooks headers of one delivery.
#[derive(Debug, Clone, Copy)]
pub struct StandardHeaders<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Longest signature header read: a few rotated signatures fit, a flood does not.
const MAX_SIGNATURES: usize = 8;

/// Standard Webhooks: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, one or
/// several space-separated in `webhook-signature`, and a timestamp within `tolerance`
/// of `now` (unix seconds) in either direction. The timestamp is signed, so a captured
/// delivery stops verifying once it is older than the tolerance.
pub fn standard_webhooks(
    h: StandardHeaders<'_>,
    keys: &[HmacKey],
    tolerance_secs: i64,
    now: i64,
    body: &[u8],
) -> Result<(), Rejected> {
    let (Some(id), Some(ts), Some(sigs)) = (h.id, h.timestamp, h.signature) else {
        return Err(Rejected::MissingSignature);
    };
    let ts_value: i64 = ts
        .trim()
        .parse()
        .map_err(|_| Rejected::MalformedSignature)?;
    if ts.trim() != ts || id.is_empty() || id.len() > 256 {
        return Err(Rejected::MalformedSignature);
    }
    if now.abs_diff(ts_value) > tolerance_secs.unsigned_abs() {
        return Err(Rejected::StaleTimestamp);
    }
    let mut any_v1 = false;
    let mut ok = false;
    for entry in sigs
        .split(' ')
        .filter(|s| !s.is_empty())
        .take(MAX_SIGNATURES)
    {
        let Some(b64) = entry.strip_prefix("v1,") else {
            // Other versions (`v1a,` is ed25519) are not ours to check.
            continue;
        };
        any_v1 = true;
        let Ok(given) = base64::engine::general_purpose::STANDARD.decode(b64) else {
            continue;
        };
        ok |= any_key(
            Algorithm::Sha256,
            keys,
            &[id.as_bytes(), b".", ts.as_bytes(), b".", body],
            &given,
        );
    }
    match (ok, any_v1) {
        (true, _) => Ok(()),
        (false, true) => Err(Rejected::WrongSignature),
        (false, false) => Err(Rejected::MalformedSignature),
    }
}

/// `v1,<base64>` for a Standard Webhooks delivery: what a sender puts in `webhook-signature`.
#[cfg(test)]
pub(crate) fn sign_standard_webhooks(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let m = mac(
        Algorithm::Sha256,
        key,
        &[id.as_bytes(), b".", ts.as_bytes(), b".", body],
    );
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secrets: &[&str]) -> Vec<HmacKey> {
        secrets.iter().map(|s| HmacKey::new(s.as_bytes())).collect()
    }

    #[test]
    fn tokens_match_with_or_without_bearer() {
        assert_eq!(token(Some("Bearer abc"), "abc"), Ok(()));
        assert_eq!(token(Some("abc"), "abc"), Ok(()));
        assert_eq!(token(Some("Bearer abd"), "abc"), Err(Rejected::WrongToken));
        assert_eq!(token(Some("Bearer ab"), "abc"), Err(Rejected::WrongToken));
        assert_eq!(token(None, "abc"), Err(Rejected::MissingToken));
    }

    #[test]
    fn any_listed_token_is_accepted_and_a_verbatim_scheme_matches_too() {
        let listed = ["old", "Basic dXNlcjpwYXNz"];
        assert_eq!(tokens(Some("Bearer old"), &listed), Ok(()));
        assert_eq!(tokens(Some("Basic dXNlcjpwYXNz"), &listed), Ok(()));
        assert_eq!(
            tokens(Some("Basic dXNlcjpwYXNy"), &listed),
            Err(Rejected::WrongToken)
        );
        assert_eq!(tokens(Some("new"), &listed), Err(Rejected::WrongToken));
    }

    #[test]
    fn signatures_cover_the_exact_bytes() {
        let body = br#"{"repository":"demo/web","tag":"main"}"#;
        let sig = sign("k", body);
        assert_eq!(hmac_sha256(Some(&sig), "k", body), Ok(()));
        assert_eq!(
            hmac_sha256(
                Some(&sig),
                "k",
                b"{\"repository\":\"demo/web\",\"tag\":\"main\" }"
            ),
            Err(Rejected::WrongSignature)
        );
        assert_eq!(
            hmac_sha256(Some(&sig), "other", body),
            Err(Rejected::WrongSignature)
        );
        assert_eq!(
            hmac_sha256(Some("sha256=zz"), "k", body),
            Err(Rejected::MalformedSignature)
        );
        assert_eq!(
            hmac_sha256(None, "k", body),
            Err(Rejected::MissingSignature)
        );
    }

    #[test]
    fn a_known_vector_verifies() {
        // RFC 4231 test case 2.
        let sig = sign("Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn githubs_published_example_verifies_and_needs_its_prefix() {
        // docs.github.com, "Validating webhook deliveries", testing the implementation.
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let k = keys(&["It's a Secret to Everybody"]);
        let body = b"Hello, World!";
        assert_eq!(
            hmac_hex(Some(sig), Some("sha256="), Algorithm::Sha256, &k, body),
            Ok(())
        );
        assert_eq!(
            hmac_hex(
                Some(&sig["sha256=".len()..]),
                Some("sha256="),
                Algorithm::Sha256,
                &k,
                body
            ),
            Err(Rejected::MalformedSignature)
        );
        assert_eq!(
            hmac_hex(
                Some(sig),
                Some("sha256="),
                Algorithm::Sha256,
                &k,
                b"Hello, World?"
            ),
            Err(Rejected::WrongSignature)
        );
    }

    #[test]
    fn any_listed_key_verifies_during_a_rotation() {
        let body = b"payload";
        let new_sig = hex::encode(mac(Algorithm::Sha1, b"new", &[body]));
        let both = keys(&["old", "new"]);
        assert_eq!(
            hmac_hex(Some(&new_sig), None, Algorithm::Sha1, &both, body),
            Ok(())
        );
        assert_eq!(
            hmac_hex(Some(&new_sig), None, Algorithm::Sha1, &keys(&["old"]), body),
            Err(Rejected::WrongSignature)
        );
    }

    #[test]
    fn hmac_sha1_matches_rfc_2202() {
        // RFC 2202 test case 2.
        let k = keys(&["Jefe"]);
        assert_eq!(
            hmac_hex(
                Some("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"),
                None,
                Algorithm::Sha1,
                &k,
                b"what do ya want for nothing?"
            ),
            Ok(())
        );
    }

    // The Standard Webhooks specification's reference test vector.
    const SW_KEY: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TS: i64 = 1614265330;
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn sw_key() -> Vec<HmacKey> {
        vec![HmacKey::new(
            base64::engine::general_purpose::STANDARD
                .decode(SW_KEY)
                .unwrap(),
        )]
    }

    fn sw(sig: &str, ts: &str, now: i64) -> Result<(), Rejected> {
        standard_webhooks(
            StandardHeaders {
                id: Some(SW_ID),
                timestamp: Some(ts),
                signature: Some(sig),
            },
            &sw_key(),
            300,
            now,
            SW_BODY,
        )
    }

    #[test]
    fn the_standard_webhooks_vector_verifies() {
        let key = sw_key();
        assert_eq!(
            sign_standard_webhooks(key[0].expose(), SW_ID, SW_TS, SW_BODY),
            SW_SIG
        );
        assert_eq!(sw(SW_SIG, "1614265330", SW_TS), Ok(()));
        // One of several space-separated signatures is enough, whatever its position.
        let several = format!("v1,Zm9v v1a,ed25519sig {SW_SIG}");
        assert_eq!(sw(&several, "1614265330", SW_TS + 10), Ok(()));
    }

    #[test]
    fn standard_webhooks_refuse_stale_or_future_timestamps_and_wrong_signatures() {
        assert_eq!(
            sw(SW_SIG, "1614265330", SW_TS + 301),
            Err(Rejected::StaleTimestamp)
        );
        assert_eq!(
            sw(SW_SIG, "1614265330", SW_TS - 301),
            Err(Rejected::StaleTimestamp)
        );
        // The timestamp is signed: moving it breaks the signature.
        assert_eq!(
            sw(SW_SIG, "1614265331", SW_TS),
            Err(Rejected::WrongSignature)
        );
        assert_eq!(
            sw("v1a,abc", "1614265330", SW_TS),
            Err(Rejected::MalformedSignature)
        );
        assert_eq!(sw(SW_SIG, "soon", SW_TS), Err(Rejected::MalformedSignature));
        let missing = StandardHeaders {
            id: None,
            timestamp: Some("1614265330"),
            signature: Some(SW_SIG),
        };
        assert_eq!(
            standard_webhooks(missing, &sw_key(), 300, SW_TS, SW_BODY),
            Err(Rejected::MissingSignature)
        );
    }
}
