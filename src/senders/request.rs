//! A delivery as it arrived (headers and the raw body bytes), and the credential checks
//! several senders share. Every comparison is in constant time (see [`super::verify`]).

use axum::http::HeaderMap;

use super::SourceView;
use super::verify::{self, Algorithm, Rejected};

/// One request as it arrived: headers and the raw body bytes.
#[derive(Clone, Copy)]
pub struct Incoming<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

impl<'a> Incoming<'a> {
    pub(crate) fn header(&self, name: &str) -> Option<&'a str> {
        header(self.headers, name)
    }

    /// The media type without parameters, lower-cased.
    pub(crate) fn media_type(&self) -> String {
        self.header(axum::http::header::CONTENT_TYPE.as_str())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }

    pub(crate) fn is_form(&self) -> bool {
        self.media_type() == FORM
    }
}

pub const FORM: &str = "application/x-www-form-urlencoded";

/// The `payload` field of a form-encoded delivery (GitHub, Gitea and Forgejo can send one).
pub fn form_payload(body: &[u8]) -> Option<Vec<u8>> {
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
    fields
        .into_iter()
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_bytes())
}

/// A header's value, if it is text.
pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// One of the source's tokens in `name`.
pub(super) fn token_in(
    source: &SourceView<'_>,
    headers: &HeaderMap,
    name: &str,
) -> Result<(), Rejected> {
    verify::tokens(header(headers, name), &source.tokens)
}

/// One of the source's tokens in `name`, if it is configured with any: a signing sender
/// may add a static header as well.
pub(super) fn optional_token_in(
    source: &SourceView<'_>,
    headers: &HeaderMap,
    name: &str,
) -> Result<(), Rejected> {
    if source.tokens.is_empty() {
        Ok(())
    } else {
        token_in(source, headers, name)
    }
}

/// Hex HMAC-SHA256 of `signed` in `name`, as `sha256=<hex>` or bare hex.
pub(super) fn sha256_hex_in(
    source: &SourceView<'_>,
    req: Incoming<'_>,
    name: &str,
    signed: &[u8],
) -> Result<(), Rejected> {
    let given = req.header(name).map(|v| v.trim());
    let bare = given.map(|v| v.strip_prefix("sha256=").unwrap_or(v));
    verify::hmac_hex(bare, None, Algorithm::Sha256, source.keys, signed)
}
