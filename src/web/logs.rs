//! An app's logs, from its engine, for the API (`GET /api/apps/{app}/logs`, one JSON line
//! per log line, which `pier logs` reads) and for the app's log page (server-sent events).
//! Which container: the serving generation's on the target asked (or a deployment's, with
//! `deployment=`), of the service asked; on a Swarm target, the service's tasks.
//!
//! Every line is masked as a failed candidate's logs are (the app's secret values, also
//! base64-encoded) before it leaves Pier. Bounded: `tail` at most [`MAX_TAIL`] lines, a line
//! at most [`MAX_LINE`] bytes, at most [`MAX_FOLLOWERS`] logs followed at once, and a slow
//! reader slows the read from the engine instead of making Pier buffer.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use tokio::sync::OwnedSemaphorePermit;
use uuid::Uuid;

use super::{AppState, WebError};
use crate::config::{AppConfig, TargetKind};
use crate::engine::{
    ContainerFacts, EngineView, LABEL_SERVICE, LogLine, LogQuery, LogSource, MAX_LINE,
};

/// Lines of a log read at most, and without `tail`.
pub(crate) const MAX_TAIL: usize = 5000;
const DEFAULT_TAIL: usize = 100;
/// Logs followed at once, all readers together; one more is a 503 with the reason.
pub(crate) const MAX_FOLLOWERS: usize = 16;
/// A `since` this far back at most (the engine keeps what its log driver keeps anyway).
const MAX_SINCE: chrono::Duration = chrono::Duration::days(366);

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    service: Option<String>,
    target: Option<String>,
    /// `10m`, `2h` (that long ago) or an RFC 3339 time.
    since: Option<String>,
    tail: Option<usize>,
    follow: Option<bool>,
    deployment: Option<String>,
}

/// What was asked, found on the engine: the source, its engine, and what to mask.
pub(super) struct Chosen {
    pub view: EngineView,
    pub source: LogSource,
    pub query: LogQuery,
    pub secrets: Vec<String>,
    /// Held while a followed log is read.
    _follower: Option<OwnedSemaphorePermit>,
}

impl LogsQuery {
    /// Which log it names (service, target, deployment), as a query string: what the
    /// page's live stream asks for, beside its own `tail` and `since`.
    pub(super) fn scope(&self) -> String {
        let pairs: Vec<(&str, &str)> = [
            ("service", &self.service),
            ("target", &self.target),
            ("deployment", &self.deployment),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_deref()?)))
        .collect();
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }

    /// The same query, read once (the page's first lines).
    pub(super) fn once(mut self) -> Self {
        self.follow = Some(false);
        self
    }

    /// The same query, followed (the page's live stream).
    pub(super) fn followed(mut self) -> Self {
        self.follow = Some(true);
        self
    }

    /// The source this query names, with a follower's slot when it follows.
    pub(super) async fn choose(self, s: &AppState, app: &str) -> Result<Chosen, WebError> {
        let config = s.current();
        let app = config
            .apps
            .iter()
            .find(|a| a.name == app)
            .ok_or_else(|| WebError::NotFound(format!("app {app}")))?;
        let query = self.log_query()?;
        let target = self.target.clone().unwrap_or_else(|| app.targets[0].clone());
        if !app.targets.contains(&target) {
            return Err(WebError::BadRequest(format!(
                "{} does not run on target {target} (it runs on {})",
                app.name,
                app.targets.join(", ")
            )));
        }
        let service = self.service(app)?;
        let (view, kind) = s
            .targets
            .view(&target)
            .ok_or_else(|| WebError::NotFound(format!("target {target}")))?;
        let source = match kind {
            TargetKind::Swarm => LogSource::Service(app.name.to_string()),
            TargetKind::Engine => {
                let c = self.container(s, view, app, &target, &service).await?;
                LogSource::Container(c.id)
            }
        };
        let follower = match query.follow {
            true => Some(s.pages.log_followers.clone().try_acquire_owned().map_err(|_| {
                WebError::Busy(format!(
                    "{MAX_FOLLOWERS} logs are followed already; try again later"
                ))
            })?),
            false => None,
        };
        Ok(Chosen {
            view: view.clone(),
            source,
            query,
            secrets: app.secret_values().into_iter().map(str::to_owned).collect(),
            _follower: follower,
        })
    }

    fn log_query(&self) -> Result<LogQuery, WebError> {
        let tail = self.tail.unwrap_or(DEFAULT_TAIL);
        if tail > MAX_TAIL {
            return Err(WebError::BadRequest(format!(
                "tail is at most {MAX_TAIL} lines"
            )));
        }
        let since = self.since.as_deref().map(since).transpose()?;
        Ok(LogQuery {
            since,
            tail,
            follow: self.follow.unwrap_or(false),
        })
    }

    fn service(&self, app: &AppConfig) -> Result<String, WebError> {
        let names = app.service_names();
        match self.service.as_deref() {
            None => Ok(names[0].to_owned()),
            Some(s) if names.contains(&s) => Ok(s.to_owned()),
            Some(s) => Err(WebError::BadRequest(format!(
                "{} has no service {s} (its services: {})",
                app.name,
                names.join(", ")
            ))),
        }
    }

    /// The serving generation's container of `service` (or `deployment`'s), newest first.
    async fn container(
        &self,
        s: &AppState,
        view: &EngineView,
        app: &AppConfig,
        target: &str,
        service: &str,
    ) -> Result<ContainerFacts, WebError> {
        let deployment = match self.deployment.as_deref() {
            Some(d) => Uuid::parse_str(d)
                .map_err(|_| WebError::BadRequest("deployment must be a deployment id".into()))?,
            None => s
                .store
                .generation(&app.name, target)
                .await?
                .map(|g| g.deployment_id)
                .ok_or_else(|| {
                    WebError::NotFound(format!("nothing of {} serves on {target}", app.name))
                })?,
        };
        let unreachable = |e: crate::engine::EngineError| {
            WebError::Busy(format!(
                "engine {target}: {}",
                super::engines::public_reason(&crate::error::error_chain(&e))
            ))
        };
        let found = view
            .managed_containers(Some(&app.name), Some(&deployment.to_string()))
            .await
            .map_err(unreachable)?;
        found
            .into_iter()
            .filter(|c| c.labels.get(LABEL_SERVICE).map(String::as_str) == Some(service))
            .max_by_key(|c| c.running)
            .ok_or_else(|| {
                WebError::NotFound(format!(
                    "no container of {} (service {service}) of deployment {deployment} on {target}: \
                     it is gone, and its log with it",
                    app.name
                ))
            })
    }
}

