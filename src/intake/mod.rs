//! Webhook intake: verify over the raw bytes, normalize into push events, match apps,
//! and store the delivery with its deployments in one transaction.

pub mod distribution;
pub mod generic;
pub mod verify;

use axum::http::HeaderMap;
use serde::Serialize;
use uuid::Uuid;

use crate::config::{AppConfig, Config, SourceConfig, SourceKind};
use crate::store::{
    DeliveryOutcome, Enqueued, NewDelivery, NewDeployment, Store, StoreError, Trigger,
};
pub use verify::Rejected;

/// One "image pushed" fact, whatever the sender's format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("unknown webhook source")]
    UnknownSource,
    #[error("unauthenticated delivery")]
    Unauthenticated(Rejected),
    #[error("unsupported content type `{0}`")]
    UnsupportedMediaType(String),
    #[error("malformed delivery: {}", .0.0)]
    Malformed(Malformed),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What intake answers an authentic delivery.
#[derive(Debug, Serialize)]
pub struct Accepted {
    pub delivery_id: Uuid,
    pub duplicate: bool,
    pub deployments: Vec<Enqueued>,
    pub events: Vec<EventVerdict>,
}

impl Accepted {
    /// A delivery that queued at least one new deployment is a 202, anything else a 200.
    pub fn queued_any(&self) -> bool {
        self.deployments
            .iter()
            .any(|d| matches!(d, Enqueued::Queued { .. }))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct EventVerdict {
    #[serde(flatten)]
    pub event: PushEvent,
    /// The apps this event deploys, or why it deploys none.
    pub apps: Vec<String>,
    pub reason: Option<String>,
}

pub fn authenticate(
    source: &SourceConfig,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Rejected> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(token) = &source.token {
        verify::token(header("authorization"), token.expose())?;
    }
    if let Some(secret) = &source.hmac_secret {
        verify::hmac_sha256(header(&source.signature_header), secret.expose(), body)?;
    }
    Ok(())
}

fn check_content_type(kind: SourceKind, headers: &HeaderMap) -> Result<(), IntakeError> {
    let allowed = match kind {
        SourceKind::Distribution => distribution::MEDIA_TYPES,
        SourceKind::Generic => generic::MEDIA_TYPES,
    };
    let given = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = given
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if allowed.contains(&essence.as_str()) {
        Ok(())
    } else {
        Err(IntakeError::UnsupportedMediaType(
            given.chars().take(100).collect(),
        ))
    }
}

fn parse(kind: SourceKind, body: &[u8]) -> Result<Vec<PushEvent>, Malformed> {
    match kind {
        SourceKind::Distribution => distribution::parse(body),
        SourceKind::Generic => generic::parse(body),
    }
}

fn same_host(a: &str, b: &str) -> bool {
    let norm = |h: &str| h.to_ascii_lowercase().replacen("localhost", "127.0.0.1", 1);
    norm(a) == norm(b)
}

/// Which apps an event deploys: same repository, same tag, and the same registry host
/// when the sender names one.
pub fn match_apps<'a>(
    apps: &'a [AppConfig],
    event: &PushEvent,
) -> Result<Vec<&'a AppConfig>, String> {
    if let Some(reason) = &event.ignore {
        return Err(reason.clone());
    }
    let Some(tag) = &event.tag else {
        return Err("no tag".into());
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
        return Err(format!("no app follows repository {}", event.repository));
    }
    let matched: Vec<&AppConfig> = same_repo.into_iter().filter(|a| &a.tag == tag).collect();
    if matched.is_empty() {
        return Err(format!(
            "no app follows tag `{tag}` of {}",
            event.repository
        ));
    }
    Ok(matched)
}

/// The dedupe key of a delivery: the sender's event ids, when it gives them.
fn event_key(events: &[PushEvent]) -> Option<String> {
    let ids: Option<Vec<&str>> = events.iter().map(|e| e.event_id.as_deref()).collect();
    ids.filter(|ids| !ids.is_empty()).map(|ids| ids.join(","))
}

