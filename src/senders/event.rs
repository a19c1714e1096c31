//! What a sender's parser produces: push events, whatever the sender's format, and the
//! helpers parsers share to read a registry host out of what the sender names.

use serde::{Deserialize, Serialize};

/// One "image pushed" fact, whatever the sender's format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushEvent {
    pub event_id: Option<String>,
    /// The registry host, when the sender names it.
    pub registry: Option<String>,
    pub repository: String,
    pub tag: Option<String>,
    /// A hint only: the deployed digest is always resolved from the registry.
    pub digest: Option<String>,
    /// Set when the event can never deploy (a blob, a pull, a digest-only push).
    pub ignore: Option<String>,
}

impl PushEvent {
    /// A tagged push; `tag` may be empty or a digest, which makes it an ignored event.
    pub(crate) fn push(
        registry: Option<String>,
        repository: String,
        tag: Option<String>,
        digest: Option<String>,
    ) -> Self {
        let tag = tag.filter(|t| !t.is_empty());
        let ignore = match &tag {
            None => Some("manifest pushed without a tag".to_owned()),
            Some(t) if t.starts_with("sha256:") => {
                Some("manifest pushed by digest, without a tag".to_owned())
            }
            Some(_) if repository.is_empty() => Some("no repository named".to_owned()),
            Some(_) => None,
        };
        PushEvent {
            event_id: None,
            registry: registry.filter(|r| !r.is_empty()),
            repository,
            tag: tag.filter(|t| !t.starts_with("sha256:")),
            digest,
            ignore,
        }
    }

    /// An event that deploys nothing, and why.
    pub(crate) fn ignored(repository: impl Into<String>, reason: impl Into<String>) -> Self {
        PushEvent {
            event_id: None,
            registry: None,
            repository: repository.into(),
            tag: None,
            digest: None,
            ignore: Some(reason.into()),
        }
    }
}

/// What a delivery says, once authenticated and read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The sender's id of this delivery (a header, or the body's event id): the same id
    /// again is a retry.
    pub delivery_id: Option<String>,
    pub events: Vec<PushEvent>,
    /// Why a delivery that carries no event at all (a ping, another event type) deploys
    /// nothing.
    pub reason: Option<String>,
}

impl Parsed {
    pub(crate) fn events(delivery_id: Option<String>, events: Vec<PushEvent>) -> Self {
        Parsed {
            delivery_id,
            events,
            reason: None,
        }
    }
    pub(crate) fn nothing(delivery_id: Option<String>, reason: impl Into<String>) -> Self {
        Parsed {
            delivery_id,
            events: vec![],
            reason: Some(reason.into()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// `serde_json` errors name a line and column, never the input, so they are safe to return.
pub fn malformed(what: &str, e: impl std::fmt::Display) -> Malformed {
    let text = e.to_string();
    Malformed(format!(
        "{what}: {}",
        text.chars().take(160).collect::<String>()
    ))
}

/// A first path segment with a dot, a colon or `localhost` is a registry host.
pub fn split_host(repo: &str) -> (Option<String>, String) {
    match repo.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first.to_owned()), rest.to_owned())
        }
        _ => (None, repo.to_owned()),
    }
}

/// The host (and port) of `scheme://host[:port]/...`.
pub fn host_of_url(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next()?;
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    (!host.is_empty()).then(|| host.to_owned())
}
