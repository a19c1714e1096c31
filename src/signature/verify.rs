//! The decision: does any signature found pass one trust rule fully? If not, why not, for
//! each signature, in words an operator can act on (which keys were tried, which key
//! signed instead, which digest was signed).

use std::fmt;

use super::error::quote;
use super::key::{Fingerprint, PublicKey, recover_p256};
use super::opened::{Opened, Signer};
use super::{Envelope, Format, Policy, Rule, Subject, Verified, bundle, simple};

/// Who signed a signature that no trusted key verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// The key it names (and that verifies it, where the key itself is at hand).
    Key(Fingerprint),
    /// Recovered from an ECDSA signature: one of these.
    OneOf(Vec<Fingerprint>),
    Unknown,
}

/// Why one signature does not count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Unreadable {
        format: Format,
        reason: String,
    },
    Untrusted {
        format: Format,
        signer: Untrusted,
    },
    /// It names a trusted key that does not verify it: what it signed was changed.
    Tampered {
        format: Format,
        key: Fingerprint,
    },
    Keyless {
        format: Format,
    },
    OtherDigest {
        format: Format,
        key: Fingerprint,
        signed: Vec<String>,
    },
    OtherRepository {
        format: Format,
        key: Fingerprint,
        signed: String,
    },
    MissingAnnotation {
        format: Format,
        key: Fingerprint,
        name: String,
        want: String,
    },
    NotImageSignature {
        format: Format,
        key: Fingerprint,
        reason: String,
    },
}

/// No signature passed: the subject, the keys tried, and what was found instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub subject: String,
    pub keys: Vec<String>,
    pub found: Vec<Finding>,
}

impl Finding {
    /// The first finding (and how many more), for a quarantine's reason.
    pub(crate) fn summary(found: &[Finding]) -> String {
        match found {
            [] => "no signature".into(),
            [one] => one.to_string(),
            [first, rest @ ..] => format!("{first}; and {} more", rest.len()),
        }
    }
}

impl Rejected {
    /// Nothing at all was found: worth waiting a moment for (the signer may still be at
    /// work), unlike a wrong signature.
    pub(crate) fn found_nothing(&self) -> bool {
        self.found.is_empty()
    }
}

/// Findings spelled out in one message; the rest are counted.
const MAX_SHOWN: usize = 6;

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no valid signature for {}; keys tried: {}; found: ",
            self.subject,
            self.keys.join(", ")
        )?;
        if self.found.is_empty() {
            return f.write_str(
                "no signature (neither a sha256-<hex>.sig tag nor a signature referrer)",
            );
        }
        let shown: Vec<String> = self
            .found
            .iter()
            .take(MAX_SHOWN)
            .map(|x| x.to_string())
            .collect();
        f.write_str(&shown.join("; "))?;
        if self.found.len() > MAX_SHOWN {
            write!(f, "; and {} more", self.found.len() - MAX_SHOWN)?;
        }
        Ok(())
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |format: &Format| format.describe();
        match self {
            Finding::Unreadable { format, reason } => write!(f, "{reason} ({})", at(format)),
            Finding::Untrusted { format, signer } => match signer {
                Untrusted::Key(k) => write!(f, "signed by an untrusted key {k} ({})", at(format)),
                Untrusted::OneOf(ks) => write!(
                    f,
                    "a signature no trusted key verifies: it was made by another key (recovered \
                     from the ECDSA signature, {}), or what it signed was changed since ({})",
                    ks.iter()
                        .map(|k| k.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    at(format)
                ),
                Untrusted::Unknown => write!(
                    f,
                    "a signature no trusted key verifies: it was made by another key, or what \
                     it signed was changed since ({})",
                    at(format)
                ),
            },
            Finding::Tampered { format, key } => write!(
                f,
                "a signature naming the trusted key {key} that does not verify: what it signed \
                 was changed ({})",
                at(format)
            ),
            Finding::Keyless { format } => write!(
                f,
                "a keyless signature (a certificate), which Pier does not verify: only \
                 key-based signatures count ({})",
                at(format)
            ),
            Finding::OtherDigest {
                format,
                key,
                signed,
            } => write!(
                f,
                "signature for another digest ({}) by {key} ({})",
                signed.join(", "),
                at(format)
            ),
            Finding::OtherRepository {
                format,
                key,
                signed,
            } => write!(
                f,
                "signature for another repository ({signed}) by {key} ({})",
                at(format)
            ),
            Finding::MissingAnnotation {
                format,
                key,
                name,
                want,
            } => write!(
                f,
                "signed by {key} without the required annotation {name}={want} ({})",
                at(format)
            ),
            Finding::NotImageSignature {
                format,
                key,
                reason,
            } => write!(f, "{reason}, signed by {key} ({})", at(format)),
        }
    }
}

