//! An app's logs, from its engine, for the API (`GET /api/apps/{app}/logs`, one JSON line
//! per log line, which `pier logs` reads) and for the log views of the pages (server-sent
//! events, `logs_page.rs`). Which log: on an engine target, the container of the serving
//! generation there (or of the deployment asked) of the service asked; on a Swarm target,
//! the service's, every task's, through the manager.
//!
//! Every line is masked as a failed candidate's logs are (the app's secret values, also
//! base64-encoded) before it leaves Pier, then cut at [`MAX_LINE`] bytes. Bounded: at most
//! [`MAX_TAIL`] lines read back, at most [`MAX_FOLLOWERS`] logs followed at once, and a
//! slow reader slows the read from the engine instead of making Pier buffer (see
//! `engine/logs.rs`). A followed log sends a keep-alive after [`KEEP_ALIVE`] without a
//! line, so that a reader (and any proxy between) can tell a quiet app from a dead link,
//! and ends when Pier shuts down. The lines the engine sent at once go out in one write
//! (one chunk of the answer), so that a busy log costs Pier per read, not per line.

use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde::Deserialize;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{AppState, WebError, views};
use crate::config::{AppConfig, TargetKind};
use crate::engine::{
    ContainerFacts, EngineError, EngineView, LABEL_SERVICE, LogLine, LogQuery, LogSource,
};
use crate::pipeline::redact::Mask;

pub(crate) use crate::engine::MAX_LINE;
/// Lines of a log read back at most, per request.
pub(crate) const MAX_TAIL: usize = 5000;
/// Lines read back when the request names no `tail` and no `since`.
pub(crate) const DEFAULT_TAIL: usize = 100;
/// Logs followed at once, all readers together (API and pages); one more is a 503 with
/// the reason.
pub(crate) const MAX_FOLLOWERS: usize = 16;
/// A followed log with no line for this long sends a keep-alive.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A `since` this far back at most.
const MAX_SINCE: chrono::Duration = chrono::Duration::days(366);

/// The query of a log: `service`, `target`, `deployment` name it; `since`, `tail` and
/// `follow` say what of it to read. Empty values count as not given (a page's form sends
/// its empty fields).
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    pub service: Option<String>,
    pub target: Option<String>,
    /// `10m`, `2h` (that long ago) or an RFC 3339 time.
    pub since: Option<String>,
    pub tail: Option<String>,
    follow: Option<bool>,
    pub deployment: Option<String>,
}

