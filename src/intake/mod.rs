//! Webhook intake: verify over the raw bytes, normalize into push events, match apps,
//! and store the delivery with its deployments in one transaction. What differs between
//! senders (how they authenticate, what their payload looks like) is each sender's own,
//! in `crate::senders`; intake asks the source's sender and holds the steps in order.

mod auth;
mod matching;
mod record;

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::config::{ArtifactoryAccess, Config, SourceConfig, SourceKind, SourceMode};
pub use crate::senders::malformed;
/// The senders' vocabulary, under the names intake has always given it.
pub use crate::senders::{Incoming, Malformed, Parsed, PushEvent, Rejected, generic, verify};
use crate::senders::{SourceView, form_payload};
use crate::store::{Enqueued, Store, StoreError};
use auth::{check_content_type, signed_bytes};
pub use auth::{check_head, check_signature};
pub use matching::is_digest;
pub(crate) use matching::match_apps;
pub use record::run_intake;

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
    pub(crate) fn queued_any(&self) -> bool {
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

/// Reads an authentic delivery of `kind`. `json` is the JSON text (a form's `payload`).
/// `access` matters to `artifactory` only.
pub fn parse(
    kind: SourceKind,
    mode: SourceMode,
    access: ArtifactoryAccess,
    headers: &HeaderMap,
    json: &[u8],
) -> Result<Parsed, Malformed> {
    let source = SourceView::unauthenticated(mode, access);
    kind.sender().parse(&source, headers, json)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Most events one delivery may carry. Senders send one or a few; hundreds are an error
/// or an attack, refused with 413 rather than stored.
pub(crate) const MAX_EVENTS: usize = 100;

/// The source a request is for, if its head alone lets it in: a configured name, a URL
/// token only where the kind takes one, every credential header once, every token right.
/// Runs before a byte of the body is read.
pub(crate) fn admit<'c>(
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
pub(crate) async fn receive(
    config: &Config,
    store: &Store,
    source: &SourceConfig,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Accepted, IntakeError> {
    let req = Incoming { headers, body };
    let signed = signed_bytes(source, req).map_err(IntakeError::Unauthenticated)?;
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
    let parsed = source
        .sender()
        .parse(&source.view(), headers, &json)
        .map_err(IntakeError::Malformed)?;
    check_parsed(&parsed)?;
    let body_sha256 = source
        .kind
        .body_is_unique()
        .then(|| Sha256::digest(&json).to_vec());
    accept(config, store, source, parsed, body_sha256.as_deref()).await
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
    pub(crate) fn of(source: &'a SourceConfig) -> Self {
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
pub(crate) async fn redeliver(
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

#[cfg(test)]
mod tests {
    use super::matching::{Unmatched, event_key};
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

    fn names(r: Result<Vec<&AppConfig>, Unmatched>) -> Result<Vec<String>, Unmatched> {
        r.map(|apps| apps.iter().map(|a| a.name.to_string()).collect())
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
        let e = match_apps(&apps, &other_tag, false).unwrap_err();
        assert_eq!(
            e,
            Unmatched::NoTagRule {
                tag: "v9".into(),
                repository: "demo/web".into()
            }
        );
        assert_eq!(e.to_string(), "no app follows tag `v9` of demo/web");
        let other_repo = event(None, "demo/api", Some("main"));
        let e = match_apps(&apps, &other_repo, false).unwrap_err();
        assert_eq!(e.to_string(), "no app follows repository demo/api");
        let other_host = event(Some("ghcr.io"), "demo/web", Some("main"));
        assert!(matches!(
            match_apps(&apps, &other_host, false),
            Err(Unmatched::NoRepository { .. })
        ));
        let mut ignored = event(None, "demo/web", Some("main"));
        ignored.ignore = Some("not a push".into());
        let e = match_apps(&apps, &ignored, false).unwrap_err();
        assert_eq!(e.to_string(), "not a push");
        let untagged = event(None, "demo/web", None);
        assert_eq!(
            match_apps(&apps, &untagged, false).unwrap_err(),
            Unmatched::NoTag
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