/// The first signature that a rule's key verifies and whose payload names exactly
/// `subject`, with the rule's annotations; else every reason why not.
pub fn verify(
    found: &[Envelope],
    subject: &Subject<'_>,
    policy: &Policy,
) -> Result<Verified, Rejected> {
    let mut findings = Vec::new();
    for env in found {
        match check(env, subject, policy) {
            Ok(v) => return Ok(v),
            Err(f) => findings.push(f),
        }
    }
    Err(Rejected {
        subject: format!("{}@{}", subject.image, subject.digest),
        keys: policy.keys(),
        found: findings,
    })
}

fn check(env: &Envelope, subject: &Subject<'_>, policy: &Policy) -> Result<Verified, Finding> {
    let (format, opened) = match env {
        Envelope::SigTag {
            payload,
            annotations,
        } => (Format::SigTag, simple::open(payload, annotations)),
        Envelope::Bundle { json, .. } => (Format::Bundle, bundle::open(json)),
    };
    let opened = opened.map_err(|e| Finding::Unreadable {
        format,
        reason: e.to_string(),
    })?;
    // A key that verifies it but whose rule it does not satisfy is the reason, unless
    // another rule (with the same key) is satisfied.
    let mut first = None;
    for rule in &policy.rules {
        for key in &rule.keys {
            if !opened
                .signatures
                .iter()
                .any(|s| key.verifies(&opened.message, s))
            {
                continue;
            }
            match judge(format, &opened, key, rule, subject) {
                Ok(v) => return Ok(v),
                Err(f) => {
                    first.get_or_insert(f);
                }
            }
        }
    }
    Err(first.unwrap_or_else(|| unverified(format, &opened, policy)))
}

/// A verified signature: does what it signed name exactly this digest, this repository,
/// with the rule's annotations?
fn judge(
    format: Format,
    opened: &Opened,
    key: &PublicKey,
    rule: &Rule,
    subject: &Subject<'_>,
) -> Result<Verified, Finding> {
    let fp = || key.fingerprint().clone();
    let claim = match format {
        Format::SigTag => simple::claim(&opened.payload),
        Format::Bundle => bundle::claim(&opened.payload),
    }
    .map_err(|e| Finding::NotImageSignature {
        format,
        key: fp(),
        reason: e.to_string(),
    })?;
    let Some(signed) = claim.subjects.iter().find(|s| s.digest == subject.digest) else {
        return Err(Finding::OtherDigest {
            format,
            key: fp(),
            signed: claim.subjects.iter().map(|s| quote(&s.digest)).collect(),
        });
    };
    if let Some(r) = &claim.reference
        && !subject.image.is_same_repository(r)
    {
        return Err(Finding::OtherRepository {
            format,
            key: fp(),
            signed: quote(r),
        });
    }
    for (name, want) in &rule.annotations {
        if signed.annotations.get(name) != Some(want) {
            return Err(Finding::MissingAnnotation {
                format,
                key: fp(),
                name: name.clone(),
                want: want.clone(),
            });
        }
    }
    Ok(Verified {
        key: key.fingerprint().to_string(),
        algorithm: key.algorithm().to_owned(),
        trust: rule.name.clone(),
        format,
        signed: signed.digest.clone(),
    })
}

/// No trusted key verifies it: name who did sign it, as well as the signature allows.
fn unverified(format: Format, opened: &Opened, policy: &Policy) -> Finding {
    let trusted = |fp: &Fingerprint| {
        policy
            .rules
            .iter()
            .flat_map(|r| &r.keys)
            .any(|k| k.fingerprint() == fp)
    };
    let verifies = |k: &PublicKey| {
        opened
            .signatures
            .iter()
            .any(|s| k.verifies(&opened.message, s))
    };
    match &opened.signer {
        Signer::Certificate => return Finding::Keyless { format },
        Signer::Key(k) if verifies(k) => {
            return Finding::Untrusted {
                format,
                signer: Untrusted::Key(k.fingerprint().clone()),
            };
        }
        Signer::Key(k) if trusted(k.fingerprint()) => {
            return Finding::Tampered {
                format,
                key: k.fingerprint().clone(),
            };
        }
        Signer::Hint(fp) if trusted(fp) => {
            return Finding::Tampered {
                format,
                key: fp.clone(),
            };
        }
        Signer::Hint(fp) => {
            return Finding::Untrusted {
                format,
                signer: Untrusted::Key(fp.clone()),
            };
        }
        Signer::Key(_) | Signer::Unnamed => {}
    }
    let mut recovered: Vec<Fingerprint> = Vec::new();
    for s in &opened.signatures {
        for fp in recover_p256(&opened.message, s) {
            if !recovered.contains(&fp) {
                recovered.push(fp);
            }
        }
    }
    let signer = match recovered.len() {
        0 => Untrusted::Unknown,
        1 => Untrusted::Key(recovered.remove(0)),
        _ => Untrusted::OneOf(recovered),
    };
    Finding::Untrusted { format, signer }
}
