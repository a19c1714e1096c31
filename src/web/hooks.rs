use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use super::{AppState, WebError};
use crate::intake::{self, EventVerdict, IntakeError};
use crate::store::Enqueued;

#[derive(Serialize)]
struct Answer {
    delivery: DeliveryRef,
    deployments: Vec<DeploymentRef>,
    events: Vec<EventVerdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

#[derive(Serialize)]
struct DeliveryRef {
    id: Uuid,
    duplicate: bool,
    replay: bool,
    url: String,
}

#[derive(Serialize)]
pub(super) struct DeploymentRef {
    #[serde(flatten)]
    enqueued: Enqueued,
    status_url: String,
    page_url: String,
}

pub(super) fn deployment_ref(e: Enqueued) -> DeploymentRef {
    let id = match &e {
        Enqueued::Queued { id, .. } | Enqueued::AlreadyPending { id, .. } => *id,
    };
    DeploymentRef {
        enqueued: e,
        status_url: format!("/api/deployments/{id}"),
        page_url: format!("/deployments/{id}"),
    }
}

/// `POST /hooks/{source}`: 202 when it queued a deployment, 200 when an authentic
/// delivery changes nothing, 401 (storing nothing) when it is not authentic, 503 when the
/// database cannot take it, so the sender retries.
pub(super) async fn receive(
    State(s): State<AppState>,
    Path(source): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, source, None, headers, body).await
}

/// `POST /hooks/{source}/{token}`, for senders that cannot set a header (Docker Hub,
/// Quay). The token is a credential: it goes to no log, label or page.
pub(super) async fn receive_with_token(
    State(s): State<AppState>,
    Path((source, token)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, source, Some(token), headers, body).await
}

async fn handle(
    s: AppState,
    source: String,
    token: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let result = intake::receive(
        &s.config,
        &s.store,
        &source,
        token.as_deref(),
        &headers,
        &body,
    )
    .await;
    let label = match &result {
        Ok(a) if a.duplicate => "duplicate",
        Ok(a) if a.replay => "replay",
        Ok(a) if a.queued_any() => "queued",
        Ok(_) => "ignored",
        Err(IntakeError::Unauthenticated(_)) => "unauthenticated",
        Err(IntakeError::Store(_)) => "unavailable",
        Err(_) => "rejected",
    };
    // Only configured names become label values or log fields: random paths must not grow
    // the metrics, and a URL token sent where a source name belongs must not be logged.
    let source = if s.config.source(&source).is_some() {
        source
    } else {
        "unknown".to_owned()
    };
    metrics::counter!("pier_webhooks_total", "source" => source.clone(), "result" => label)
        .increment(1);
    match result {
        Ok(accepted) => {
            let status = if accepted.queued_any() {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            tracing::info!(%source, delivery = %accepted.delivery_id, result = label, "webhook");
            let answer = Answer {
                delivery: DeliveryRef {
                    id: accepted.delivery_id,
                    duplicate: accepted.duplicate,
                    replay: accepted.replay,
                    url: format!("/deliveries#{}", accepted.delivery_id),
                },
                deployments: accepted
                    .deployments
                    .into_iter()
                    .map(deployment_ref)
                    .collect(),
                events: accepted.events,
                reason: accepted.reason,
            };
            (status, Json(answer)).into_response()
        }
        Err(IntakeError::Unauthenticated(why)) => {
            tracing::warn!(%source, reason = why.as_str(), "unauthenticated webhook rejected");
            WebError::Unauthorized.into_response()
        }
        Err(e) => {
            tracing::info!(%source, error = %e, "webhook not accepted");
            WebError::from(e).into_response()
        }
    }
}
