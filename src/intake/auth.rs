//! Who may deliver: the checks that run before anything is parsed, each asked of the
//! source's sender. Tokens (in a header or the URL path) are checked from the request
//! head alone, before a byte of the body is read; signatures over the raw body bytes once
//! it has arrived. Every comparison is in constant time, and a request that carries a
//! credential header twice is refused: a proxy and a sender that disagree on which copy
//! counts must not let one through.

use std::borrow::Cow;

use axum::http::HeaderMap;

use super::IntakeError;
use crate::config::SourceConfig;
use crate::senders::{self, Incoming, Rejected};

/// What can be checked from the request head: no credential header twice, and every
/// token the source is configured with (a header token, or the URL's). A request that
/// fails here is refused before its body is read.
pub fn check_head(
    source: &SourceConfig,
    headers: &HeaderMap,
    path_token: Option<&str>,
) -> Result<(), Rejected> {
    senders::check_head(source.kind, &source.view(), headers, path_token)
}

/// The bytes the sender signed: the raw body, except that Gitea and Forgejo sign the JSON
/// text that they then wrap in a form.
pub(super) fn signed_bytes<'a>(
    source: &SourceConfig,
    req: Incoming<'a>,
) -> Result<Cow<'a, [u8]>, Rejected> {
    source.sender().signed_bytes(req)
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
    source
        .sender()
        .check_signature(&source.view(), req, signed, now)
}

/// The delivery's media type is one its sender sends.
pub(super) fn check_content_type(
    source: &SourceConfig,
    req: Incoming<'_>,
) -> Result<(), IntakeError> {
    if source
        .sender()
        .media_types()
        .contains(&req.media_type().as_str())
    {
        return Ok(());
    }
    let given = req
        .header(axum::http::header::CONTENT_TYPE.as_str())
        .unwrap_or("");
    Err(IntakeError::UnsupportedMediaType(
        given.chars().take(100).collect(),
    ))
}
