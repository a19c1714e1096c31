//! Webhook intake: verify over the raw bytes, normalize into push events, match apps,
//! and store the delivery with its deployments in one transaction.

pub mod acr;
pub mod artifactory;
mod auth;
pub mod distribution;
pub mod dockerhub;
pub mod generic;
pub mod gitea;
pub mod github;
pub mod harbor;
mod matching;
pub mod nexus;
pub mod quay;
pub mod verify;
pub mod zot;

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::config::{ArtifactoryAccess, Config, SourceConfig, SourceKind, SourceMode};
use crate::store::{
    DeliveryOutcome, DeploymentRequest, Enqueued, HeldBack, NewDelivery, NewDeployment, Store,
    StoreError, Trigger,
};
use auth::{FORM, form_payload, signed_bytes};
pub use auth::{Incoming, check_head, check_signature};
use matching::event_key;
pub(crate) use matching::{host_of_url, split_host};
pub use matching::{is_digest, match_apps};
pub use verify::Rejected;

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
    pub fn push(
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
    pub fn ignored(repository: impl Into<String>, reason: impl Into<String>) -> Self {
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
    pub fn events(delivery_id: Option<String>, events: Vec<PushEvent>) -> Self {
        Parsed {
            delivery_id,
            events,
            reason: None,
        }
    }
    pub fn nothing(delivery_id: Option<String>, reason: impl Into<String>) -> Self {
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
pub(crate) fn malformed(what: &str, e: impl std::fmt::Display) -> Malformed {
    let text = e.to_string();
    Malformed(format!(
        "{what}: {}",
        text.chars().take(160).collect::<String>()
    ))
}

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
    #[error("too many events in one delivery: {0} (at most {max})", max = MAX_EVENTS)]
    TooManyEvents(usize),
    #[error("request body too large")]
    TooLarge,
    /// Too many webhook bodies in flight: the sender should retry shortly.
    #[error("too many webhooks in flight")]
    Busy,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What intake answers an authentic delivery.
#[derive(Debug, Serialize)]
pub struct Accepted {
    pub delivery_id: Uuid,
    pub duplicate: bool,
    /// The same body was accepted before under another delivery id.
    pub replay: bool,
    pub deployments: Vec<Enqueued>,
    pub events: Vec<EventVerdict>,
    /// Why nothing deploys, when nothing does.
    pub reason: Option<String>,
}

impl Accepted {
    /// A delivery that queued at least one new deployment is a 202, anything else a 200.
    pub fn queued_any(&self) -> bool {
        self.deployments
            .iter()
            .any(|d| matches!(d, Enqueued::Queued { .. }))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventVerdict {
    #[serde(flatten)]
    pub event: PushEvent,
    /// The apps this event deploys, or why it deploys none.
    pub apps: Vec<String>,
    /// Per app, the tag rule that matched (`tag main`, `glob v1.*`, `semver >=1.2, <2`).
    #[serde(default)]
    pub rules: Vec<RuleMatch>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleMatch {
    pub app: String,
    pub rule: String,
}

fn media_types(source: &SourceConfig) -> &'static [&'static str] {
    match source.kind {
        SourceKind::Distribution => distribution::MEDIA_TYPES,
        SourceKind::Github | SourceKind::Gitea | SourceKind::Forgejo => &["application/json", FORM],
        SourceKind::Harbor => harbor::MEDIA_TYPES,
        _ => &["application/json"],
    }
}

fn check_content_type(source: &SourceConfig, req: Incoming<'_>) -> Result<(), IntakeError> {
    if media_types(source).contains(&req.media_type().as_str()) {
        Ok(())
    } else {
        let given = req
            .header(axum::http::header::CONTENT_TYPE.as_str())
            .unwrap_or("");
        Err(IntakeError::UnsupportedMediaType(
            given.chars().take(100).collect(),
        ))
    }
}

/// Reads an authentic delivery of `kind`. `json` is the JSON text (a form's `payload`).
/// `access` matters to `artifactory` only.
pub fn parse(
    kind: SourceKind,
    mode: SourceMode,
    access: ArtifactoryAccess,
    headers: &HeaderMap,
    json: &[u8],
) -> Result<Parsed, Malformed> {
    match kind {
        SourceKind::Distribution => {
            let events = distribution::parse(json)?;
            Ok(Parsed::events(None, events))
        }
        SourceKind::Generic => generic::parse(mode, headers, json),
        SourceKind::Github => github::parse(headers, json),
        SourceKind::Gitea | SourceKind::Forgejo => gitea::parse(kind, headers, json),
        SourceKind::Harbor => harbor::parse(headers, json),
        SourceKind::Zot => zot::parse(headers, json),
        SourceKind::Dockerhub => dockerhub::parse(json),
        SourceKind::Quay => quay::parse(json),
        SourceKind::Artifactory => artifactory::parse(access, json),
        SourceKind::Nexus => nexus::parse(headers, json),
        SourceKind::Acr => acr::parse(json),
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Most events one delivery may carry. Senders send one or a few; hundreds are an error
/// or an attack, refused with 413 rather than stored.
pub const MAX_EVENTS: usize = 100;

/// The source a request is for, if its head alone lets it in: a configured name, a URL
/// token only where the kind takes one, every credential header once, every token right.
/// Runs before a byte of the body is read.
pub fn admit<'c>(
    config: &'c Config,
    source_name: &str,
    path_token: Option<&str>,
    headers: &HeaderMap,
) -> Result<&'c SourceConfig, IntakeError> {
    let source = config
        .source(source_name)
        .ok_or(IntakeError::UnknownSource)?;
    if path_token.is_some() && !source.kind.token_in_path() {
        return Err(IntakeError::UnknownSource);
    }
    check_head(source, headers, path_token).map_err(IntakeError::Unauthenticated)?;
    Ok(source)
}

/// Verifies the body's signature, parses, matches and stores one delivery from a source
/// [`admit`] let in. Nothing is stored unless the delivery is authentic and well-formed.
pub async fn receive(
    config: &Config,
    store: &Store,
    source: &SourceConfig,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Accepted, IntakeError> {
    let req = Incoming { headers, body };
    let signed = signed_bytes(source.kind, req).map_err(IntakeError::Unauthenticated)?;
    check_signature(source, req, &signed, unix_now()).map_err(IntakeError::Unauthenticated)?;
    check_content_type(source, req)?;
    let json: Cow<'_, [u8]> = if req.is_form() {
        match signed {
            Cow::Owned(payload) => Cow::Owned(payload),
            Cow::Borrowed(raw) => Cow::Owned(
                form_payload(raw)
                    .ok_or_else(|| Malformed("form without a `payload` field".into()))
                    .map_err(IntakeError::Malformed)?,
            ),
        }
    } else {
        signed
    };
    let parsed = parse(
        source.kind,
        source.mode,
        source.access_method,
        headers,
        &json,
    )
    .map_err(IntakeError::Malformed)?;
    check_parsed(&parsed)?;
    let body_sha256 = source
        .kind
        .body_is_unique()
        .then(|| Sha256::digest(&json).to_vec());
    accept(config, store, source, parsed, body_sha256.as_deref()).await
}

/// Within one delivery, a later event for the same app replaces an earlier one, except
/// that for a version range the higher version stays (a push of v1.3.0 and v1.2.0 together
/// deploys v1.3.0, whatever their order).
fn supersedes_in_delivery(
    app: &crate::config::AppConfig,
    earlier: Option<&str>,
    later: &str,
) -> bool {
    if !app.rule.is_monotonic() {
        return true;
    }
    let v = |t: &str| crate::config::tag_version(t);
    match (earlier.and_then(v), v(later)) {
        (Some(a), Some(b)) => b >= a,
        _ => true,
    }
}

fn held_reason(held: &[HeldBack], pinned: &[crate::store::Pin]) -> Option<String> {
    (!held.is_empty() || !pinned.is_empty()).then(|| {
        held.iter()
            .map(HeldBack::reason)
            .chain(pinned.iter().map(crate::store::pinned_reason))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// An authentic delivery can still carry what Pier will not store: too many events, or a
/// NUL byte (which Postgres text cannot hold). Each is a 4xx with a reason, never a 500
/// that the sender would retry forever.
fn check_parsed(parsed: &Parsed) -> Result<(), IntakeError> {
    if parsed.events.len() > MAX_EVENTS {
        return Err(IntakeError::TooManyEvents(parsed.events.len()));
    }
    let fields = parsed.events.iter().flat_map(|e| {
        [
            e.event_id.as_deref(),
            e.registry.as_deref(),
            Some(e.repository.as_str()),
            e.tag.as_deref(),
            e.digest.as_deref(),
        ]
    });
    let mut all = fields.chain([parsed.delivery_id.as_deref(), parsed.reason.as_deref()]);
    if all.any(|f| f.is_some_and(|f| f.contains('\0'))) {
        return Err(IntakeError::Malformed(Malformed(
            "a field contains a NUL byte".into(),
        )));
    }
    Ok(())
}

/// Matches authentic events to apps and stores the delivery with its deployments.
async fn accept(
    config: &Config,
    store: &Store,
    source: &SourceConfig,
    parsed: Parsed,
    body_sha256: Option<&[u8]>,
) -> Result<Accepted, IntakeError> {
    run_intake(
        config,
        store,
        IntakeSource::of(source),
        parsed,
        body_sha256,
        None,
    )
    .await
}

/// What intake needs of a source: a configured one, or the name of one a stored delivery
/// came from (a redelivery after the source was removed from the config still matches).
#[derive(Debug, Clone, Copy)]
pub struct IntakeSource<'a> {
    pub name: &'a str,
    pub registry: Option<&'a str>,
    pub fold_case: bool,
}

impl<'a> IntakeSource<'a> {
    pub fn of(source: &'a SourceConfig) -> Self {
        IntakeSource {
            name: &source.name,
            registry: source.registry.as_deref(),
            fold_case: source.kind.folds_tag_case(),
        }
    }
}

/// Runs intake again on a stored delivery's events, as a new delivery marked as a
/// redelivery of it: the apps as configured now decide, and the queue's rules hold (the
/// same digest already queued is not queued twice).
pub async fn redeliver(
    config: &Config,
    store: &Store,
    original: &crate::store::Delivery,
) -> Result<Accepted, IntakeError> {
    let verdicts: Vec<EventVerdict> = serde_json::from_value(original.events.clone())
        .map_err(|e| IntakeError::Malformed(malformed("stored events", e)))?;
    let configured = config.source(&original.source);
    let source = match configured {
        Some(s) => IntakeSource::of(s),
        None => IntakeSource {
            name: &original.source,
            registry: None,
            fold_case: false,
        },
    };
    let parsed = Parsed {
        delivery_id: None,
        events: verdicts.into_iter().map(|v| v.event).collect(),
        reason: Some(format!("redelivery of {}", original.id)),
    };
    run_intake(config, store, source, parsed, None, Some(original.id)).await
}

/// Matches authentic (or stored) events to apps and stores the delivery with its
/// deployments. `redelivery_of` marks a redelivery, which is never deduplicated.
pub async fn run_intake(
    config: &Config,
    store: &Store,
    source: IntakeSource<'_>,
    parsed: Parsed,
    body_sha256: Option<&[u8]>,
    redelivery_of: Option<uuid::Uuid>,
) -> Result<Accepted, IntakeError> {
    let mut verdicts = Vec::with_capacity(parsed.events.len());
    let mut wanted: Vec<NewDeployment> = Vec::new();
    for mut event in parsed.events {
        if let Some(host) = source.registry {
            event.registry = Some(host.to_owned());
        }
        match match_apps(&config.apps, &event, source.fold_case) {
            Ok(apps) => {
                let pushed = event.tag.clone().unwrap_or_default();
                for app in &apps {
                    // The tag to resolve: an exact app's own spelling (a sender may have
                    // lower-cased it); for a glob or range, the pushed tag that matched,
                    // never the rule, which names no manifest.
                    let tag = app.rule.fixed().unwrap_or(&pushed).to_owned();
                    if let Some(earlier) = wanted.iter().find(|w| w.app == app.name)
                        && !supersedes_in_delivery(app, earlier.requested_tag.as_deref(), &tag)
                    {
                        continue;
                    }
                    // One delivery asking twice for the same app (several events) queues once.
                    wanted.retain(|w| w.app != app.name);
                    wanted.push(NewDeployment {
                        app: app.name.clone(),
                        trigger: if source.name == crate::domain::POLLER_SOURCE {
                            Trigger::Reconcile
                        } else {
                            Trigger::Webhook
                        },
                        delivery_id: None,
                        image: app.image.clone(),
                        requested_tag: Some(tag),
                        claimed_digest: event.digest.clone().filter(|d| is_digest(d)),
                        pinned: false,
                    });
                }
                verdicts.push(EventVerdict {
                    apps: apps.iter().map(|a| a.name.clone()).collect(),
                    rules: apps
                        .iter()
                        .map(|a| RuleMatch {
                            app: a.name.clone(),
                            rule: a.rule.to_string(),
                        })
                        .collect(),
                    reason: None,
                    event,
                });
            }
            Err(reason) => verdicts.push(EventVerdict {
                event,
                apps: vec![],
                rules: vec![],
                reason: Some(reason),
            }),
        }
    }
    let reason = if wanted.is_empty() {
        let reasons: Vec<&str> = parsed
            .reason
            .as_deref()
            .into_iter()
            .chain(verdicts.iter().filter_map(|v| v.reason.as_deref()))
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
    let events: Vec<PushEvent> = verdicts.iter().map(|v| v.event.clone()).collect();
    let delivery = NewDelivery {
        source: source.name.to_owned(),
        // A redelivery keeps its events' ids for the page but has no key: keyed, it would
        // be a duplicate of its original and run nothing, which is what it exists to undo.
        event_key: redelivery_of
            .is_none()
            .then(|| event_key(parsed.delivery_id.as_deref(), &events))
            .flatten(),
        events: serde_json::to_value(&verdicts).unwrap_or_default(),
        reason: reason.clone(),
    };
    let wanted = wanted
        .into_iter()
        .map(|d| {
            let never_older = config
                .app(&d.app)
                .map(|a| &a.rule)
                .filter(|r| r.is_monotonic())
                .cloned();
            DeploymentRequest {
                deployment: d,
                never_older,
            }
        })
        .collect();
    let outcome = store
        .record_delivery_with(delivery, body_sha256, wanted, redelivery_of)
        .await?;
    let verdict = match &outcome {
        DeliveryOutcome::Recorded { deployments, .. } if !deployments.is_empty() => "queued",
        DeliveryOutcome::Recorded { pinned, .. } if !pinned.is_empty() => "pinned",
        DeliveryOutcome::Recorded { .. } => "ignored",
        DeliveryOutcome::Duplicate { .. } => "duplicate",
        DeliveryOutcome::Replay { .. } => "replay",
    };
    // Only configured sources (and `poller`) get here: the label set stays bounded.
    metrics::counter!("pier_deliveries_total", "source" => source.name.to_owned(), "verdict" => verdict)
        .increment(1);
    let not_again = |delivery_id, replay: bool| Accepted {
        delivery_id,
        duplicate: !replay,
        replay,
        deployments: vec![],
        events: verdicts.clone(),
        reason: Some(if replay {
            "replay: this body was accepted before under another delivery id".to_owned()
        } else {
            "duplicate: this delivery id was seen before".to_owned()
        }),
    };
    Ok(match outcome {
        DeliveryOutcome::Recorded {
            delivery_id,
            deployments,
            held_back,
            pinned,
        } => Accepted {
            delivery_id,
            duplicate: false,
            replay: false,
            reason: held_reason(&held_back, &pinned).or(deployments.is_empty().then_some(reason)),
            deployments,
            events: verdicts,
        },
        DeliveryOutcome::Duplicate { delivery_id } => not_again(delivery_id, false),
        DeliveryOutcome::Replay { delivery_id } => not_again(delivery_id, true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AppConfig, Config};

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
        assert_eq!(
            names(match_apps(&apps, &e, false)),
            Ok(vec!["web".to_owned()])
        );
        let e = event(None, "demo/web", Some("staging"));
        assert_eq!(
            names(match_apps(&apps, &e, false)),
            Ok(vec!["web-staging".to_owned()])
        );
        // `localhost` and `127.0.0.1` name the same registry.
        let e = event(Some("localhost:5000"), "demo/web", Some("main"));
        assert_eq!(
            names(match_apps(&apps, &e, false)),
            Ok(vec!["web".to_owned()])
        );
    }

    #[test]
    fn an_event_that_deploys_nothing_says_why() {
        let apps = apps();
        let other_tag = event(None, "demo/web", Some("v9"));
        assert!(
            match_apps(&apps, &other_tag, false)
                .unwrap_err()
                .contains("tag `v9`")
        );
        let other_repo = event(None, "demo/api", Some("main"));
        assert!(
            match_apps(&apps, &other_repo, false)
                .unwrap_err()
                .contains("demo/api")
        );
        let other_host = event(Some("ghcr.io"), "demo/web", Some("main"));
        assert!(match_apps(&apps, &other_host, false).is_err());
        let mut ignored = event(None, "demo/web", Some("main"));
        ignored.ignore = Some("not a push".into());
        assert_eq!(
            match_apps(&apps, &ignored, false).unwrap_err(),
            "not a push"
        );
    }

    #[test]
    fn tags_match_ignoring_case_only_for_senders_that_fold_it() {
        let apps = apps();
        let lowered = event(None, "demo/web", Some("MAIN"));
        assert!(match_apps(&apps, &lowered, false).is_err());
        assert_eq!(
            names(match_apps(&apps, &lowered, true)),
            Ok(vec!["web".to_owned()])
        );
    }

    #[test]
    fn a_form_carries_its_json_in_the_payload_field() {
        let form = serde_urlencoded::to_string([("payload", r#"{"a":"b c&d"}"#)]).unwrap();
        assert_eq!(
            form_payload(form.as_bytes()).as_deref(),
            Some(br#"{"a":"b c&d"}"#.as_slice())
        );
        assert_eq!(form_payload(b"other=1"), None);
        assert_eq!(form_payload(b"%zz"), None);
    }

    #[test]
    fn retries_share_a_key_and_events_without_ids_have_none() {
        let a = event(None, "demo/web", Some("main"));
        assert_eq!(
            event_key(None, std::slice::from_ref(&a)).as_deref(),
            Some("e")
        );
        let mut b = a.clone();
        b.event_id = Some("f".into());
        assert_eq!(event_key(None, &[a.clone(), b]).as_deref(), Some("e,f"));
        let mut anonymous = a;
        anonymous.event_id = None;
        assert_eq!(event_key(None, &[anonymous.clone()]), None);
        assert_eq!(event_key(None, &[]), None);
        assert_eq!(event_key(Some("d"), &[anonymous]).as_deref(), Some("d"));
    }
}
