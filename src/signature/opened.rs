//! A signature as its envelope was opened, before anything about it is believed: the
//! shape both formats (the `.sig` tag's simple signing, a sigstore bundle) open into, so
//! that the decision (`verify.rs`) reads one shape and each format only opens its own.

use super::key::{Fingerprint, PublicKey};

/// The `.sig` layer's annotation that holds the base64 signature (cosign's name).
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// A signature opened but not believed yet: the bytes its signatures are over, and who it
/// says signed it.
pub(super) struct Opened {
    pub message: Vec<u8>,
    pub signatures: Vec<Vec<u8>>,
    pub signer: Signer,
    /// The signed payload (the simple-signing JSON, or the in-toto statement).
    pub payload: Vec<u8>,
}

/// Who a signature says made it: never believed, only used to name an untrusted signer.
pub(super) enum Signer {
    /// A key the signature carries (in its Rekor entry).
    Key(PublicKey),
    /// A bundle's key hint.
    Hint(Fingerprint),
    /// A Fulcio certificate: a keyless signature.
    Certificate,
    Unnamed,
}
