//! Which apps an authentic event deploys, and the key that makes a retried delivery the
//! same delivery.

use sha2::{Digest as _, Sha256};

use super::PushEvent;
use crate::config::AppConfig;

pub(super) fn same_host(a: &str, b: &str) -> bool {
    let norm = |h: &str| h.to_ascii_lowercase().replacen("localhost", "127.0.0.1", 1);
    norm(a) == norm(b)
}

pub use crate::domain::is_digest;

/// Why an event deploys no app: the event's verdict, stored with the delivery and shown on
/// its page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unmatched {
    /// The sender's parser said why this is no push to deploy (a pull, a blob, a delete).
    #[error("{reason}")]
    Ignored { reason: String },
    #[error("no tag")]
    NoTag,
    #[error("no app follows repository {repository}")]
    NoRepository { repository: String },
    #[error("no app follows tag `{tag}` of {repository}")]
    NoTagRule { tag: String, repository: String },
}

/// Which apps an event deploys: same repository, a tag the app's rule matches (see
/// [`crate::config::TagRule`]), and the same registry host when the sender names one. `fold_case` matches tags ignoring case, for senders that
/// lower-case what they report.
pub(crate) fn match_apps<'a>(
    apps: &'a [AppConfig],
    event: &PushEvent,
    fold_case: bool,
) -> Result<Vec<&'a AppConfig>, Unmatched> {
    if let Some(reason) = &event.ignore {
        return Err(Unmatched::Ignored {
            reason: reason.clone(),
        });
    }
    let Some(tag) = &event.tag else {
        return Err(Unmatched::NoTag);
    };
    let same_repo: Vec<&AppConfig> = apps
        .iter()
        .filter(|a| a.repository() == event.repository)
        .filter(|a| {
            event
                .registry
                .as_deref()
                .is_none_or(|h| same_host(h, a.registry_host()))
        })
        .collect();
    if same_repo.is_empty() {
        return Err(Unmatched::NoRepository {
            repository: event.repository.clone(),
        });
    }
    // Each app's own rule decides: an exact tag, a glob, or a semver range.
    let matched: Vec<&AppConfig> = same_repo
        .into_iter()
        .filter(|a| a.rule.matches(tag, fold_case))
        // A promoted app deploys only what its `promote_from` app proved.
        .filter(|a| a.gates.promotion.is_none())
        .collect();
    if matched.is_empty() {
        return Err(Unmatched::NoTagRule {
            tag: tag.clone(),
            repository: event.repository.clone(),
        });
    }
    Ok(matched)
}

/// Longest event key stored as it is; a longer one (hundreds of event ids, or a sender's
/// odd id) is stored as its SHA-256, so the dedupe index can always hold it.
const MAX_KEY: usize = 200;

/// The dedupe key of a delivery: the sender's delivery id, else its event ids.
pub(super) fn event_key(delivery_id: Option<&str>, events: &[PushEvent]) -> Option<String> {
    let key = match delivery_id {
        Some(id) => id.to_owned(),
        None => {
            let ids: Option<Vec<&str>> = events.iter().map(|e| e.event_id.as_deref()).collect();
            ids.filter(|ids| !ids.is_empty())?.join(",")
        }
    };
    Some(if key.len() > MAX_KEY {
        format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())))
    } else {
        key
    })
}