/// A field of the query, unless empty.
pub(super) fn given(field: &Option<String>) -> Option<&str> {
    field.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// What a query names, found on its engine: the source there, what to read of it, what
/// to mask, and a follower's slot while it is followed.
pub(super) struct Chosen {
    target: String,
    view: EngineView,
    source: LogSource,
    query: LogQuery,
    mask: Mask,
    follower: Option<OwnedSemaphorePermit>,
    shutdown: CancellationToken,
}

/// A log as Pier sends it.
#[derive(Debug)]
pub(super) enum Item {
    /// Lines the engine sent at once, in order, masked and cut; never empty.
    Lines(Vec<LogLine>),
    /// No line for [`KEEP_ALIVE`]: a blank line of the API, a comment of an event stream.
    Idle,
    /// The log ended before its end (the container went away, the engine failed, Pier
    /// shuts down): why, in words a page may show. Always the last item.
    Ended(String),
}

impl LogsQuery {
    /// The same query as a query string, without `follow` (the page's live view asks
    /// for that itself).
    pub(super) fn to_query_string(&self) -> String {
        let pairs: Vec<(&str, &str)> = [
            ("service", &self.service),
            ("target", &self.target),
            ("deployment", &self.deployment),
            ("since", &self.since),
            ("tail", &self.tail),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, given(v)?)))
        .collect();
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }

    /// The source this query names, with a follower's slot when it follows. 404 names
    /// what is unknown (app, target, service, deployment, container); 400 what is
    /// malformed; 503 an engine that cannot be asked, or every follower's slot taken.
    pub(super) async fn choose(&self, s: &AppState, app: &str) -> Result<Chosen, WebError> {
        let app = views::find_app(s, app)?;
        let query = self.log_query()?;
        let target = self.target(&app)?;
        let service = self.service(&app)?;
        let (view, kind) = s
            .targets
            .view(&target)
            .ok_or_else(|| WebError::NotFound(format!("target `{target}`")))?;
        let source = match kind {
            TargetKind::Swarm => self.swarm_service(view, &app, &target).await?,
            TargetKind::Engine => {
                let c = self.container(s, view, &app, &target, &service).await?;
                LogSource::Container(c.id)
            }
        };
        let follower = match query.follow {
            true => Some(
                s.pages
                    .log_followers
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| {
                        WebError::Busy(format!(
                            "{MAX_FOLLOWERS} logs are followed already; try again later"
                        ))
                    })?,
            ),
            false => None,
        };
        Ok(Chosen {
            target,
            view: view.clone(),
            source,
            query,
            // `age:` secrets are read again now: the config holds references only.
            mask: {
                let age = app.age_values(s.config.server.age_identity.as_ref());
                let loaded = app.secret_values().into_iter();
                Mask::new(loaded.chain(age.iter().map(|v| v.expose())))
            },
            follower,
            shutdown: s.pages.shutdown.clone(),
        })
    }

    fn log_query(&self) -> Result<LogQuery, WebError> {
        let since = given(&self.since).map(since).transpose()?;
        let tail = match given(&self.tail) {
            None if since.is_some() => MAX_TAIL,
            None => DEFAULT_TAIL,
            Some(t) => t
                .parse::<usize>()
                .ok()
                .filter(|t| *t <= MAX_TAIL)
                .ok_or_else(|| {
                    WebError::BadRequest(format!(
                        "tail must be a number of lines from 0 to {MAX_TAIL}, not `{}`",
                        t.escape_debug()
                    ))
                })?,
        };
        Ok(LogQuery {
            since,
            tail,
            follow: self.follow.unwrap_or(false),
        })
    }

    pub(super) fn follows(mut self) -> Self {
        self.follow = Some(true);
        self
    }

    fn target(&self, app: &AppConfig) -> Result<String, WebError> {
        match given(&self.target) {
            None => Ok(app.targets[0].clone()),
            Some(t) if app.targets.iter().any(|a| a == t) => Ok(t.to_owned()),
            Some(t) => Err(WebError::NotFound(format!(
                "target `{t}` of {} (it runs on {})",
                app.name,
                app.targets.join(", ")
            ))),
        }
    }

    fn service(&self, app: &AppConfig) -> Result<String, WebError> {
        let names = app.service_names();
        match given(&self.service) {
            None => Ok(names[0].to_owned()),
            Some(s) if names.contains(&s) => Ok(s.to_owned()),
            Some(s) => Err(WebError::NotFound(format!(
                "service `{s}` of {} (its services: {})",
                app.name,
                names.join(", ")
            ))),
        }
    }

    /// On a Swarm target the log is the service's (Swarm's tasks are not Pier's
    /// containers, and they are not a deployment's).
    async fn swarm_service(
        &self,
        view: &EngineView,
        app: &AppConfig,
        target: &str,
    ) -> Result<LogSource, WebError> {
        if given(&self.deployment).is_some() {
            return Err(WebError::BadRequest(format!(
                "target {target} is a swarm: its log is the service's, of every task, not a \
                 deployment's; leave out `deployment`"
            )));
        }
        let found = view
            .has_service(&app.name)
            .await
            .map_err(|e| engine_busy(target, &e))?;
        match found {
            true => Ok(LogSource::Service(app.name.to_string())),
            false => Err(WebError::NotFound(format!(
                "service {} on swarm {target} (nothing deployed there yet)",
                app.name
            ))),
        }
    }

    /// The container of `service` of the serving generation on `target` (or of the
    /// deployment asked): for the primary service, the one the generation's `switch`
    /// journaled; else the running one, if there are several.
    async fn container(
        &self,
        s: &AppState,
        view: &EngineView,
        app: &AppConfig,
        target: &str,
        service: &str,
    ) -> Result<ContainerFacts, WebError> {
        let (deployment, serving) =
            match given(&self.deployment) {
                Some(d) => {
                    let id = Uuid::parse_str(d).map_err(|_| {
                        WebError::BadRequest(format!(
                            "deployment must be a deployment's id, not `{}`",
                            d.escape_debug()
                        ))
                    })?;
                    (id, None)
                }
                None => {
                    let g = s.store.generation(&app.name, target).await?.ok_or_else(|| {
                    WebError::NotFound(format!(
                        "a container of {} serving on {target} (nothing deployed there yet)",
                        app.name
                    ))
                })?;
                    (g.deployment_id, Some(g.container_id))
                }
            };
        let found = view
            .managed_containers(Some(&app.name), Some(&deployment.to_string()))
            .await
            .map_err(|e| engine_busy(target, &e))?;
        // A primary made before services existed has no service label.
        let primary = service == app.contained.service;
        let of_service = |c: &ContainerFacts| match c.labels.get(LABEL_SERVICE) {
            Some(s) => s == service,
            None => primary,
        };
        found
            .into_iter()
            .filter(of_service)
            .max_by_key(|c| (serving.as_ref() == Some(&c.id) && primary, c.running))
            .ok_or_else(|| {
                WebError::NotFound(format!(
                    "a container of {} (service {service}) of deployment {deployment} on \
                     {target} (gone, and its log with it)",
                    app.name
                ))
            })
    }
}

