//! Every signature and token header check, on arbitrary header values: never a panic, and
//! never a success for a value that was not made with the key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pier::config::{HmacKey, Secret};
use pier::intake::verify::{self, Algorithm, StandardHeaders};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(4, '\n');
    let (a, b, c, body) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("").as_bytes(),
    );
    let keys = [HmacKey::new(b"fuzz-key".to_vec())];
    for (prefix, algorithm) in [
        (Some("sha256="), Algorithm::Sha256),
        (None, Algorithm::Sha256),
        (None, Algorithm::Sha1),
    ] {
        assert!(verify::hmac_hex(Some(a), prefix, algorithm, &keys, body).is_err());
    }
    if verify::tokens(Some(a), &[Secret::new("fuzz-token-that-is-long")]).is_ok() {
        assert!(a.contains("fuzz-token-that-is-long"));
    }
    let headers = StandardHeaders {
        id: Some(a),
        timestamp: Some(b),
        signature: Some(c),
    };
    assert!(verify::standard_webhooks(headers, &keys, 300, 1_700_000_000, body).is_err());
});
