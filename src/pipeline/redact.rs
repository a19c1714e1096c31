//! What of a secret may reach the journal and the page: a candidate's logs with every
//! secret masked, also when the app printed it base64-encoded, as text Postgres can store;
//! and a keyed hash (HMAC-SHA256 with the installation's key) where a step's intent must
//! show that a secret or a host path changed without showing it.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::Run;
use super::plan::Placed;

/// The shortest secret masked: anything shorter would mask ordinary words.
const MIN_SECRET: usize = 4;
/// The shortest base64 run masked: shorter runs match too much unrelated text.
const MIN_ENCODED: usize = 8;

/// Masks every secret in `text`, as written and as base64 (standard or URL-safe alphabet,
/// at any of the three byte alignments it can have inside a longer encoded blob).
pub(crate) fn redact<'a>(text: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    Mask::new(secrets).apply(text)
}

/// What [`redact`] looks for, worked out once: a log read line by line masks every line
/// with the same needles instead of encoding each secret again per line.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mask {
    needles: Vec<String>,
}

impl Mask {
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut needles = Vec::new();
        for secret in secrets {
            if secret.len() < MIN_SECRET {
                continue;
            }
            needles.push(secret.to_owned());
            needles.extend(encodings(secret.as_bytes()));
        }
        needles.retain(|n| n.len() >= MIN_SECRET);
        Self { needles }
    }

    /// `text` with every needle replaced by `***`.
    pub(crate) fn apply(&self, text: &str) -> String {
        let mut out = text.to_owned();
        self.apply_to(&mut out);
        out
    }

    /// Replaces every needle in `text` by `***`, copying it only when one is there (a log
    /// line with no secret in it is left as it is).
    pub(crate) fn apply_to(&self, text: &mut String) {
        for needle in &self.needles {
            if text.contains(needle.as_str()) {
                *text = text.replace(needle.as_str(), "***");
            }
        }
    }
}

/// The parts of `secret`'s base64 that do not depend on the bytes around it: for each
/// alignment, the encoding with the partial groups at either end cut off.
fn encodings(secret: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for lead in 0..3usize {
            let mut buf = vec![0u8; lead];
            buf.extend_from_slice(secret);
            let encoded = engine.encode(&buf);
            // Characters touched by the `lead` filler bytes, and by the unknown bytes that
            // may follow the secret in a longer blob.
            let skip = (lead * 4).div_ceil(3);
            let full_groups = (lead + secret.len()) / 3 * 4;
            if full_groups > skip {
                let stable = &encoded[skip..full_groups];
                if stable.len() >= MIN_ENCODED {
                    found.push(stable.to_owned());
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Postgres `text` cannot hold NUL: a log line with one would fail the write that records
/// the deployment's end. NUL becomes U+FFFD; nothing else changes.
pub(crate) fn storable(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

impl<P: Placed> Run<'_, P> {
    /// The candidate's logs are shown on the status page: env values that came from a
    /// secret reference are masked, in case the app printed them, and so are `age:`
    /// secrets, read again now (the run does not keep them).
    pub(super) fn redact(&self, text: &str) -> String {
        let age = self.app.age_values(self.ctx.age_identity.as_ref());
        let all = self.app.secret_values().into_iter();
        storable(&redact(text, all.chain(age.iter().map(|s| s.expose()))))
    }

    pub(super) fn keyed_hash(&self, text: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.ctx.env_key)
            .expect("HMAC takes a key of any length");
        mac.update(text.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_masked_as_written() {
        let out = redact("token=s3cret-app-token ok", ["s3cret-app-token"]);
        assert_eq!(out, "token=*** ok");
    }

    #[test]
    fn a_secret_is_masked_when_printed_base64_encoded_at_any_alignment() {
        let secret = "s3cret-app-token";
        for prefix in ["", "a", "ab", "abc:"] {
            for engine in [&base64::engine::general_purpose::STANDARD, &URL_SAFE_NO_PAD] {
                let blob = engine.encode(format!("{prefix}{secret}|user=x"));
                let out = redact(&format!("auth: {blob}"), [secret]);
                assert!(out.contains("***"), "{prefix:?} {blob} -> {out}");
                // What is left of the blob no longer decodes to anything with the secret.
                for part in out.split("***") {
                    let decoded = engine
                        .decode(part.trim_start_matches("auth: "))
                        .unwrap_or_default();
                    assert!(!String::from_utf8_lossy(&decoded).contains(secret));
                }
            }
        }
    }

    #[test]
    fn short_secrets_and_ordinary_text_are_left_alone() {
        assert_eq!(redact("a b c", ["ab"]), "a b c");
        assert_eq!(redact("nothing here", ["s3cret-app-token"]), "nothing here");
    }

    #[test]
    fn nul_bytes_become_storable() {
        assert_eq!(storable("nul:\0:end"), "nul:\u{fffd}:end");
    }
}
