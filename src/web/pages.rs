//! Server-rendered pages (askama templates in `templates/`).

use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::delivery_filter::{DeliveriesQuery, Filtered};
use super::error::PageError;
use super::session::Viewer;
use super::template::Fmt;
use super::views::{self, AppView, DeploymentView};
use super::{AppState, WebError};
use crate::store::{Delivery, Deployment};

#[derive(Template, WebTemplate)]
#[template(path = "index.html")]
pub(super) struct IndexPage {
    apps: Vec<AppView>,
    recent: Vec<Deployment>,
    engine_error: Option<String>,
    live: bool,
    /// A refused config reload's error (the previous config stays in force).
    reload_error: Option<String>,
    viewer: Viewer,
}
impl Fmt for IndexPage {}

#[derive(Template, WebTemplate)]
#[template(path = "app.html")]
pub(super) struct AppPage {
    app: AppView,
    admin_enabled: bool,
    live: bool,
    viewer: Viewer,
    /// `?before=` as given, and the next page's.
    before: Option<Uuid>,
    next: Option<Uuid>,
    /// The pin in force, and the earlier digests a rollback may choose.
    pin: Option<crate::store::Pin>,
    choices: Vec<crate::store::SucceededDigest>,
    /// The freeze in force.
    freeze: Option<crate::store::Freeze>,
    /// A row per container: its resource use now and its sparklines.
    resources: Vec<super::resources::ResourceRow>,
}
impl Fmt for AppPage {}

#[derive(Template, WebTemplate)]
#[template(path = "deployment.html")]
pub(super) struct DeploymentPage {
    d: DeploymentView,
    rows: Vec<super::timeline::TimelineRow>,
    live: bool,
    viewer: Viewer,
    /// `approve` or `reject`, preselected by an approval link (`?decide=`), shown only to
    /// a named admin while the deployment waits for approval.
    decide: Option<&'static str>,
}
impl Fmt for DeploymentPage {}

#[derive(Deserialize, Default)]
pub(super) struct DecideQuery {
    decide: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "deliveries.html")]
pub(super) struct DeliveriesPage {
    deliveries: Vec<DeliveryRow>,
    /// The filters as given, to keep them in the form and the next-page link.
    source: String,
    verdict: String,
    /// `?before=` of the next page, when this one is full.
    next: Option<String>,
    sources: Vec<String>,
    admin_enabled: bool,
    live: bool,
    viewer: Viewer,
}
impl Fmt for DeliveriesPage {}

pub(super) struct DeliveryRow {
    d: Delivery,
    made: Vec<(Uuid, String)>,
    /// `app: rule` for each app an event matched.
    rules: Vec<String>,
}

impl DeliveriesPage {
    fn filter_query(&self) -> String {
        let mut q = Vec::new();
        if !self.source.is_empty() {
            q.push(("source", self.source.as_str()));
        }
        if !self.verdict.is_empty() {
            q.push(("verdict", self.verdict.as_str()));
        }
        serde_urlencoded::to_string(q).unwrap_or_default()
    }
}

fn any_active(ds: &[Deployment]) -> bool {
    ds.iter().any(|d| !d.state.is_final())
}