/// An engine that could not be asked: 503 with its reason, no file path in it.
fn engine_busy(target: &str, e: &EngineError) -> WebError {
    WebError::Busy(format!(
        "engine {target}: {}",
        super::engines::public_reason(&crate::error::error_chain(e))
    ))
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
                "since must be a duration (10m, 2h; a year at most) or an RFC 3339 time \
                 (2026-12-05T01:02:03Z), not `{}`",
                text.escape_debug()
            ))
        })?;
    Ok(Utc::now() - ago)
}

/// What a log stream holds while it is read: the engine's lines, and what ends it early.
struct Reading<S> {
    lines: S,
    /// Rings [`KEEP_ALIVE`] after the last item of a followed log; moved on at each item
    /// (one timer per log, not one per item).
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    shutdown: CancellationToken,
    _follower: Option<OwnedSemaphorePermit>,
    ended: bool,
}

impl Chosen {
    /// The log, masked and cut line by line; lines the engine sent from before `since`
    /// (it reads whole seconds) are left out.
    pub(super) async fn read(self) -> Result<BoxStream<'static, Item>, WebError> {
        let since = self.query.since;
        let batches = self
            .view
            .logs(&self.source, &self.query)
            .await
            .map_err(|e| engine_busy(&self.target, &e))?;
        let mask = self.mask;
        let lines = batches
            .filter_map(move |batch| {
                futures_util::future::ready(match batch {
                    Ok(mut lines) => {
                        // Kept unless the engine's time of it is before `since`.
                        lines.retain(|l| since.is_none_or(|s| l.at.is_none_or(|at| at >= s)));
                        for l in &mut lines {
                            mask.apply_to(&mut l.text);
                            l.cut_to_max();
                        }
                        (!lines.is_empty()).then_some(Item::Lines(lines))
                    }
                    Err(e) => Some(Item::Ended(super::engines::public_reason(
                        &crate::error::error_chain(&e),
                    ))),
                })
            })
            .boxed();
        let reading = Reading {
            lines,
            idle: self
                .query
                .follow
                .then(|| Box::pin(tokio::time::sleep(KEEP_ALIVE))),
            shutdown: self.shutdown,
            _follower: self.follower,
            ended: false,
        };
        Ok(futures_util::stream::unfold(reading, |mut r| async move {
            if r.ended {
                return None;
            }
            let item = tokio::select! {
                item = r.lines.next() => item?,
                () = rings(&mut r.idle) => Item::Idle,
                () = r.shutdown.cancelled() => Item::Ended("Pier is shutting down".into()),
            };
            if let Some(idle) = r.idle.as_mut() {
                idle.as_mut()
                    .reset(tokio::time::Instant::now() + KEEP_ALIVE);
            }
            r.ended = matches!(item, Item::Ended(_));
            Some((item, r))
        })
        .boxed())
    }
}

