//! Cosign's two storage formats, written by the test with a signing library (p256's and
//! ed25519-dalek's signing keys, not Pier's code), byte for byte as cosign writes them:
//! - legacy (cosign 1 and 2): the simple-signing payload as a blob, a manifest under the tag
//!   `sha256-<hex>.sig` whose layer names it, the base64 signature in the layer's
//!   `dev.cosignproject.cosign/signature` annotation;
//! - cosign 3: a sigstore bundle v0.3 (a DSSE envelope of an in-toto statement) as the one
//!   layer of a referrer manifest whose `subject` is the signed digest, listed in the OCI
//!   referrers fallback tag `sha256-<hex>` (Distribution 2.8 has no referrers API).
//!
//! Also real cosign output, its published test vectors kept as fixtures (see
//! [`cosign_vectors`]).

use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use p256::pkcs8::{EncodePublicKey as _, LineEnding};

use super::*;

const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const EMPTY: &str = "application/vnd.oci.empty.v1+json";
pub const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A signing key made for one test.
pub enum Signer {
    P256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

impl Signer {
    fn random32() -> [u8; 32] {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).expect("random bytes");
        b
    }

    /// What `cosign generate-key-pair` makes.
    pub fn p256() -> Self {
        Signer::P256(p256::ecdsa::SigningKey::from_slice(&Self::random32()).expect("a key"))
    }

    pub fn ed25519() -> Self {
        Signer::Ed25519(ed25519_dalek::SigningKey::from_bytes(&Self::random32()))
    }

    /// The public key as `cosign.pub` holds it.
    pub fn pem(&self) -> String {
        match self {
            Signer::P256(k) => k.verifying_key().to_public_key_pem(LineEnding::LF),
            Signer::Ed25519(k) => k.verifying_key().to_public_key_pem(LineEnding::LF),
        }
        .expect("PEM")
    }

    /// `SHA256:<base64 of SHA-256 over the key's DER>`: cosign's bundle hint, as a name.
    pub fn fingerprint(&self) -> String {
        format!("SHA256:{}", self.hint())
    }

    pub fn hint(&self) -> String {
        let der = match self {
            Signer::P256(k) => k.verifying_key().to_public_key_der(),
            Signer::Ed25519(k) => k.verifying_key().to_public_key_der(),
        }
        .expect("DER");
        b64(&Sha256::digest(der.as_bytes()))
    }

    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        match self {
            Signer::P256(k) => {
                let s: p256::ecdsa::Signature = k.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
            Signer::Ed25519(k) => k.sign(msg).to_bytes().to_vec(),
        }
    }
}

/// The simple-signing payload cosign 2 signs, as its Go structs marshal it.
pub fn simple_payload(reference: &str, digest: &str, optional: &str) -> Vec<u8> {
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"{reference}"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":{optional}}}"#
    )
    .into_bytes()
}

/// The in-toto statement cosign 3 signs for `digest`.
pub fn statement(digest: &str) -> Vec<u8> {
    let hex = digest.trim_start_matches("sha256:");
    format!(
        r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"digest":{{"sha256":"{hex}"}}}}],"predicateType":"{SIGN_PREDICATE}","predicate":{{}}}}"#
    )
    .into_bytes()
}

/// DSSE's pre-authentication encoding, which a bundle's signature is over.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// A cosign 3 bundle of `statement`, signed by `key`.
pub fn bundle(key: &Signer, statement: &[u8]) -> Vec<u8> {
    let sig = key.sign(&pae("application/vnd.in-toto+json", statement));
    serde_json::to_vec(&serde_json::json!({
        "mediaType": BUNDLE,
        "verificationMaterial": { "publicKey": { "hint": key.hint() }, "tlogEntries": [] },
        "dsseEnvelope": {
            "payload": b64(statement),
            "payloadType": "application/vnd.in-toto+json",
            "signatures": [{ "sig": b64(&sig), "keyid": "" }],
        },
    }))
    .expect("bundle JSON")
}

async fn push_blob(client: &OciClient, r: &Reference, data: &[u8]) -> String {
    let digest = sha256_digest(data);
    if !client.blob_exists(r, &digest).await.unwrap_or(false) {
        client
            .push_blob(r, data.to_vec(), &digest)
            .await
            .unwrap_or_else(|e| panic!("push blob {digest}: {e}"));
    }
    digest
}

async fn push_manifest(
    client: &OciClient,
    r: &Reference,
    manifest: &[u8],
    media_type: &'static str,
) {
    client
        .push_manifest_raw(
            r,
            manifest.to_vec(),
            reqwest::header::HeaderValue::from_static(media_type),
        )
        .await
        .unwrap_or_else(|e| panic!("push manifest {r}: {e}"));
}

