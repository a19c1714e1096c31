//! Server-rendered pages (askama templates in `templates/`).

use askama::Template;
use askama_web::WebTemplate;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect};
use uuid::Uuid;

use super::error::PageError;
use super::views::{self, AppView, DeploymentView, short_digest, took, when};
use super::{AppState, WebError, api, check_admin};
use crate::store::{Delivery, Deployment, Enqueued, StepRecord};

/// Template helpers, reachable from every template as methods on the page.
pub(super) trait Fmt {
    fn short(&self, d: &str) -> String {
        short_digest(d)
    }
    fn opt_short(&self, d: &Option<String>) -> String {
        d.as_deref().map(short_digest).unwrap_or_else(|| "—".into())
    }
    fn at(&self, t: &chrono::DateTime<chrono::Utc>) -> String {
        when(t)
    }
    fn took(&self, d: &Deployment) -> String {
        took(d.started_at.as_ref(), d.finished_at.as_ref())
    }
    fn step_took(&self, s: &StepRecord) -> String {
        took(Some(&s.started_at), s.finished_at.as_ref())
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "index.html")]
pub(super) struct IndexPage {
    apps: Vec<AppView>,
    recent: Vec<Deployment>,
    engine_error: Option<String>,
    live: bool,
}
impl Fmt for IndexPage {}

#[derive(Template, WebTemplate)]
#[template(path = "app.html")]
pub(super) struct AppPage {
    app: AppView,
    admin_enabled: bool,
    live: bool,
}
impl Fmt for AppPage {}

#[derive(Template, WebTemplate)]
#[template(path = "deployment.html")]
pub(super) struct DeploymentPage {
    d: DeploymentView,
    live: bool,
}
impl Fmt for DeploymentPage {}

#[derive(Template, WebTemplate)]
#[template(path = "deliveries.html")]
pub(super) struct DeliveriesPage {
    deliveries: Vec<(Delivery, Vec<(Uuid, String)>)>,
    live: bool,
}
impl Fmt for DeliveriesPage {}

fn any_active(ds: &[Deployment]) -> bool {
    ds.iter().any(|d| !d.state.is_final())
}

pub(super) async fn index(State(s): State<AppState>) -> Result<IndexPage, PageError> {
    let (all, engine_error) = views::containers_by_app(&s).await;
    let mut apps = Vec::new();
    for app in &s.config.apps {
        apps.push(views::app_view(&s, app, &all, engine_error.as_deref(), 5).await?);
    }
    let recent = s.store.recent_deployments(25).await?;
    let live = any_active(&recent);
    Ok(IndexPage {
        apps,
        recent,
        engine_error,
        live,
    })
}

pub(super) async fn app(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<AppPage, PageError> {
    let app = views::one_app(&s, &name, 50).await?;
    let live = any_active(&app.deployments);
    Ok(AppPage {
        app,
        admin_enabled: s.config.server.admin_token.is_some(),
        live,
    })
}

pub(super) async fn deployment(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<DeploymentPage, PageError> {
    let id = Uuid::parse_str(&id).map_err(|_| WebError::NotFound(format!("deployment {id}")))?;
    let d = views::deployment_view(&s, id).await?;
    let live = !d.deployment.state.is_final();
    Ok(DeploymentPage { d, live })
}

pub(super) async fn deliveries(State(s): State<AppState>) -> Result<DeliveriesPage, PageError> {
    let recent = s.store.recent_deliveries(100).await?;
    let ids: Vec<Uuid> = recent.iter().map(|d| d.id).collect();
    let created = s.store.deployments_of_deliveries(&ids).await?;
    let deliveries = recent
        .into_iter()
        .map(|d| {
            let mine = created
                .iter()
                .filter(|(delivery, _, _)| *delivery == d.id)
                .map(|(_, id, app)| (*id, app.clone()))
                .collect();
            (d, mine)
        })
        .collect();
    Ok(DeliveriesPage {
        deliveries,
        live: false,
    })
}

/// `POST /apps/{app}/redeploy`: needs the admin token; runs the pipeline again for the
/// app's tag, and sends the browser to the new deployment's timeline. Credentials come
/// first: a bearer header, else the form's `admin_token` field, read on its own; nothing
/// else in the request is looked at before they check out.
pub(super) async fn redeploy(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, PageError> {
    let form_token = if headers.contains_key(header::AUTHORIZATION) {
        None
    } else {
        form_field(&body, "admin_token")
    };
    check_admin(&s.config, &headers, form_token.as_deref())?;
    let app = views::find_app(&s, &name)?;
    let id = match s.store.enqueue(api::manual(app, None)).await? {
        Enqueued::Queued { id, .. } | Enqueued::AlreadyPending { id, .. } => id,
    };
    Ok(Redirect::to(&format!("/deployments/{id}")))
}

/// One field of a form body, whatever else it holds (or fails to hold).
fn form_field(body: &[u8], name: &str) -> Option<String> {
    body.split(|b| *b == b'&')
        .filter_map(|pair| {
            let mut it = pair.splitn(2, |b| *b == b'=');
            let key = it.next()?;
            (key == name.as_bytes()).then(|| it.next().unwrap_or_default())
        })
        .next()
        .and_then(|v| {
            serde_urlencoded::from_bytes::<Vec<(String, String)>>(&[b"v=", v].concat())
                .ok()?
                .pop()
                .map(|(_, v)| v)
        })
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

#[cfg(test)]
mod tests {
    use super::form_field;

    #[test]
    fn one_form_field_is_read_whatever_the_rest_of_the_form_holds() {
        assert_eq!(
            form_field(b"admin_token=a%20b&x=%zz", "admin_token").as_deref(),
            Some("a b")
        );
        assert_eq!(
            form_field(b"%zz&admin_token=t", "admin_token").as_deref(),
            Some("t")
        );
        assert_eq!(form_field(b"other=1", "admin_token"), None);
    }
}
