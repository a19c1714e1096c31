//! Cosign's two signature formats, on arbitrary bytes: a `.sig` layer's payload with its
//! annotations, and a sigstore bundle's JSON, both as the registry hands them to Pier. The
//! verifier may refuse, but must never panic, and never accept what the trusted key (the
//! containers/image fixture key, whose private half the fuzzer does not have) did not sign.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use pier::domain::image::ImageName;
use pier::signature::{Envelope, Policy, PublicKey, Rule, Subject, verify};

const KEY: &str = include_str!("../../tests/fixtures/cosign-vectors/containers-image/cosign.pub");

fuzz_target!(|data: &[u8]| {
    // The first line: `.sig` annotations as `name=value|name=value`; the rest the body.
    let (head, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    let annotations: BTreeMap<String, String> = String::from_utf8_lossy(head)
        .split('|')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let policy = Policy {
        rules: vec![Rule {
            name: "fuzz".into(),
            keys: vec![PublicKey::from_pem(KEY).expect("the fixture key")],
            annotations: BTreeMap::new(),
        }],
        wait: std::time::Duration::ZERO,
    };
    let image = ImageName::parse("registry.example/demo/app").expect("an image name");
    let subject = Subject {
        digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        image: &image,
    };
    let found = [
        Envelope::SigTag {
            payload: body.to_vec().into(),
            annotations,
        },
        Envelope::Bundle {
            json: body.to_vec().into(),
            referrer: "sha256:1".into(),
        },
    ];
    // No input the fuzzer can make is signed by the fixture key over this digest.
    assert!(verify(&found, &subject, &policy).is_err());
});
