//! Authenticity checks over the raw body bytes, before anything is parsed.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Why a delivery was not accepted as authentic. Said to the sender only as "401".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    MissingToken,
    WrongToken,
    MissingSignature,
    MalformedSignature,
    WrongSignature,
}

impl Rejected {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::MissingToken => "missing_token",
            Rejected::WrongToken => "wrong_token",
            Rejected::MissingSignature => "missing_signature",
            Rejected::MalformedSignature => "malformed_signature",
            Rejected::WrongSignature => "wrong_signature",
        }
    }
}

/// A static token, as `Authorization: Bearer <token>` or the bare token. Compared in
/// constant time so that response timing reveals nothing of the secret.
pub fn token(header: Option<&str>, expected: &str) -> Result<(), Rejected> {
    let given = header.ok_or(Rejected::MissingToken)?.trim();
    let given = given
        .strip_prefix("Bearer ")
        .or_else(|| given.strip_prefix("bearer "))
        .unwrap_or(given)
        .trim();
    if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(Rejected::WrongToken)
    }
}

/// HMAC-SHA256 of the raw body, given as `sha256=<hex>` (or bare hex).
pub fn hmac_sha256(header: Option<&str>, secret: &str, body: &[u8]) -> Result<(), Rejected> {
    let given = header.ok_or(Rejected::MissingSignature)?.trim();
    let hex_part = given.strip_prefix("sha256=").unwrap_or(given);
    let signature = hex::decode(hex_part).map_err(|_| Rejected::MalformedSignature)?;
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| Rejected::WrongSignature)?;
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&signature)
        .map_err(|_| Rejected::WrongSignature)
}

/// `sha256=<hex>` for `body`: what a sender puts in its signature header.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_with_or_without_bearer() {
        assert_eq!(token(Some("Bearer abc"), "abc"), Ok(()));
        assert_eq!(token(Some("abc"), "abc"), Ok(()));
        assert_eq!(token(Some("Bearer abd"), "abc"), Err(Rejected::WrongToken));
        assert_eq!(token(Some("Bearer ab"), "abc"), Err(Rejected::WrongToken));
        assert_eq!(token(None, "abc"), Err(Rejected::MissingToken));
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
}
