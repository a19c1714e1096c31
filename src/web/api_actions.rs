//! The JSON API's operator actions: rollback, unpin, cancel, the deliveries list and the
//! long-poll of a deployment. An admin's bearer token on every route: the shared
//! `server.admin_token` or a named admin's own (see [`super::bearer_admin`]).

use crate::actions::ActionError;

use super::WebError;

impl From<ActionError> for WebError {
    fn from(e: ActionError) -> Self {
        match e {
            ActionError::UnknownApp(a) => WebError::NotFound(format!("app `{a}`")),
            ActionError::UnknownDeployment(id) => WebError::NotFound(format!("deployment {id}")),
            e @ ActionError::NotAnApprover { .. } => WebError::Forbidden(e.to_string()),
            e @ (ActionError::NotADigest(_)
            | ActionError::NothingToRedeploy(_)
            | ActionError::Invalid(_)
            | ActionError::BadUntil { .. }
            | ActionError::UntilTooLong) => WebError::BadRequest(e.to_string()),
            e @ (ActionError::NeverSucceeded { .. }
            | ActionError::Pinned { .. }
            | ActionError::NotPinned(_)
            | ActionError::AlreadyFinal { .. }
            | ActionError::NotWaiting { .. }) => WebError::Conflict(e.to_string()),
            ActionError::Store(s) => s.into(),
        }
    }
}

// Routes ------------------------------------------------------------------------------------

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use uuid::Uuid;

use super::delivery_filter::{DeliveriesQuery, Filtered};
use super::views::{self, DeploymentView};
use super::{AppState, bearer_admin, hooks};
use crate::actions::{self, Cancelled};

/// A JSON body of at most a few fields; nothing else is read.
pub(super) fn json_body<T: for<'de> Deserialize<'de> + Default>(
    body: &[u8],
) -> Result<T, WebError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| WebError::BadRequest(format!("invalid body: {e}")))
}

/// The query string, refused with a JSON 400 and the reason (axum's own `Query` answers
/// in plain text).
pub(super) fn query<T: for<'de> Deserialize<'de> + Default>(
    raw: Option<String>,
) -> Result<T, WebError> {
    match raw.as_deref().filter(|q| !q.is_empty()) {
        None => Ok(T::default()),
        Some(q) => serde_urlencoded::from_str(q)
            .map_err(|e| WebError::BadRequest(format!("invalid query: {e}"))),
    }
}

pub(super) fn deployment_id(id: &str) -> Result<Uuid, WebError> {
    Uuid::parse_str(id).map_err(|_| {
        WebError::NotFound(format!(
            "deployment {}",
            id.chars().take(40).collect::<String>()
        ))
    })
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RollbackRequest {
    digest: Option<String>,
}

/// `POST /api/apps/{app}/rollback {"digest": "sha256:…"}`: 202 with the deployment; the app
/// is pinned to that digest. 409 when the digest never deployed successfully for this app.
pub(super) async fn rollback(
    State(s): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    views::find_app(&s, &app)?;
    let req: RollbackRequest = json_body(&body)?;
    let digest = req
        .digest
        .ok_or_else(|| WebError::BadRequest("`digest` is required".into()))?;
    let enqueued = actions::rollback(&s.store, &s.current(), &app, &digest, &who).await?;
    let pin = s.store.pin(&app).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "deployment": hooks::deployment_ref(enqueued), "pin": pin })),
    ))
}

/// `POST /api/apps/{app}/unpin`: 200 with the pin that ended; 409 when it was not pinned.
pub(super) async fn unpin(
    State(s): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    views::find_app(&s, &app)?;
    let u = actions::unpin(&s.store, &app, &who).await?;
    Ok(Json(
        serde_json::json!({ "app": u.app, "unpinned": u.was, "by": u.by }),
    ))
}

/// `GET /api/apps/{app}/rollback-choices`: the pin in force and the digests that
/// deployed successfully, newest first.
pub(super) async fn rollback_choices(
    State(s): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    bearer_admin(&s.config, &headers)?;
    views::find_app(&s, &app)?;
    let pin = s.store.pin(&app).await?;
    let digests = s.store.succeeded_digests(&app, 50).await?;
    Ok(Json(
        serde_json::json!({ "app": app, "pin": pin, "digests": digests }),
    ))
}

