//! The verifier against signatures made here with the signing side of the same primitives
//! (p256's `SigningKey`, ed25519-dalek's), in exactly the bytes cosign writes: the simple
//! signing payload as cosign's Go structs marshal it, and cosign 3's bundle around a DSSE
//! envelope of its in-toto statement.

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use p256::ecdsa::signature::Signer as _;
use p256::pkcs8::{EncodePublicKey as _, LineEnding};
use sha2::{Digest as _, Sha256};

use super::bundle::{SIGN_PREDICATE, pae};
use super::opened::SIGNATURE_ANNOTATION;
use super::*;
use crate::domain::image::ImageName;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const IMAGE: &str = "127.0.0.1:5000/demo/web";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn random32() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).unwrap();
    b
}

enum Signing {
    P256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

impl Signing {
    fn p256() -> Self {
        Signing::P256(p256::ecdsa::SigningKey::from_slice(&random32()).unwrap())
    }
    fn ed25519() -> Self {
        Signing::Ed25519(ed25519_dalek::SigningKey::from_bytes(&random32()))
    }
    fn pem(&self) -> String {
        match self {
            Signing::P256(k) => k.verifying_key().to_public_key_pem(LineEnding::LF),
            Signing::Ed25519(k) => k.verifying_key().to_public_key_pem(LineEnding::LF),
        }
        .unwrap()
    }
    fn public(&self) -> PublicKey {
        PublicKey::from_pem(&self.pem()).unwrap()
    }
    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        match self {
            Signing::P256(k) => {
                let s: p256::ecdsa::Signature = k.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
            Signing::Ed25519(k) => k.sign(msg).to_bytes().to_vec(),
        }
    }
    /// cosign's hint: base64 of SHA-256 over the key's DER.
    fn hint(&self) -> String {
        let der = match self {
            Signing::P256(k) => k.verifying_key().to_public_key_der().unwrap(),
            Signing::Ed25519(k) => k.verifying_key().to_public_key_der().unwrap(),
        };
        b64(&Sha256::digest(der.as_bytes()))
    }
}

/// A `.sig` layer as cosign 2 writes it.
fn sig_tag(key: &Signing, reference: &str, digest: &str, optional: &str) -> Envelope {
    let payload = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"{reference}"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":{optional}}}"#
    );
    let sig = key.sign(payload.as_bytes());
    Envelope::SigTag {
        payload: Bytes::from(payload),
        annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), b64(&sig))]),
    }
}

/// The statement cosign 3 signs (`protojson.Marshal` of it).
fn statement(digest: &str, predicate: &str) -> String {
    let hex = digest.trim_start_matches("sha256:");
    format!(
        r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"digest":{{"sha256":"{hex}"}},"annotations":{{"env":"prod"}}}}],"predicateType":"{predicate}","predicate":{{}}}}"#
    )
}

fn bundle_of(key: &Signing, statement: &str, material: serde_json::Value) -> Envelope {
    let sig = key.sign(&pae("application/vnd.in-toto+json", statement.as_bytes()));
    let json = serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": material,
        "dsseEnvelope": {
            "payload": b64(statement.as_bytes()),
            "payloadType": "application/vnd.in-toto+json",
            "signatures": [{ "sig": b64(&sig) }],
        },
    });
    Envelope::Bundle {
        json: Bytes::from(serde_json::to_vec(&json).unwrap()),
        referrer: "sha256:r".into(),
    }
}

fn bundle(key: &Signing, digest: &str) -> Envelope {
    bundle_of(
        key,
        &statement(digest, SIGN_PREDICATE),
        serde_json::json!({ "publicKey": { "hint": key.hint() }, "tlogEntries": [] }),
    )
}

fn policy(keys: &[&Signing], annotations: &[(&str, &str)]) -> Policy {
    Policy {
        rules: vec![Rule {
            name: "ci".into(),
            keys: keys.iter().map(|k| k.public()).collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }],
        wait: std::time::Duration::ZERO,
    }
}

fn check(found: &[Envelope], policy: &Policy) -> Result<Verified, Rejected> {
    let image = ImageName::parse(IMAGE).unwrap();
    verify(
        found,
        &Subject {
            digest: DIGEST,
            image: &image,
        },
        policy,
    )
}

#[test]
fn a_legacy_signature_by_a_trusted_key_over_this_digest_passes() {
    let key = Signing::p256();
    let v = check(
        &[sig_tag(&key, IMAGE, DIGEST, "null")],
        &policy(&[&key], &[]),
    )
    .unwrap();
    assert_eq!(v.key, key.public().fingerprint().to_string());
    assert_eq!((v.format, v.trust.as_str()), (Format::SigTag, "ci"));
    assert_eq!(v.signed, DIGEST);
    assert_eq!(v.algorithm, "ECDSA P-256");
}

