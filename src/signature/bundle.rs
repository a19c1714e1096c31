//! Cosign 3's format: a sigstore bundle (v0.3) holding a DSSE envelope. Its signature is
//! over the envelope's pre-authentication encoding (PAE) of the payload type and payload,
//! so neither can be swapped; the payload is an in-toto statement whose subject is the
//! signed digest and whose predicate type says it is an image signature.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::error::SignatureError;
use super::key::Fingerprint;
use super::opened::{Opened, Signer};
use super::{Claim, Signed};

const IN_TOTO: &str = "application/vnd.in-toto+json";
/// What `cosign sign` (3) states; an attestation (`cosign attest`) states something else.
pub const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
const STATEMENT_TYPES: [&str; 2] = [
    "https://in-toto.io/Statement/v1",
    "https://in-toto.io/Statement/v0.1",
];
/// Signatures of one envelope looked at: cosign writes one.
const MAX_SIGNATURES: usize = 8;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    media_type: String,
    #[serde(default)]
    verification_material: Material,
    dsse_envelope: Option<Dsse>,
    message_signature: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Material {
    public_key: Option<KeyHint>,
    certificate: Option<serde_json::Value>,
    x509_certificate_chain: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct KeyHint {
    #[serde(default)]
    hint: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dsse {
    payload: String,
    payload_type: String,
    #[serde(default)]
    signatures: Vec<DsseSignature>,
}

#[derive(Deserialize)]
struct DsseSignature {
    sig: String,
}

/// DSSE's pre-authentication encoding: `DSSEv1 <len> <type> <len> <body>`.
pub(crate) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

pub(super) fn open(json: &[u8]) -> Result<Opened, SignatureError> {
    let b: Bundle = serde_json::from_slice(json).map_err(SignatureError::NotBundle)?;
    if !b
        .media_type
        .starts_with("application/vnd.dev.sigstore.bundle")
    {
        return Err(SignatureError::BundleMediaType {
            media_type: b.media_type,
        });
    }
    let Some(dsse) = b.dsse_envelope else {
        return Err(if b.message_signature.is_some() {
            SignatureError::MessageSignature
        } else {
            SignatureError::NoEnvelope
        });
    };
    if dsse.payload_type != IN_TOTO {
        return Err(SignatureError::EnvelopeType {
            payload_type: dsse.payload_type,
        });
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64
        .decode(&dsse.payload)
        .map_err(|_| SignatureError::PayloadNotBase64)?;
    let signatures = dsse
        .signatures
        .iter()
        .take(MAX_SIGNATURES)
        .filter_map(|s| b64.decode(&s.sig).ok())
        .collect();
    let m = b.verification_material;
    let signer = if m.certificate.is_some() || m.x509_certificate_chain.is_some() {
        Signer::Certificate
    } else {
        match m
            .public_key
            .as_ref()
            .and_then(|k| Fingerprint::from_hint(&k.hint))
        {
            Some(fp) => Signer::Hint(fp),
            None => Signer::Unnamed,
        }
    };
    Ok(Opened {
        message: pae(&dsse.payload_type, &payload),
        signatures,
        signer,
        payload,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Statement {
    #[serde(rename = "_type")]
    kind: String,
    #[serde(default)]
    subject: Vec<Subject>,
    #[serde(default)]
    predicate_type: String,
}

#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    digest: BTreeMap<String, String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, serde_json::Value>>,
}

/// What a verified statement says. Cosign 3 names no repository in it (the subject has only
/// a digest), so only a `name`, when one is given, is checked as the repository.
pub(super) fn claim(payload: &[u8]) -> Result<Claim, SignatureError> {
    let s: Statement = serde_json::from_slice(payload).map_err(SignatureError::NotStatement)?;
    if !STATEMENT_TYPES.contains(&s.kind.as_str()) {
        return Err(SignatureError::StatementType { kind: s.kind });
    }
    if s.predicate_type != SIGN_PREDICATE {
        return Err(SignatureError::Attestation {
            predicate_type: s.predicate_type,
        });
    }
    let mut claim = Claim::default();
    for sub in s.subject.iter().take(MAX_SIGNATURES) {
        let Some(hex) = sub.digest.get("sha256") else {
            continue;
        };
        if claim.reference.is_none() {
            claim.reference = sub.name.clone().filter(|n| !n.is_empty());
        }
        let annotations = sub
            .annotations
            .iter()
            .flatten()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect();
        claim.subjects.push(Signed {
            digest: format!("sha256:{hex}"),
            annotations,
        });
    }
    Ok(claim)
}
