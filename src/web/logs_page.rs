//! The app's log page (`GET /apps/{app}/logs`) and its live stream (`GET
//! /apps/{app}/logs/events`, server-sent events, one `line` event per log line). Both need
//! a signed-in session: an app's output is not for everyone who can see its status. The
//! page shows the last lines without any script; the script follows the log, with a pause
//! button, and keeps at most a few thousand lines in the page.

use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::StreamExt;

use super::error::PageError;
use super::logs::LogsQuery;
use super::session::Viewer;
use super::{AppState, WebError};

#[derive(Template, WebTemplate)]
#[template(path = "logs.html")]
pub(super) struct LogsPage {
    app: String,
    services: Vec<String>,
    targets: Vec<String>,
    /// Which log (service, target, deployment), for the live stream's URL.
    query: String,
    lines: Vec<serde_json::Value>,
    error: Option<String>,
    live: bool,
    viewer: Viewer,
}

fn sign_in_first(app: &str) -> Response {
    let next = format!("/apps/{app}/logs");
    let q = serde_urlencoded::to_string([("next", next.as_str())]).unwrap_or_default();
    Redirect::to(&format!("/login?{q}")).into_response()
}

/// `GET /apps/{app}/logs?service=&target=&since=&tail=`: the last lines, read once.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(app): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    if !viewer.signed_in() {
        return Ok(sign_in_first(&app));
    }
    let config = s.current();
    let a = config
        .apps
        .iter()
        .find(|a| a.name == app)
        .ok_or_else(|| WebError::NotFound(format!("app {app}")))?;
    let (services, targets) = (
        a.service_names().into_iter().map(str::to_owned).collect(),
        a.targets.clone(),
    );
    let q: LogsQuery = super::api_actions::query(raw)?;
    let scope = q.scope();
    let (lines, error) = match q.once().choose(&s, &app).await {
        Ok(chosen) => match chosen.lines().await {
            Ok(stream) => (stream.collect::<Vec<_>>().await, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        },
        Err(e @ (WebError::NotFound(_) | WebError::Busy(_))) => (Vec::new(), Some(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    Ok(LogsPage {
        app,
        services,
        targets,
        query: scope,
        lines,
        error,
        live: false,
        viewer,
    }
    .into_response())
}

/// `GET /apps/{app}/logs/events?…`: the log followed, as server-sent events.
pub(super) async fn events(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(app): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    if !viewer.signed_in() {
        return Err(WebError::Unauthorized.into());
    }
    let q: LogsQuery = super::api_actions::query(raw)?;
    let lines = q.followed().choose(&s, &app).await?.lines().await?;
    let events = lines.map(|v| {
        let name = if v.get("error").is_some() { "end" } else { "line" };
        Ok::<_, Infallible>(Event::default().event(name).data(v.to_string()))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}