/// Pushes legacy signatures of `digest` (each a payload and its base64 signature, with
/// extra layer annotations) as `<repo>:sha256-<hex>.sig`, as cosign does. Returns the
/// manifest's digest.
pub async fn push_sig_tag(
    host: &str,
    repo: &str,
    digest: &str,
    layers: &[(Vec<u8>, BTreeMap<String, String>)],
) -> String {
    let client = oci_client(host);
    let tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let r = oci_ref(host, repo, &tag);
    client
        .store_auth_if_needed(host, &registry_auth(host))
        .await;
    let mut descriptors = Vec::new();
    let mut diff_ids = Vec::new();
    for (payload, annotations) in layers {
        let d = push_blob(&client, &r, payload).await;
        diff_ids.push(d.clone());
        descriptors.push(serde_json::json!({
            "mediaType": SIMPLE_SIGNING, "size": payload.len(), "digest": d,
            "annotations": annotations,
        }));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "", "created": "0001-01-01T00:00:00Z", "os": "", "config": {},
        "history": [{ "created": "0001-01-01T00:00:00Z" }],
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    }))
    .unwrap();
    let config_digest = push_blob(&client, &r, &config).await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_OCI_MANIFEST,
        "config": { "mediaType": MT_OCI_CONFIG, "size": config.len(), "digest": config_digest },
        "layers": descriptors,
    }))
    .unwrap();
    push_manifest(&client, &r, &manifest, MT_OCI_MANIFEST).await;
    sha256_digest(&manifest)
}

/// One legacy signature layer: `payload` signed by `key`.
pub fn signed_layer(key: &Signer, payload: Vec<u8>) -> (Vec<u8>, BTreeMap<String, String>) {
    let sig = b64(&key.sign(&payload));
    (
        payload,
        BTreeMap::from([("dev.cosignproject.cosign/signature".to_owned(), sig)]),
    )
}

/// Pushes `bundle_json` as a cosign 3 referrer of `subject` (an image manifest or index of
/// `subject_media_type`, `subject_size` bytes), and lists it in the referrers fallback tag.
pub async fn push_bundle(
    host: &str,
    repo: &str,
    subject: &str,
    subject_media_type: &str,
    subject_size: usize,
    bundle_json: &[u8],
) -> String {
    let client = oci_client(host);
    let fallback = format!("sha256-{}", subject.trim_start_matches("sha256:"));
    let r = oci_ref(host, repo, &fallback);
    client
        .store_auth_if_needed(host, &registry_auth(host))
        .await;
    let layer = push_blob(&client, &r, bundle_json).await;
    let config_digest = push_blob(&client, &r, b"{}").await;
    let annotations = serde_json::json!({
        "dev.sigstore.bundle.content": "dsse-envelope",
        "dev.sigstore.bundle.predicateType": SIGN_PREDICATE,
        "org.opencontainers.image.created": "2026-01-01T00:00:00Z",
    });
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_OCI_MANIFEST,
        "artifactType": BUNDLE,
        "config": { "mediaType": EMPTY, "size": 2, "digest": config_digest },
        "layers": [{ "mediaType": BUNDLE, "size": bundle_json.len(), "digest": layer }],
        "subject": { "mediaType": subject_media_type, "size": subject_size, "digest": subject },
        "annotations": annotations,
    }))
    .unwrap();
    let manifest_digest = sha256_digest(&manifest);
    push_manifest(
        &client,
        &oci_ref(host, repo, &manifest_digest),
        &manifest,
        MT_OCI_MANIFEST,
    )
    .await;
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_OCI_INDEX,
        "manifests": [{
            "mediaType": MT_OCI_MANIFEST, "size": manifest.len(), "digest": manifest_digest,
            "artifactType": BUNDLE, "annotations": annotations,
        }],
    }))
    .unwrap();
    push_manifest(&client, &r, &index, MT_OCI_INDEX).await;
    manifest_digest
}

/// Real cosign's published test vectors, kept in `tests/fixtures/cosign-vectors/` (their
/// origin, commits and license are in its README). Layout: `containers-image/`
/// (containers/image `signature/fixtures`: `cosign.pub`, `cosign2.pub`,
/// `dir-img-cosign-valid/`, `dir-img-cosign-key-rekor-valid/`) and `cosign/` (sigstore/cosign
/// `pkg/cosign/testdata/oci-attestation.sigstore.json`, and `leaf.pub`, the public key of its
/// leaf certificate).
pub fn cosign_vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cosign-vectors")
}

/// A containers/image `signature-N` file: cosign's payload and annotations, as cosign wrote
/// them to the registry (`sigstore-json` header, then JSON with a base64 payload).
pub fn vector_layer(path: &Path) -> (Vec<u8>, BTreeMap<String, String>) {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let start = raw.iter().position(|b| *b == b'{').expect("a JSON object");
    let v: serde_json::Value = serde_json::from_slice(&raw[start..]).expect("JSON");
    let payload = base64::engine::general_purpose::STANDARD
        .decode(v["payload"].as_str().expect("payload"))
        .expect("base64 payload");
    let annotations = v["annotations"]
        .as_object()
        .expect("annotations")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    (payload, annotations)
}