#[test]
fn a_cosign_3_bundle_passes_with_either_kind_of_key() {
    for key in [Signing::p256(), Signing::ed25519()] {
        let v = check(
            &[bundle(&key, DIGEST)],
            &policy(&[&key], &[("env", "prod")]),
        )
        .unwrap();
        assert_eq!(v.format, Format::Bundle);
        assert_eq!(v.key, key.public().fingerprint().to_string());
    }
    let ed = Signing::ed25519();
    let v = check(&[sig_tag(&ed, IMAGE, DIGEST, "{}")], &policy(&[&ed], &[])).unwrap();
    assert_eq!(v.algorithm, "Ed25519");
}

#[test]
fn the_fingerprint_is_the_hint_cosign_writes() {
    let key = Signing::p256();
    let fp = key.public().fingerprint().clone();
    assert_eq!(fp.to_string(), format!("SHA256:{}", key.hint()));
    assert_eq!(Fingerprint::from_hint(&key.hint()), Some(fp));
    assert_eq!(Fingerprint::from_hint("c2hvcnQ="), None, "not 32 bytes");
}

#[test]
fn a_signature_by_another_key_names_that_key() {
    let trusted = Signing::p256();
    let other = Signing::p256();
    let other_fp = other.public().fingerprint().to_string();
    // A bundle names its key by hint; a legacy ECDSA signature's key is recovered.
    for found in [
        bundle(&other, DIGEST),
        sig_tag(&other, IMAGE, DIGEST, "null"),
    ] {
        let e = check(&[found], &policy(&[&trusted], &[])).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&other_fp), "{text}");
        assert!(
            text.contains(&trusted.public().fingerprint().to_string()),
            "the keys tried are named: {text}"
        );
        assert!(!e.found_nothing());
    }
    let e = check(&[bundle(&other, DIGEST)], &policy(&[&trusted], &[])).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("signed by an untrusted key {other_fp}")),
        "{e}"
    );
    // A recovered key cannot tell another signer from a changed payload: it says both.
    let legacy = sig_tag(&other, IMAGE, DIGEST, "null");
    let e = check(&[legacy], &policy(&[&trusted], &[])).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("a signature no trusted key verifies: it was made by another key"),
        "{text}"
    );
    assert!(
        text.contains("or what it signed was changed since"),
        "{text}"
    );
}

#[test]
fn a_signature_over_another_digest_fails_and_says_which_digest_it_signed() {
    let key = Signing::p256();
    for found in [bundle(&key, OTHER), sig_tag(&key, IMAGE, OTHER, "null")] {
        let e = check(&[found], &policy(&[&key], &[])).unwrap_err();
        assert!(
            matches!(&e.found[..], [Finding::OtherDigest { signed, .. }] if signed == &[OTHER]),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("signature for another digest"),
            "{e}"
        );
    }
}

#[test]
fn a_changed_payload_fails_whatever_changed() {
    let key = Signing::p256();
    let Envelope::SigTag {
        payload,
        annotations,
    } = sig_tag(&key, IMAGE, OTHER, "null")
    else {
        unreachable!()
    };
    // The digest swapped for the one being deployed, the signature kept.
    let forged = String::from_utf8(payload.to_vec())
        .unwrap()
        .replace(OTHER, DIGEST);
    let e = check(
        &[Envelope::SigTag {
            payload: Bytes::from(forged),
            annotations,
        }],
        &policy(&[&key], &[]),
    )
    .unwrap_err();
    assert!(matches!(&e.found[..], [Finding::Untrusted { .. }]), "{e:?}");
    // A bundle whose statement was changed names the trusted key by its hint: tampered.
    let Envelope::Bundle { json, referrer } = bundle(&key, OTHER) else {
        unreachable!()
    };
    let mut b: serde_json::Value = serde_json::from_slice(&json).unwrap();
    b["dsseEnvelope"]["payload"] = b64(statement(DIGEST, SIGN_PREDICATE).as_bytes()).into();
    let e = check(
        &[Envelope::Bundle {
            json: Bytes::from(serde_json::to_vec(&b).unwrap()),
            referrer,
        }],
        &policy(&[&key], &[]),
    )
    .unwrap_err();
    assert!(matches!(&e.found[..], [Finding::Tampered { .. }]), "{e:?}");
    assert!(e.to_string().contains("was changed"), "{e}");
}

#[test]
fn a_signature_for_another_repository_fails() {
    let key = Signing::p256();
    let found = sig_tag(&key, "127.0.0.1:5000/demo/other", DIGEST, "null");
    let e = check(&[found], &policy(&[&key], &[])).unwrap_err();
    assert!(
        matches!(&e.found[..], [Finding::OtherRepository { .. }]),
        "{e:?}"
    );
    // With a tag, in its other written form: the same repository.
    let found = sig_tag(&key, &format!("{IMAGE}:main"), DIGEST, "null");
    assert!(check(&[found], &policy(&[&key], &[])).is_ok());
}