/// `10m` (that long ago) or an RFC 3339 time.
fn since(text: &str) -> Result<DateTime<Utc>, WebError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let ago = humantime::parse_duration(text)
        .ok()
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .filter(|d| *d <= MAX_SINCE)
        .ok_or_else(|| {
            WebError::BadRequest(format!(
                "since must be a duration (10m, 2h; at most a year) or an RFC 3339 time, not `{}`",
                text.escape_debug()
            ))
        })?;
    Ok(Utc::now() - ago)
}

impl Chosen {
    /// The masked lines, each a JSON object; a failure mid-way is a last `{"error": …}`.
    pub(super) async fn lines(
        self,
    ) -> Result<impl Stream<Item = serde_json::Value> + Send + 'static, WebError> {
        let source = self.source.clone();
        let lines = self
            .view
            .logs(&source, &self.query)
            .await
            .map_err(|e| WebError::Busy(crate::error::error_chain(&e)))?;
        let secrets = Arc::new(self.secrets);
        let follower = self._follower;
        Ok(lines
            .map(move |line| {
                let _held = &follower;
                match line {
                    Ok(l) => serde_json::to_value(masked(l, &secrets)).unwrap_or_default(),
                    Err(e) => serde_json::json!({ "error": crate::error::error_chain(&e) }),
                }
            })
            .scan(false, |failed, v| {
                // Nothing after the first error: it ends the log.
                if *failed {
                    return futures_util::future::ready(None);
                }
                *failed = v.get("error").is_some();
                futures_util::future::ready(Some(v))
            }))
    }
}

fn masked(mut l: LogLine, secrets: &[String]) -> LogLine {
    let masked = crate::pipeline::redact::redact(&l.text, secrets.iter().map(String::as_str));
    l.text = masked;
    if l.text.len() > MAX_LINE + 32 {
        l.text.truncate(MAX_LINE);
    }
    l
}

/// `GET /api/apps/{app}/logs?service=&target=&since=&tail=&follow=&deployment=`: one JSON
/// object per line (`{"stream":"stdout","at":"…","text":"…"}`), newline-delimited; with
/// `follow=true` the answer goes on as the app writes. Needs an admin's token.
pub(super) async fn api(
    axum::extract::State(s): axum::extract::State<AppState>,
    axum::extract::Path(app): axum::extract::Path<String>,
    headers: axum::http::HeaderMap,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Result<Response, WebError> {
    super::bearer_admin(&s.current(), &headers)?;
    let q: LogsQuery = super::api_actions::query(raw)?;
    let lines = q.choose(&s, &app).await?.lines().await?;
    let body = lines.map(|v| {
        let mut b = serde_json::to_vec(&v).unwrap_or_default();
        b.push(b'\n');
        Ok::<_, std::convert::Infallible>(Bytes::from(b))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}
