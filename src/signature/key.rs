//! Public keys an operator trusts: ECDSA P-256 (what `cosign generate-key-pair` makes) and
//! Ed25519, read from PEM (`-----BEGIN PUBLIC KEY-----`, SubjectPublicKeyInfo), each named
//! by its fingerprint: `SHA256:` and the base64 of SHA-256 over the key's DER, the value
//! cosign writes as a bundle's key hint, so the name on Pier's page is the name cosign uses.

use std::fmt;

use base64::Engine as _;
use ed25519_dalek::pkcs8::DecodePublicKey as _;
use p256::ecdsa::signature::Verifier as _;
use p256::pkcs8::EncodePublicKey as _;
use sha2::{Digest as _, Sha256};

/// Largest signature accepted for decoding: a DER ECDSA P-256 signature is at most 72 bytes,
/// an Ed25519 one 64; anything far larger is not a signature of these keys.
const MAX_SIGNATURE_BYTES: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("not a PEM public key (expected -----BEGIN PUBLIC KEY-----)")]
    NotPem,
    #[error(
        "a private key: give Pier the public key (cosign writes it as cosign.pub), never the \
         private one"
    )]
    PrivateKey,
    #[error("the PEM body is not base64")]
    Base64,
    #[error(
        "a public key Pier does not verify with (only ECDSA P-256, as cosign makes them, and \
         Ed25519)"
    )]
    Unsupported,
}

/// `SHA256:<base64>` of a key's SubjectPublicKeyInfo DER.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    fn of_der(der: &[u8]) -> Self {
        let hash = Sha256::digest(der);
        Self(format!(
            "SHA256:{}",
            base64::engine::general_purpose::STANDARD.encode(hash)
        ))
    }

    /// A bundle's key hint (base64 of the same hash), as a fingerprint.
    pub(crate) fn from_hint(hint: &str) -> Option<Self> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(hint.trim())
            .ok()?;
        (raw.len() == 32).then(|| {
            Self(format!(
                "SHA256:{}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            ))
        })
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone)]
enum Verifying {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// A public key, ready to verify, with its fingerprint.
#[derive(Clone)]
pub struct PublicKey {
    key: Verifying,
    fingerprint: Fingerprint,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({} {})", self.algorithm(), self.fingerprint)
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

impl PublicKey {
    /// Reads one `PUBLIC KEY` PEM block (text around it, such as a comment line, is
    /// ignored).
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let der = pem_body(text)?;
        Self::from_der(&der)
    }

    pub(crate) fn from_der(der: &[u8]) -> Result<Self, KeyError> {
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_der(der) {
            // Named by the canonical (uncompressed) encoding, as Go's MarshalPKIXPublicKey
            // writes it for cosign's hint, whatever encoding the file used.
            let canonical = k.to_public_key_der().map_err(|_| KeyError::Unsupported)?;
            return Ok(Self {
                fingerprint: Fingerprint::of_der(canonical.as_bytes()),
                key: Verifying::P256(k),
            });
        }
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            return Ok(Self {
                fingerprint: Fingerprint::of_der(der),
                key: Verifying::Ed25519(k),
            });
        }
        Err(KeyError::Unsupported)
    }

    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    pub(crate) fn algorithm(&self) -> &'static str {
        match self.key {
            Verifying::P256(_) => "ECDSA P-256",
            Verifying::Ed25519(_) => "Ed25519",
        }
    }

    /// Whether `signature` is this key's over `message`: ECDSA P-256 with SHA-256 and an
    /// ASN.1 DER signature (what cosign writes), or Ed25519 over the message itself, checked
    /// strictly (no malleable encodings).
    pub(crate) fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        if signature.len() > MAX_SIGNATURE_BYTES {
            return false;
        }
        match &self.key {
            Verifying::P256(k) => p256::ecdsa::DerSignature::from_bytes(signature)
                .is_ok_and(|s| k.verify(message, &s).is_ok()),
            Verifying::Ed25519(k) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|s| k.verify_strict(message, &s).is_ok()),
        }
    }
}

/// The keys an ECDSA P-256 signature over `message` could have been made with: a legacy
/// cosign signature does not name its key, but ECDSA lets it be recovered up to a choice of
/// two (four in theory). Only for saying who signed; never for trusting anyone.
pub(crate) fn recover_p256(message: &[u8], signature: &[u8]) -> Vec<Fingerprint> {
    if signature.len() > MAX_SIGNATURE_BYTES {
        return vec![];
    }
    let Ok(sig) = p256::ecdsa::DerSignature::from_bytes(signature) else {
        return vec![];
    };
    let Ok(sig) = p256::ecdsa::Signature::try_from(sig) else {
        return vec![];
    };
    let mut out: Vec<Fingerprint> = Vec::new();
    for id in 0..=1u8 {
        let Some(id) = p256::ecdsa::RecoveryId::from_byte(id) else {
            continue;
        };
        let Ok(k) = p256::ecdsa::VerifyingKey::recover_from_msg(message, &sig, id) else {
            continue;
        };
        if k.verify(message, &sig).is_err() {
            continue;
        }
        if let Ok(der) = k.to_public_key_der() {
            let fp = Fingerprint::of_der(der.as_bytes());
            if !out.contains(&fp) {
                out.push(fp);
            }
        }
    }
    out
}

/// The DER inside the first `PUBLIC KEY` PEM block of `text`.
fn pem_body(text: &str) -> Result<Vec<u8>, KeyError> {
    const BEGIN: &str = "-----BEGIN PUBLIC KEY-----";
    const END: &str = "-----END PUBLIC KEY-----";
    let Some(start) = text.find(BEGIN) else {
        if text.contains("PRIVATE KEY-----") {
            return Err(KeyError::PrivateKey);
        }
        return Err(KeyError::NotPem);
    };
    let rest = &text[start + BEGIN.len()..];
    let end = rest.find(END).ok_or(KeyError::NotPem)?;
    let body: String = rest[..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| KeyError::Base64)
}