#[test]
fn required_annotations_must_be_signed_with_their_values() {
    let key = Signing::p256();
    let want = policy(&[&key], &[("env", "prod")]);
    let good = sig_tag(&key, IMAGE, DIGEST, r#"{"env":"prod","git":"abc"}"#);
    assert!(check(&[good], &want).is_ok());
    for optional in ["null", r#"{"env":"staging"}"#, r#"{"env":1}"#] {
        let e = check(&[sig_tag(&key, IMAGE, DIGEST, optional)], &want).unwrap_err();
        assert!(
            e.to_string()
                .contains("without the required annotation env=prod"),
            "{optional}: {e}"
        );
    }
}

#[test]
fn one_good_signature_among_bad_ones_is_enough() {
    let key = Signing::p256();
    let other = Signing::ed25519();
    let found = [
        sig_tag(&other, IMAGE, DIGEST, "null"),
        sig_tag(&key, IMAGE, OTHER, "null"),
        bundle(&key, DIGEST),
    ];
    let v = check(&found, &policy(&[&key], &[])).unwrap();
    assert_eq!(v.format, Format::Bundle);
}

#[test]
fn attestations_keyless_signatures_and_blobs_are_not_image_signatures() {
    let key = Signing::p256();
    let attestation = bundle_of(
        &key,
        &statement(DIGEST, "https://slsa.dev/provenance/v1"),
        serde_json::json!({}),
    );
    let keyless = bundle_of(
        &Signing::p256(),
        &statement(DIGEST, SIGN_PREDICATE),
        serde_json::json!({ "certificate": { "rawBytes": "MIIB" } }),
    );
    let blob = Envelope::Bundle {
        json: Bytes::from_static(
            br#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","messageSignature":{}}"#,
        ),
        referrer: "r".into(),
    };
    let e = check(&[attestation, keyless, blob], &policy(&[&key], &[])).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("an attestation (predicate type"), "{text}");
    assert!(text.contains("a keyless signature"), "{text}");
    assert!(text.contains("cosign sign-blob"), "{text}");
}

#[test]
fn nothing_found_says_so_and_names_the_keys_tried() {
    let key = Signing::p256();
    let e = check(&[], &policy(&[&key], &[])).unwrap_err();
    assert!(e.found_nothing());
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("no valid signature for {IMAGE}@{DIGEST}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} (trust ci)", key.public().fingerprint())),
        "{text}"
    );
    assert!(text.contains("no signature"), "{text}");
}

#[test]
fn garbage_in_the_registry_is_a_reason_not_a_panic() {
    let key = Signing::p256();
    let found = [
        Envelope::SigTag {
            payload: Bytes::from_static(b"{}"),
            annotations: BTreeMap::new(),
        },
        Envelope::SigTag {
            payload: Bytes::from_static(b"{}"),
            annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), "%%%".to_owned())]),
        },
        Envelope::SigTag {
            payload: Bytes::from_static(b"{}"),
            annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), b64(&[7; 4000]))]),
        },
        Envelope::Bundle {
            json: Bytes::from_static(b"\xff\x00"),
            referrer: "r".into(),
        },
    ];
    let e = check(&found, &policy(&[&key], &[])).unwrap_err();
    assert_eq!(e.found.len(), 4, "{e}");
}

#[test]
fn an_unopenable_signature_says_which_part_is_wrong_and_quotes_the_registry_tamely() {
    use super::error::SignatureError as E;
    let none = BTreeMap::new();
    assert!(matches!(
        super::simple::open(b"{}", &none),
        Err(E::NoSignatureAnnotation)
    ));
    let bad = BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), "%%%".to_owned())]);
    assert!(matches!(
        super::simple::open(b"{}", &bad),
        Err(E::SignatureNotBase64)
    ));
    let Err(e) = super::bundle::open(br#"{"mediaType":"text/\u0007plain"}"#) else {
        panic!("a bundle of another media type opened");
    };
    assert!(matches!(&e, E::BundleMediaType { media_type } if media_type == "text/\u{7}plain"));
    assert_eq!(
        e.to_string(),
        "not a sigstore bundle (media type `text/plain`)"
    );
}

#[test]
fn the_dsse_encoding_is_the_specs() {
    assert_eq!(
        pae("http://example.com/HelloWorld", b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    );
}

#[test]
fn only_public_p256_and_ed25519_keys_load() {
    let key = Signing::p256();
    let with_comment = format!("# the CI key\n{}", key.pem());
    assert_eq!(PublicKey::from_pem(&with_comment).unwrap(), key.public());
    assert_eq!(
        PublicKey::from_pem("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----"),
        Err(KeyError::PrivateKey)
    );
    assert_eq!(PublicKey::from_pem("hello"), Err(KeyError::NotPem));
    assert_eq!(
        PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----"),
        Err(KeyError::Base64)
    );
    let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    assert_eq!(
        PublicKey::from_pem(&p384.public_key_pem()),
        Err(KeyError::Unsupported)
    );
    assert_eq!(Signing::ed25519().public().algorithm(), "Ed25519");
}
