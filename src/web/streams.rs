//! The live parts of the overview and of a deployment's page, as server-sent events: the
//! same askama fragments the pages include, rendered again after each change.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::error::PageError;
use super::live::{self, Frame};
use super::pages::Fmt;
use super::views::{self, AppView, DeploymentView};
use super::{AppState, WebError};
use crate::store::Deployment;

/// The overview's live part: every app and the recent deployments.
#[derive(Template)]
#[template(path = "index_live.html")]
pub(super) struct IndexLive {
    pub apps: Vec<AppView>,
    pub recent: Vec<Deployment>,
    pub engine_error: Option<String>,
}
impl Fmt for IndexLive {}

/// A deployment's live part: its facts, the step timeline, its errors and logs.
#[derive(Template)]
#[template(path = "deployment_live.html")]
pub(super) struct DeploymentLive {
    pub d: DeploymentView,
    pub rows: Vec<super::timeline::TimelineRow>,
    /// Its cancel button needs the viewer's form token.
    pub viewer: super::session::Viewer,
}
impl Fmt for DeploymentLive {}

pub(super) async fn index_live(s: &AppState) -> Result<IndexLive, WebError> {
    let config = s.current();
    let snapshot = views::containers_of_all(s, &config.apps).await;
    let engine_error = views::unreachable_line(&snapshot);
    let mut apps = Vec::new();
    for app in &config.apps {
        apps.push(views::app_view(s, app, &snapshot, 5).await?);
    }
    let recent = s.store.recent_deployments(25).await?;
    Ok(IndexLive {
        apps,
        recent,
        engine_error,
    })
}

fn busy() -> PageError {
    WebError::Unavailable.into()
}

/// `GET /events`: the overview, again after every change of any deployment.
pub(super) async fn index_events(State(s): State<AppState>) -> Result<Response, PageError> {
    let slot = s.pages.live.slot().ok_or_else(busy)?;
    let hub = s.pages.live.clone();
    let render = move || {
        let s = s.clone();
        async move {
            let html = match index_live(&s).await.map(|p| p.render()) {
                Ok(Ok(html)) => html,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "overview fragment did not render");
                    return None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "overview fragment not read");
                    return None;
                }
            };
            Some(Frame { html, last: false })
        }
    };
    Ok(live::stream(&hub, slot, "overview", |_| true, render)
        .await
        .into_response())
}

/// `GET /deployments/{id}/events`: the deployment's timeline, again after each of its
/// changes; the last event (`final`) is sent once it has ended, and the stream closes.
pub(super) async fn deployment_events(
    State(s): State<AppState>,
    axum::Extension(viewer): axum::Extension<super::session::Viewer>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = Uuid::parse_str(&id).map_err(|_| WebError::NotFound(format!("deployment {id}")))?;
    s.store
        .deployment(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("deployment {id}")))?;
    let slot = s.pages.live.slot().ok_or_else(busy)?;
    let hub = s.pages.live.clone();
    let render = move || {
        let (s, viewer) = (s.clone(), viewer.clone());
        async move {
            let d = views::deployment_view(&s, id).await.ok()?;
            let last = d.deployment.state.is_final();
            let rows = super::timeline::rows(&d.deployment, &d.steps, chrono::Utc::now());
            let html = DeploymentLive { d, rows, viewer }.render().ok()?;
            Some(Frame { html, last })
        }
    };
    Ok(
        live::stream(&hub, slot, "timeline", move |c| c == id, render)
            .await
            .into_response(),
    )
}

pub(super) async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("../../templates/pier.js"),
    )
}