pub(super) async fn index(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<IndexPage, PageError> {
    let super::streams::IndexLive {
        apps,
        recent,
        engine_error,
    } = super::streams::index_live(&s).await?;
    let live = any_active(&recent);
    Ok(IndexPage {
        apps,
        recent,
        engine_error,
        live,
        reload_error: s.live.as_ref().and_then(|l| l.reload_error()),
        viewer,
    })
}

pub(super) async fn app(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<AppPage, PageError> {
    let before = match q.before.filter(|b| !b.is_empty()) {
        Some(b) => Some(
            Uuid::parse_str(&b)
                .map_err(|_| WebError::BadRequest("before must be a deployment id".into()))?,
        ),
        None => None,
    };
    let (app, next) = views::app_page(&s, &name, before, HISTORY_PAGE).await?;
    let live = any_active(&app.deployments);
    let pin = s.store.pin(&app.name).await?;
    let choices = s
        .store
        .succeeded_digests(&app.name, ROLLBACK_CHOICES)
        .await?;
    let freeze = s.store.freeze_of(&app.name).await?;
    let now = chrono::Utc::now();
    let r = &app.resources;
    let resources = r
        .containers
        .iter()
        .map(|c| super::resources::ResourceRow::of(c, r.interval_seconds, now))
        .collect();
    Ok(AppPage {
        resources,
        app,
        admin_enabled: s.config.server.admin_token.is_some()
            || s.config.server.sign_in.password_hash.is_some()
            || !s.config.admins.is_empty(),
        freeze,
        live,
        viewer,
        before,
        next,
        pin,
        choices,
    })
}

pub(super) async fn deployment(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<DecideQuery>,
) -> Result<DeploymentPage, PageError> {
    let id = Uuid::parse_str(&id).map_err(|_| WebError::NotFound(format!("deployment {id}")))?;
    let d = views::deployment_view(&s, id).await?;
    let live = !d.deployment.state.is_final();
    let rows = super::timeline::rows(&d.deployment, &d.steps, chrono::Utc::now());
    let waits = d.deployment.state == crate::store::DeploymentState::AwaitingApproval;
    let decide = match q.decide.as_deref() {
        Some("approve") => Some("approve"),
        Some("reject") => Some("reject"),
        _ => None,
    }
    .filter(|_| waits && viewer.admin.is_some());
    Ok(DeploymentPage {
        d,
        rows,
        live,
        viewer,
        decide,
    })
}

/// Deployments on one page of an app's history.
const HISTORY_PAGE: i64 = 20;
/// Earlier successful digests offered for a rollback, newest first.
const ROLLBACK_CHOICES: i64 = 10;

#[derive(Deserialize, Default)]
pub(super) struct HistoryQuery {
    before: Option<String>,
}

/// Deliveries listed on one page.
const DELIVERIES_PAGE: i64 = 50;

/// `GET /deliveries?source=&verdict=&before=`: every authentic delivery, newest first, a
/// page at a time, filtered by source and by verdict (`queued`, `ignored`, `duplicate`,
/// `replay`, `redelivery`).
pub(super) async fn deliveries(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<DeliveriesQuery>,
) -> Result<DeliveriesPage, PageError> {
    let Filtered {
        filter,
        limit,
        verdict_text,
    } = q.check(&s.store, DELIVERIES_PAGE).await?;
    let source = filter.source.clone();
    let page = s.store.deliveries_page(&filter, limit).await?;
    let next = (page.len() as i64 == limit)
        .then(|| page.last().map(|d| d.id.to_string()))
        .flatten();
    let ids: Vec<Uuid> = page.iter().map(|d| d.id).collect();
    let created = s.store.deployments_of_deliveries(&ids).await?;
    let deliveries = page
        .into_iter()
        .map(|d| {
            let made = created
                .iter()
                .filter(|(delivery, _, _)| *delivery == d.id)
                .map(|(_, id, app)| (*id, app.clone()))
                .collect();
            let rules = rules_of(&d.events);
            DeliveryRow { d, made, rules }
        })
        .collect();
    let mut sources: Vec<String> = s.current().sources.iter().map(|s| s.name.clone()).collect();
    sources.push(crate::domain::POLLER_SOURCE.to_owned());
    Ok(DeliveriesPage {
        deliveries,
        source: source.unwrap_or_default(),
        verdict: verdict_text.unwrap_or_default(),
        next,
        sources,
        admin_enabled: s.config.server.admin_token.is_some(),
        live: false,
        viewer,
    })
}

/// `app: rule` for every app the stored events matched (older rows have no rules).
fn rules_of(events: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = events
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("rules")?.as_array())
        .flatten()
        .filter_map(|r| {
            Some(format!(
                "{}: {}",
                r.get("app")?.as_str()?,
                r.get("rule")?.as_str()?
            ))
        })
        .collect();
    out.dedup();
    out
}

/// `POST /deliveries/{id}/redeliver` (a signed-in admin's form, or the bearer token): runs
/// intake again on the stored delivery's events, as a new delivery marked as a redelivery
/// of it, and shows the deliveries page at the new row.
pub(super) async fn redeliver(
    State(s): State<AppState>,
    Path(id): Path<String>,
    _admin: super::forms::AdminForm,
) -> Result<Response, PageError> {
    let id = Uuid::parse_str(&id).map_err(|_| WebError::NotFound(format!("delivery {id}")))?;
    let original = s
        .store
        .delivery(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("delivery {id}")))?;
    let accepted = crate::intake::redeliver(&s.current(), &s.store, &original)
        .await
        .map_err(|e| match e {
            crate::intake::IntakeError::Store(e) => WebError::from(e),
            other => WebError::BadRequest(other.to_string()),
        })?;
    Ok(Redirect::to(&format!(
        "/deliveries?verdict=redelivery#{}",
        accepted.delivery_id
    ))
    .into_response())
}

pub(super) async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("../../templates/pier.css"),
    )
}
