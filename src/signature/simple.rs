//! The legacy format: a layer of the `sha256-<hex>.sig` tag is a "simple signing" payload
//! (`application/vnd.dev.cosign.simplesigning.v1+json`); the layer's annotations carry the
//! base64 signature over exactly the payload's bytes, and, when cosign logged it to Rekor,
//! a bundle whose entry holds the public key that signed it.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::error::SignatureError;
use super::opened::{Opened, SIGNATURE_ANNOTATION, Signer};
use super::{Claim, PublicKey, Signed};

const REKOR_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// `critical.type` of an image signature: cosign 1 and 2 write the first; tools that show
/// cosign 3's bundles in this shape write the second.
const TYPES: [&str; 2] = [
    "cosign container image signature",
    "https://sigstore.dev/cosign/sign/v1",
];

/// The signature, the signed bytes and who the layer says signed them.
pub(super) fn open(
    payload: &[u8],
    annotations: &BTreeMap<String, String>,
) -> Result<Opened, SignatureError> {
    let b64 = annotations
        .get(SIGNATURE_ANNOTATION)
        .ok_or(SignatureError::NoSignatureAnnotation)?;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| SignatureError::SignatureNotBase64)?;
    let signer = if annotations.contains_key(CERTIFICATE_ANNOTATION) {
        Signer::Certificate
    } else {
        match annotations
            .get(REKOR_BUNDLE_ANNOTATION)
            .and_then(|b| logged_key(b))
        {
            Some(k) => Signer::Key(k),
            None => Signer::Unnamed,
        }
    };
    Ok(Opened {
        message: payload.to_vec(),
        signatures: vec![signature],
        signer,
        payload: payload.to_vec(),
    })
}

/// The public key in a Rekor bundle's entry (`hashedrekord` or `rekord`): only a name for
/// the signer, believed only if it verifies the signature, and then never as trusted.
fn logged_key(bundle: &str) -> Option<PublicKey> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Bundle {
        payload: BundlePayload,
    }
    #[derive(Deserialize)]
    struct BundlePayload {
        body: String,
    }
    let b: Bundle = serde_json::from_str(bundle).ok()?;
    let body = base64::engine::general_purpose::STANDARD
        .decode(b.payload.body)
        .ok()?;
    let entry: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let pem_b64 = entry
        .pointer("/spec/signature/publicKey/content")?
        .as_str()?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(pem_b64)
        .ok()?;
    PublicKey::from_pem(std::str::from_utf8(&pem).ok()?).ok()
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
    #[serde(default)]
    optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// What a verified payload says: its digest, its repository, its string annotations.
pub(super) fn claim(payload: &[u8]) -> Result<Claim, SignatureError> {
    let p: Payload = serde_json::from_slice(payload).map_err(SignatureError::NotCosignPayload)?;
    if !TYPES.contains(&p.critical.kind.as_str()) {
        return Err(SignatureError::CosignType {
            kind: p.critical.kind,
        });
    }
    let annotations = p
        .optional
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_owned())))
        .collect();
    Ok(Claim {
        subjects: vec![Signed {
            digest: p.critical.image.docker_manifest_digest,
            annotations,
        }],
        reference: Some(p.critical.identity.docker_reference),
    })
}
