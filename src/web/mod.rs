//! HTTP: webhooks, the status pages, the JSON API, health and metrics. Every route is
//! listed in `router()`; handlers call the store, never SQL.

mod api;
mod error;
mod hooks;
mod pages;
mod views;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::Config;
use crate::engine::Engine;
use crate::intake::verify;
use crate::store::Store;
pub use error::WebError;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub engine: Engine,
    pub metrics: Option<PrometheusHandle>,
}

pub fn router(state: AppState) -> Router {
    let max_body = state.config.server.max_body_bytes;
    Router::new()
        .route(
            "/hooks/{source}",
            post(hooks::receive).layer(DefaultBodyLimit::max(max_body)),
        )
        .route(
            "/hooks/{source}/{token}",
            post(hooks::receive_with_token).layer(DefaultBodyLimit::max(max_body)),
        )
        .route("/", get(pages::index))
        .route("/apps/{app}", get(pages::app))
        .route("/apps/{app}/redeploy", post(pages::redeploy))
        .route("/deployments/{id}", get(pages::deployment))
        .route("/deliveries", get(pages::deliveries))
        .route("/static/pier.css", get(pages::stylesheet))
        .route("/api/apps", get(api::apps))
        .route("/api/apps/{app}", get(api::app))
        .route("/api/apps/{app}/deploy", post(api::deploy))
        .route("/api/deployments/{id}", get(api::deployment))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(hooks::trace_layer())
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready only when both the database and the Docker engine answer.
async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    // Bounded: a probe that hangs for the pool's acquire timeout is no answer.
    let within = std::time::Duration::from_secs(1);
    let (db, docker) = tokio::join!(
        tokio::time::timeout(within, s.store.ping()),
        tokio::time::timeout(within, s.engine.ping())
    );
    let (db, docker) = (db.is_ok_and(|r| r.is_ok()), docker.is_ok_and(|r| r.is_ok()));
    let line = |ok: bool| if ok { "ok" } else { "unavailable" };
    let body = format!("database: {}\ndocker: {}\n", line(db), line(docker));
    let status = if db && docker {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let body = s.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// The admin token, as `Authorization: Bearer …` or a form field; compared in constant
/// time. Without a configured token the admin actions are disabled, never open.
pub(crate) fn check_admin(
    config: &Config,
    headers: &HeaderMap,
    form_token: Option<&str>,
) -> Result<(), WebError> {
    let Some(expected) = &config.server.admin_token else {
        return Err(WebError::Forbidden(
            "admin actions are disabled: set server.admin_token".into(),
        ));
    };
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let given = header.or(form_token);
    verify::token(given, expected.expose()).map_err(|_| WebError::Unauthorized)
}