/// When the keep-alive timer rings; never, for a log read once.
async fn rings(idle: &mut Option<Pin<Box<tokio::time::Sleep>>>) {
    match idle {
        Some(idle) => idle.as_mut().await,
        None => std::future::pending().await,
    }
}

/// `GET /api/apps/{app}/logs?service=&target=&deployment=&since=&tail=&follow=` (admin
/// bearer token): one JSON object per line, newline-delimited
/// (`{"stream":"stdout","at":"…","text":"…"}`); a log that ends early ends with
/// `{"error":"…"}`. With `follow=true` the answer goes on as the app writes, with a blank
/// line after every [`KEEP_ALIVE`] of quiet.
pub(super) async fn api(
    State(s): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    super::bearer_admin(&s.current(), &headers)?;
    let q: LogsQuery = super::api_actions::query(raw)?;
    let items = q.choose(&s, &app).await?.read().await?;
    let body = items.map(|item| Ok::<_, std::convert::Infallible>(ndjson(item)));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// One chunk of the API's answer: a JSON object and a newline per line (a blank line for
/// [`Item::Idle`]), every line of a batch in the one chunk.
fn ndjson(item: Item) -> Bytes {
    let mut b = Vec::new();
    match item {
        Item::Lines(lines) => {
            for l in &lines {
                // Writing to a Vec fails only for a value that cannot be JSON; a line can.
                let _ = serde_json::to_writer(&mut b, l);
                b.push(b'\n');
            }
        }
        Item::Idle => b.push(b'\n'),
        Item::Ended(why) => {
            let _ = serde_json::to_writer(&mut b, &serde_json::json!({ "error": why }));
            b.push(b'\n');
        }
    }
    Bytes::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &str) -> LogsQuery {
        serde_urlencoded::from_str(pairs).unwrap()
    }

    #[test]
    fn tail_defaults_to_a_hundred_lines_or_all_allowed_since_a_time() {
        assert_eq!(q("").log_query().unwrap().tail, DEFAULT_TAIL);
        assert_eq!(q("tail=").log_query().unwrap().tail, DEFAULT_TAIL);
        assert_eq!(q("since=10m").log_query().unwrap().tail, MAX_TAIL);
        assert_eq!(q("since=10m&tail=3").log_query().unwrap().tail, 3);
        assert_eq!(q("tail=0").log_query().unwrap().tail, 0);
    }

    #[test]
    fn a_bad_tail_or_since_is_refused_with_the_reason() {
        for bad in [
            "tail=5001",
            "tail=-1",
            "tail=many",
            "since=yesterday",
            "since=400d",
        ] {
            match q(bad).log_query() {
                Err(WebError::BadRequest(why)) => assert!(why.contains("not `"), "{why}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn since_is_a_duration_ago_or_a_time() {
        let ago = since("10m").unwrap();
        let expected = Utc::now() - chrono::Duration::minutes(10);
        assert!((ago - expected).num_seconds().abs() < 5);
        let at = since("2026-12-05T01:02:03.5Z").unwrap();
        assert_eq!(at.timestamp_subsec_millis(), 500);
    }

    #[test]
    fn a_batch_of_lines_is_one_chunk_of_json_lines() {
        let line = |text: &str| LogLine {
            stream: crate::engine::LogStream::Stderr,
            at: None,
            text: text.into(),
            cut: false,
        };
        let chunk = ndjson(Item::Lines(vec![line("a"), line("b")]));
        assert_eq!(
            std::str::from_utf8(&chunk).unwrap(),
            "{\"stream\":\"stderr\",\"at\":null,\"text\":\"a\"}\n\
             {\"stream\":\"stderr\",\"at\":null,\"text\":\"b\"}\n"
        );
        assert_eq!(&ndjson(Item::Idle)[..], b"\n");
        assert_eq!(
            &ndjson(Item::Ended("gone".into()))[..],
            b"{\"error\":\"gone\"}\n"
        );
    }

    #[test]
    fn the_query_string_keeps_what_names_the_log_and_drops_empty_fields() {
        let text = q("service=worker&target=&since=10m&follow=true").to_query_string();
        assert_eq!(text, "service=worker&since=10m");
    }
}
