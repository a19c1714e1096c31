//! Every payload parser, on arbitrary bytes and headers: the first byte picks the source
//! kind (and mode), the next line is header values, the rest is the body. A parser may
//! refuse (`Malformed`) but must never panic, loop or allocate without bound.
#![no_main]

use axum::http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use pier::config::{ArtifactoryAccess, SourceKind, SourceMode};
use pier::intake;

const KINDS: &[(SourceKind, SourceMode)] = &[
    (SourceKind::Distribution, SourceMode::Hmac),
    (SourceKind::Generic, SourceMode::Hmac),
    (SourceKind::Generic, SourceMode::StandardWebhooks),
    (SourceKind::Github, SourceMode::Hmac),
    (SourceKind::Gitea, SourceMode::Hmac),
    (SourceKind::Forgejo, SourceMode::Hmac),
    (SourceKind::Harbor, SourceMode::Token),
    (SourceKind::Zot, SourceMode::Token),
    (SourceKind::Dockerhub, SourceMode::Token),
    (SourceKind::Quay, SourceMode::Token),
    (SourceKind::Artifactory, SourceMode::Token),
    (SourceKind::Nexus, SourceMode::Hmac),
    (SourceKind::Acr, SourceMode::Token),
];

/// The headers the parsers read, filled from the input's first line (`|`-separated).
const HEADERS: &[&str] = &[
    "x-github-event",
    "x-gitea-event",
    "x-forgejo-event",
    "x-nexus-webhook-id",
    "ce-type",
    "ce-specversion",
    "webhook-id",
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (kind, mode) = KINDS[selector as usize % KINDS.len()];
    let access = [
        ArtifactoryAccess::RepositoryPath,
        ArtifactoryAccess::Subdomain,
        ArtifactoryAccess::Port,
    ][selector as usize / KINDS.len() % 3];
    let (line, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&[][..], rest),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in HEADERS.iter().zip(line.split(|&b| b == b'|')) {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            headers.insert(*name, v);
        }
    }
    if let Ok(parsed) = intake::parse(kind, mode, access, &headers, body) {
        // What a parser accepts is bounded by what it was given.
        assert!(parsed.events.len() <= body.len() + 1);
        for e in &parsed.events {
            assert!(e.ignore.is_some() || e.tag.as_deref().is_some_and(|t| !t.is_empty()));
        }
    }
});
