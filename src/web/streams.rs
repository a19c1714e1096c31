//! The live parts of the overview and of a deployment's page, as server-sent events: the
//! same askama fragments the pages include, rendered again after each change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use askama::Template;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::error::PageError;
use super::live::{self, Frame};
use super::template::Fmt;
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

/// An app page's live part: its row per engine, and where a rollout stands on each.
#[derive(Template)]
#[template(path = "app_engines.html")]
pub(super) struct AppLive {
    pub app: AppView,
}
impl Fmt for AppLive {}

/// Deployments the app stream renders for: enough to find the running one, which is
/// at most behind one queued (a newer queued one supersedes older ones).
const APP_LIVE_HISTORY: i64 = 5;

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
    Ok(
        live::stream(&hub, slot, "overview", |_| std::future::ready(true), render)
            .await
            .into_response(),
    )
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
    Ok(live::stream(
        &hub,
        slot,
        "timeline",
        move |c| std::future::ready(c == id),
        render,
    )
    .await
    .into_response())
}

/// `GET /apps/{app}/events`: the app's engine table, again after each change of one of its
/// deployments (a step journaled on any engine), so a rollout's progress on each engine
/// shows up as the workers write it. It never sends `final`: the next push shows up too.
pub(super) async fn app_events(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    views::find_app(&s, &name)?;
    let slot = s.pages.live.slot().ok_or_else(busy)?;
    let hub = s.pages.live.clone();
    let filter = OfApp::new(s.store.clone(), name.clone());
    let wanted = move |c| {
        let filter = filter.clone();
        async move { filter.concerns(c).await }
    };
    let render = move || {
        let (s, name) = (s.clone(), name.clone());
        async move {
            let app = match views::one_app(&s, &name, APP_LIVE_HISTORY).await {
                Ok(app) => app,
                Err(e) => {
                    tracing::warn!(error = %e, "app fragment not read");
                    return None;
                }
            };
            let html = AppLive { app }.render().ok()?;
            Some(Frame { html, last: false })
        }
    };
    Ok(live::stream(&hub, slot, "engines", wanted, render)
        .await
        .into_response())
}

/// Whether a changed deployment is one app's. The notification names only the deployment,
/// so each new id is looked up once and remembered: a rollout journals dozens of steps,
/// and pages of other apps must not cost this stream a render (nor a query) each.
#[derive(Clone)]
struct OfApp {
    store: crate::store::Store,
    app: String,
    seen: Arc<Mutex<HashMap<Uuid, bool>>>,
}

/// Deployment ids an app stream remembers before it forgets them all (bounds its memory).
const OF_APP_MEMO: usize = 1024;

impl OfApp {
    fn new(store: crate::store::Store, app: String) -> Self {
        Self {
            store,
            app,
            seen: Default::default(),
        }
    }

    async fn concerns(&self, id: Uuid) -> bool {
        if let Some(known) = self.memo().get(&id) {
            return *known;
        }
        let mine = match self.store.deployment(id).await {
            Ok(Some(d)) => d.app == self.app,
            // Gone (retention removed it): nothing of it is shown.
            Ok(None) => false,
            // Not known now: render, and let that render say what it can.
            Err(_) => return true,
        };
        let mut seen = self.memo();
        if seen.len() >= OF_APP_MEMO {
            seen.clear();
        }
        seen.insert(id, mine);
        mine
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, bool>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
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
