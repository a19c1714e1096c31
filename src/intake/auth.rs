//! Who may deliver: the checks that run before anything is parsed. Tokens (in a header
//! or the URL path) are checked from the request head alone, before a byte of the body is
//! read; signatures over the raw body bytes once it has arrived. Every comparison is in
//! constant time, and a request that carries a credential header twice is refused: a
//! proxy and a sender that disagree on which copy counts must not let one through.

use std::borrow::Cow;

use axum::http::HeaderMap;

use super::verify::{self, Algorithm, Rejected};
use crate::config::{SourceConfig, SourceKind, SourceMode};

/// One request as it arrived: headers and the raw body bytes.
#[derive(Clone, Copy)]
pub struct Incoming<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

impl<'a> Incoming<'a> {
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The media type without parameters, lower-cased.
    pub fn media_type(&self) -> String {
        self.header(axum::http::header::CONTENT_TYPE.as_str())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }

    pub(super) fn is_form(&self) -> bool {
        self.media_type() == FORM
    }
}

pub(super) const FORM: &str = "application/x-www-form-urlencoded";

/// The `payload` field of a form-encoded delivery (GitHub, Gitea and Forgejo can send one).
pub(super) fn form_payload(body: &[u8]) -> Option<Vec<u8>> {
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
    fields
        .into_iter()
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_bytes())
}

/// The bytes the sender signed: the raw body, except that Gitea and Forgejo sign the JSON
/// text that they then wrap in a form.
pub(super) fn signed_bytes<'a>(
    kind: SourceKind,
    req: Incoming<'a>,
) -> Result<Cow<'a, [u8]>, Rejected> {
    if matches!(kind, SourceKind::Gitea | SourceKind::Forgejo) && req.is_form() {
        return form_payload(req.body)
            .map(Cow::Owned)
            .ok_or(Rejected::MissingSignature);
    }
    Ok(Cow::Borrowed(req.body))
}

/// The headers that carry a credential for `source`; each may appear at most once.
fn credential_headers(source: &SourceConfig) -> Vec<&str> {
    let mut names = vec!["authorization"];
    match source.kind {
        SourceKind::Distribution | SourceKind::Generic => {
            names.push(source.signature_header.as_str());
            if source.mode == SourceMode::StandardWebhooks {
                names.extend(["webhook-id", "webhook-timestamp", "webhook-signature"]);
            }
        }
        SourceKind::Github => names.push("x-hub-signature-256"),
        SourceKind::Gitea => names.push("x-gitea-signature"),
        SourceKind::Forgejo => names.push("x-forgejo-signature"),
        SourceKind::Artifactory => names.push("x-jfrog-event-auth"),
        SourceKind::Nexus => names.push("x-nexus-webhook-signature"),
        SourceKind::Harbor
        | SourceKind::Zot
        | SourceKind::Acr
        | SourceKind::Dockerhub
        | SourceKind::Quay => {}
    }
    names
}

/// What can be checked from the request head: no credential header twice, and every
/// token the source is configured with (a header token, or the URL's). A request that
/// fails here is refused before its body is read.
pub fn check_head(
    source: &SourceConfig,
    headers: &HeaderMap,
    path_token: Option<&str>,
) -> Result<(), Rejected> {
    if credential_headers(source)
        .into_iter()
        .any(|name| headers.get_all(name).iter().count() > 1)
    {
        return Err(Rejected::Ambiguous);
    }
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let optional_token = |name: &str| {
        if source.tokens.is_empty() {
            Ok(())
        } else {
            verify::tokens(h(name), &source.tokens)
        }
    };
    match (source.kind, source.mode) {
        (SourceKind::Dockerhub | SourceKind::Quay, _) => verify::tokens(path_token, &source.tokens),
        (SourceKind::Harbor | SourceKind::Zot | SourceKind::Acr, _) => {
            verify::tokens(h("authorization"), &source.tokens)
        }
        (SourceKind::Artifactory, SourceMode::Signing) => Ok(()),
        (SourceKind::Artifactory, _) => verify::tokens(h("x-jfrog-event-auth"), &source.tokens),
        (SourceKind::Github | SourceKind::Nexus, _) => Ok(()),
        (
            SourceKind::Distribution
            | SourceKind::Generic
            | SourceKind::Gitea
            | SourceKind::Forgejo,
            _,
        ) => optional_token("authorization"),
    }
}

/// The signature over the body, for the kinds that sign. `signed` is what the sender
/// signed (see [`signed_bytes`]); `now` unix seconds. Tokens were checked by
/// [`check_head`].
pub fn check_signature(
    source: &SourceConfig,
    req: Incoming<'_>,
    signed: &[u8],
    now: i64,
) -> Result<(), Rejected> {
    use Algorithm::{Sha1, Sha256};
    let h = |name: &str| req.header(name);
    let keys = &source.keys;
    let prefixed_hex = |name: &str| {
        let given = h(name).map(|v| v.trim());
        let bare = given.map(|v| v.strip_prefix("sha256=").unwrap_or(v));
        verify::hmac_hex(bare, None, Sha256, keys, signed)
    };
    match (source.kind, source.mode) {
        (SourceKind::Distribution, _) if keys.is_empty() => Ok(()),
        (SourceKind::Distribution, _) => prefixed_hex(&source.signature_header),
        (SourceKind::Generic, SourceMode::StandardWebhooks) => verify::standard_webhooks(
            verify::StandardHeaders {
                id: h("webhook-id"),
                timestamp: h("webhook-timestamp"),
                signature: h("webhook-signature"),
            },
            keys,
            source.tolerance.as_secs() as i64,
            now,
            signed,
        ),
        (SourceKind::Generic, _) => prefixed_hex(&source.signature_header),
        (SourceKind::Github, _) => verify::hmac_hex(
            h("x-hub-signature-256"),
            Some("sha256="),
            Sha256,
            keys,
            signed,
        ),
        (SourceKind::Gitea, _) => {
            verify::hmac_hex(h("x-gitea-signature"), None, Sha256, keys, signed)
        }
        (SourceKind::Forgejo, _) => {
            verify::hmac_hex(h("x-forgejo-signature"), None, Sha256, keys, signed)
        }
        (SourceKind::Artifactory, SourceMode::Signing) => {
            verify::hmac_hex(h("x-jfrog-event-auth"), None, Sha256, keys, signed)
        }
        (SourceKind::Nexus, _) => {
            verify::hmac_hex(h("x-nexus-webhook-signature"), None, Sha1, keys, signed)
        }
        (
            SourceKind::Harbor
            | SourceKind::Zot
            | SourceKind::Acr
            | SourceKind::Dockerhub
            | SourceKind::Quay
            | SourceKind::Artifactory,
            _,
        ) => Ok(()),
    }
}
