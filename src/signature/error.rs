//! Why a signature the registry holds counts for nothing before any key is tried (it cannot
//! be opened), or after one verified it (what it signed is not an image signature). Every
//! registry-supplied word is shown through [`quote`]: printable and short.

use super::opened::SIGNATURE_ANNOTATION;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SignatureError {
    // Opening a `.sig` layer.
    #[error("a .sig layer without the {} annotation", SIGNATURE_ANNOTATION)]
    NoSignatureAnnotation,
    #[error("the {} annotation is not base64", SIGNATURE_ANNOTATION)]
    SignatureNotBase64,

    // Opening a sigstore bundle.
    #[error("not a sigstore bundle: {0}")]
    NotBundle(#[source] serde_json::Error),
    #[error("not a sigstore bundle (media type `{}`)", quote(media_type))]
    BundleMediaType { media_type: String },
    /// `cosign sign-blob` signs bytes, not an image.
    #[error("a bundle of a message signature (cosign sign-blob), not of an image")]
    MessageSignature,
    #[error("a bundle without a DSSE envelope")]
    NoEnvelope,
    #[error(
        "a DSSE envelope of `{}`, not an in-toto statement",
        quote(payload_type)
    )]
    EnvelopeType { payload_type: String },
    #[error("the DSSE payload is not base64")]
    PayloadNotBase64,

    // What a verified `.sig` payload says.
    #[error("the signed payload is not a cosign image signature: {0}")]
    NotCosignPayload(#[source] serde_json::Error),
    #[error(
        "the signed payload is of type `{}`, not a cosign image signature",
        quote(kind)
    )]
    CosignType { kind: String },

    // What a verified bundle's statement says.
    #[error("the signed payload is not an in-toto statement: {0}")]
    NotStatement(#[source] serde_json::Error),
    #[error("the signed payload is a `{}`, not an in-toto statement", quote(kind))]
    StatementType { kind: String },
    /// `cosign attest` signs a statement about the image, not the image itself.
    #[error(
        "an attestation (predicate type `{}`), not an image signature",
        quote(predicate_type)
    )]
    Attestation { predicate_type: String },
}

/// Registry-supplied text in a message: printable, short.
pub(super) fn quote(text: &str) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).take(120).collect();
    if text.chars().count() > 120 {
        out.push('…');
    }
    out
}
