use axum::Json;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use super::client::{ClientAddr, client_addr};
use super::guard::BodyError;
use super::{AppState, WebError};
use crate::intake::{self, EventVerdict, IntakeError, Rejected};
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
    req: Request,
) -> Response {
    handle(s, source, None, req).await
}

/// `POST /hooks/{source}/{token}`, for senders that cannot set a header (Docker Hub,
/// Quay). The token is a credential: it goes to no log, label or page.
pub(super) async fn receive_with_token(
    State(s): State<AppState>,
    Path((source, token)): Path<(String, String)>,
    req: Request,
) -> Response {
    handle(s, source, Some(token), req).await
}

/// The head is judged before the body is read: an unknown source or a wrong header token
/// costs no body read and no memory. Only then does the body get one of a bounded number
/// of slots, and a size cap.
///
/// The failure brake never stands before a check: a delivery whose credentials verify is
/// accepted from any address, however many forgeries came from it (behind a TLS proxy
/// every sender shares one address, and 20 forged requests would otherwise stop every
/// deploy). Checking costs microseconds; what the brake saves is the work a failure
/// causes: from a braked address a failure is answered 429 and gets no log line.
async fn handle(s: AppState, name: String, token: Option<String>, req: Request) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let addr = client_addr(&s.config.server.trusted_proxies, peer, req.headers());
    let (parts, body) = req.into_parts();
    // Only configured names become label values or log fields: random paths must not grow
    // the metrics, and a URL token sent where a source name belongs must not be logged.
    let label_source = match s.current().source(&name) {
        Some(src) => src.name.clone(),
        None => "unknown".to_owned(),
    };
    let braked = s.guard.throttled(addr);
    let result = async {
        let config = s.current();
        let source = intake::admit(&config, &name, token.as_deref(), &parts.headers)?;
        let (body, _hold) = s
            .guard
            .read_body(body, s.config.server.max_body_bytes)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge => IntakeError::TooLarge,
                BodyError::Busy => IntakeError::Busy,
                BodyError::Unreadable => {
                    IntakeError::Malformed(intake::Malformed("the body could not be read".into()))
                }
            })?;
        intake::receive(&config, &s.store, source, &parts.headers, &body).await
    }
    .await;
    let result = match result {
        Err(IntakeError::Unauthenticated(_)) if braked => {
            Err(IntakeError::Unauthenticated(Rejected::Throttled))
        }
        other => other,
    };
    answer(&s, &label_source, addr, result)
}

fn answer(
    s: &AppState,
    source: &str,
    addr: Option<std::net::IpAddr>,
    result: Result<intake::Accepted, IntakeError>,
) -> Response {
    let label = match &result {
        Ok(a) if a.duplicate => "duplicate",
        Ok(a) if a.replay => "replay",
        Ok(a) if a.queued_any() => "queued",
        Ok(_) => "ignored",
        Err(IntakeError::Unauthenticated(Rejected::Throttled)) => "throttled",
        Err(IntakeError::Unauthenticated(_)) => "unauthenticated",
        Err(IntakeError::Store(_) | IntakeError::Busy) => "unavailable",
        Err(_) => "rejected",
    };
    metrics::counter!("pier_webhooks_total", "source" => source.to_owned(), "result" => label)
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
        Err(e) => {
            if let IntakeError::Unauthenticated(_) = &e {
                s.guard.record_failure(addr);
            }
            // A flood of bad requests is counted (above), and logged a few lines at a time;
            // a braked address's failures are only counted.
            let braked = matches!(e, IntakeError::Unauthenticated(Rejected::Throttled));
            if !braked && s.guard.log_rejection() {
                match &e {
                    IntakeError::Unauthenticated(why) => {
                        tracing::warn!(%source, client = %ClientAddr(addr), reason = why.as_str(), "unauthenticated webhook rejected")
                    }
                    other => {
                        tracing::info!(%source, error = %log_safe(&other.to_string()), "webhook not accepted")
                    }
                }
            }
            WebError::from(e).into_response()
        }
    }
}

/// Text from a request, made safe for a log line: control characters (a forged newline,
/// a terminal escape) are written escaped, and the whole is cut short.
pub(crate) fn log_safe(text: &str) -> String {
    text.chars()
        .take(200)
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}