/// Verifies, parses, matches and stores one delivery. Nothing is stored unless the
/// delivery is authentic and well-formed.
pub async fn receive(
    config: &Config,
    store: &Store,
    source_name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Accepted, IntakeError> {
    let source = config
        .source(source_name)
        .ok_or(IntakeError::UnknownSource)?;
    authenticate(source, headers, body).map_err(IntakeError::Unauthenticated)?;
    check_content_type(source.kind, headers)?;
    let events = parse(source.kind, body).map_err(IntakeError::Malformed)?;

    let mut verdicts = Vec::with_capacity(events.len());
    let mut wanted: Vec<NewDeployment> = Vec::new();
    for event in events {
        match match_apps(&config.apps, &event) {
            Ok(apps) => {
                for app in &apps {
                    // One delivery asking twice for the same app (several events) queues once.
                    wanted.retain(|w| w.app != app.name);
                    wanted.push(NewDeployment {
                        app: app.name.clone(),
                        trigger: Trigger::Webhook,
                        delivery_id: None,
                        image: app.image.clone(),
                        requested_tag: Some(app.tag.clone()),
                        claimed_digest: event.digest.clone(),
                        pinned: false,
                    });
                }
                verdicts.push(EventVerdict {
                    apps: apps.iter().map(|a| a.name.clone()).collect(),
                    reason: None,
                    event,
                });
            }
            Err(reason) => verdicts.push(EventVerdict {
                event,
                apps: vec![],
                reason: Some(reason),
            }),
        }
    }
    let reason = if wanted.is_empty() {
        let reasons: Vec<&str> = verdicts
            .iter()
            .filter_map(|v| v.reason.as_deref())
            .collect();
        if reasons.is_empty() {
            "no events".to_owned()
        } else {
            reasons.join("; ")
        }
    } else {
        format!(
            "deploys {}",
            wanted
                .iter()
                .map(|w| w.app.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let delivery = NewDelivery {
        source: source.name.clone(),
        event_key: event_key(&verdicts.iter().map(|v| v.event.clone()).collect::<Vec<_>>()),
        events: serde_json::to_value(&verdicts).unwrap_or_default(),
        reason,
    };
    match store.record_delivery(delivery, wanted).await? {
        DeliveryOutcome::Recorded {
            delivery_id,
            deployments,
        } => Ok(Accepted {
            delivery_id,
            duplicate: false,
            deployments,
            events: verdicts,
        }),
        DeliveryOutcome::Duplicate { delivery_id } => Ok(Accepted {
            delivery_id,
            duplicate: true,
            deployments: vec![],
            events: verdicts,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn apps() -> Vec<AppConfig> {
        let text = r#"
            [server]
            database_url = "postgres://localhost/pier"
            [[apps]]
            name = "web"
            image = "127.0.0.1:5000/demo/web"
            tag = "main"
            port = 8080
            [[apps]]
            name = "web-staging"
            image = "127.0.0.1:5000/demo/web"
            tag = "staging"
            port = 8080
        "#;
        Config::parse(text, std::path::Path::new(".")).unwrap().apps
    }

    fn event(registry: Option<&str>, repo: &str, tag: Option<&str>) -> PushEvent {
        PushEvent {
            event_id: Some("e".into()),
            registry: registry.map(Into::into),
            repository: repo.into(),
            tag: tag.map(Into::into),
            digest: None,
            ignore: None,
        }
    }

    fn names(r: Result<Vec<&AppConfig>, String>) -> Result<Vec<String>, String> {
        r.map(|apps| apps.iter().map(|a| a.name.clone()).collect())
    }

    #[test]
    fn an_event_deploys_the_apps_that_follow_its_repository_and_tag() {
        let apps = apps();
        let e = event(Some("127.0.0.1:5000"), "demo/web", Some("main"));
        assert_eq!(names(match_apps(&apps, &e)), Ok(vec!["web".to_owned()]));
        let e = event(None, "demo/web", Some("staging"));
        assert_eq!(
            names(match_apps(&apps, &e)),
            Ok(vec!["web-staging".to_owned()])
        );
        // `localhost` and `127.0.0.1` name the same registry.
        let e = event(Some("localhost:5000"), "demo/web", Some("main"));
        assert_eq!(names(match_apps(&apps, &e)), Ok(vec!["web".to_owned()]));
    }

    #[test]
    fn an_event_that_deploys_nothing_says_why() {
        let apps = apps();
        let other_tag = event(None, "demo/web", Some("v9"));
        assert!(
            match_apps(&apps, &other_tag)
                .unwrap_err()
                .contains("tag `v9`")
        );
        let other_repo = event(None, "demo/api", Some("main"));
        assert!(
            match_apps(&apps, &other_repo)
                .unwrap_err()
                .contains("demo/api")
        );
        let other_host = event(Some("ghcr.io"), "demo/web", Some("main"));
        assert!(match_apps(&apps, &other_host).is_err());
        let mut ignored = event(None, "demo/web", Some("main"));
        ignored.ignore = Some("not a push".into());
        assert_eq!(match_apps(&apps, &ignored).unwrap_err(), "not a push");
    }

    #[test]
    fn retries_share_a_key_and_events_without_ids_have_none() {
        let a = event(None, "demo/web", Some("main"));
        assert_eq!(event_key(std::slice::from_ref(&a)).as_deref(), Some("e"));
        let mut b = a.clone();
        b.event_id = Some("f".into());
        assert_eq!(event_key(&[a.clone(), b]).as_deref(), Some("e,f"));
        let mut anonymous = a;
        anonymous.event_id = None;
        assert_eq!(event_key(&[anonymous]), None);
        assert_eq!(event_key(&[]), None);
    }
}