/// `POST /api/deployments/{id}/cancel`: 200 `cancelled` (it was queued) or 202
/// `stop_requested` (it runs: it stops at its next step boundary before `switch`); 409
/// when it has already ended.
pub(super) async fn cancel(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    let id = deployment_id(&id)?;
    let result = actions::cancel(&s.store, id, &who).await?;
    let status = match result {
        Cancelled::Cancelled => StatusCode::OK,
        Cancelled::StopRequested => StatusCode::ACCEPTED,
    };
    Ok((
        status,
        Json(serde_json::json!({
            "id": id,
            "result": result,
            "status_url": format!("/api/deployments/{id}"),
        })),
    ))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitQuery {
    /// `60s`, `2m`: wait until the deployment is final, at most this long.
    wait: Option<String>,
}

/// `GET /api/deployments/{id}[?wait=60s]`: the deployment with its steps; with `wait`, the
/// answer comes once it is final or the wait is over, whichever is first. The wait is at
/// most [`actions::MAX_WAIT`] (the route's deadline is that plus `server.request_timeout`);
/// the answer says `"final": false` when the caller should ask again.
pub(super) async fn deployment(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, WebError> {
    let id = deployment_id(&id)?;
    let q: WaitQuery = query(raw)?;
    if let Some(w) = q.wait.as_deref().filter(|w| !w.is_empty()) {
        // Waiting holds a listening connection: only for the admin.
        bearer_admin(&s.config, &headers)?;
        let wait = humantime::parse_duration(w.trim()).map_err(|_| {
            WebError::BadRequest("wait must be a duration such as 60s or 2m".into())
        })?;
        actions::wait_final(&s.store, id, wait.min(actions::MAX_WAIT)).await?;
    }
    let view: DeploymentView = views::deployment_view(&s, id).await?;
    let done = view.deployment.state.is_final();
    let mut v = serde_json::to_value(&view)
        .map_err(|e| WebError::Internal(format!("serialize deployment: {e}")))?;
    v["final"] = serde_json::Value::Bool(done);
    Ok(Json(v))
}

/// `GET /api/deliveries?source=&verdict=&before=&limit=`: authentic deliveries, newest
/// first, with the deployments each created; `next` is the `before` of the next page.
pub(super) async fn deliveries(
    State(s): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<impl IntoResponse, WebError> {
    bearer_admin(&s.config, &headers)?;
    let q: DeliveriesQuery = query(raw)?;
    let Filtered { filter, limit, .. } = q.check(&s.store, 50).await?;
    let page = s.store.deliveries_page(&filter, limit).await?;
    let ids: Vec<Uuid> = page.iter().map(|d| d.id).collect();
    let created = s.store.deployments_of_deliveries(&ids).await?;
    let next = (page.len() as i64 == limit)
        .then(|| page.last().map(|d| d.id))
        .flatten();
    let items: Vec<serde_json::Value> = page
        .into_iter()
        .map(|d| {
            let made: Vec<serde_json::Value> = created
                .iter()
                .filter(|(delivery, _, _)| *delivery == d.id)
                .map(|(_, id, app)| serde_json::json!({ "id": id, "app": app }))
                .collect();
            let mut v = serde_json::to_value(&d).unwrap_or_default();
            v["deployments"] = serde_json::Value::Array(made);
            v
        })
        .collect();
    Ok(Json(
        serde_json::json!({ "deliveries": items, "next": next }),
    ))
}

/// `GET /api/openapi.json`: the API's description, embedded in the binary.
pub(super) async fn openapi() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct NotificationsQuery {
    deployment: Option<String>,
    limit: Option<i64>,
}

/// `GET /api/notifications[?deployment=]`: the delivery log of outgoing notifications,
/// newest first, each with every attempt (status or error, duration).
pub(super) async fn notifications(
    State(s): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<impl IntoResponse, WebError> {
    bearer_admin(&s.config, &headers)?;
    let q: NotificationsQuery = query(raw)?;
    let deployment = match q.deployment.as_deref().filter(|d| !d.is_empty()) {
        Some(d) => Some(
            Uuid::parse_str(d)
                .map_err(|_| WebError::BadRequest("deployment must be a deployment id".into()))?,
        ),
        None => None,
    };
    let (rows, attempts) = s
        .store
        .notification_log(deployment, q.limit.unwrap_or(50))
        .await?;
    let items: Vec<serde_json::Value> = rows
        .iter()
        .map(|n| {
            let mut v = serde_json::to_value(n).unwrap_or_default();
            v["log"] = serde_json::to_value(
                attempts
                    .iter()
                    .filter(|a| a.notification_id == n.id)
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_default();
            v
        })
        .collect();
    Ok(Json(serde_json::json!({ "notifications": items })))
}

/// Gauges read from the database when `/metrics` is scraped, not on a timer: an idle Pier
/// that nobody scrapes sends no query. Bounded by a deadline; on failure the gauges keep
/// their last values and `pier_metrics_refresh_failures_total` counts it.
pub(super) async fn refresh_gauges(s: &AppState) {
    // Counters that must show from the first scrape, at zero, before anything happened.
    metrics::counter!("pier_lease_takeovers_total").increment(0);
    metrics::counter!("pier_notification_failures_total").increment(0);
    match tokio::time::timeout(Duration::from_secs(2), s.store.queue_depth()).await {
        Ok(Ok(depth)) => {
            for (state, n) in depth {
                metrics::gauge!("pier_queue_depth", "state" => state).set(n as f64);
            }
        }
        _ => metrics::counter!("pier_metrics_refresh_failures_total").increment(1),
    }
}
