//! HTTP: webhooks, the status pages, the JSON API, health and metrics. Every route is
//! listed in `router()`; handlers call the store, never SQL.
//!
//! Web and intake only read and enqueue: they see the engine through the read-only
//! [`EngineView`] (the page shows the engine's truth beside the journal) and never create,
//! start, stop or remove anything. Only the pipeline and reconciliation change the engine.

mod api;
mod api_actions;
pub(crate) mod client;
mod delivery_filter;
pub mod engines;
mod error;
mod format;
pub mod guard;
mod hooks;
mod logs;
mod logs_page;
mod pages;
mod resources;
pub mod server;
pub(crate) mod swarm_rows;
mod views;
// The browser side: sign-in, live pages, forms, approval links.
mod approval_links;
mod forms;
mod gates;
mod live;
mod session;
mod streams;
mod template;
mod timeline;
pub mod ui;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::actions::Actor;
use crate::config::Config;
use crate::engine::EngineView;
use crate::intake::verify;
use crate::store::Store;
pub use error::WebError;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub engine: EngineView,
    /// Every target's engine, read-only, for the pages' row per engine.
    pub targets: engines::TargetViews,
    pub metrics: Option<PrometheusHandle>,
    /// The demand for resource samples, and what they found (`background/stats/`).
    pub stats: crate::background::stats::Stats,
    pub guard: Arc<guard::Guard>,
    /// The config as reloaded (SIGHUP, `pier reload`), beside `config` (the one at start): the status
    /// page shows a refused reload's error from here.
    pub live: Option<crate::config::LiveConfig>,
    /// Sign-in brake and live-page streams.
    pub pages: Arc<ui::PageState>,
}

impl AppState {
    /// The config as reloaded, for what a reload changes: apps, sources, policy. Pages,
    /// the API and intake read it per request, so that an app added by a reload is shown,
    /// matched by pushes and deployable at once, and a removed one is not. `[server]`
    /// settings stay those of `config` (start-up) until a restart.
    pub(crate) fn current(&self) -> Arc<Config> {
        match &self.live {
            Some(live) => live.load(),
            None => self.config.clone(),
        }
    }
}

pub fn router(state: AppState) -> Router {
    let max_body = state.config.server.max_body_bytes;
    let request_timeout = state.config.server.request_timeout;
    // The long-poll waits up to `actions::MAX_WAIT` by design, so it gets that on top of
    // the usual deadline; it reads no body, so nothing can trickle into it meanwhile.
    let long_poll = Router::new()
        .route("/api/deployments/{id}", get(api_actions::deployment))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout + crate::actions::MAX_WAIT,
        ));
    Router::new()
        .route(
            "/hooks/{source}",
            post(hooks::receive).layer(DefaultBodyLimit::max(max_body)),
        )
        .route(
            "/hooks/{source}/{token}",
            post(hooks::receive_with_token).layer(DefaultBodyLimit::max(max_body)),
        )
        .merge(ui::routes(&state))
        .route("/api/apps", get(api::apps))
        .route("/api/apps/{app}", get(api::app))
        .route("/api/apps/{app}/deploy", post(api::deploy))
        .route("/api/apps/{app}/logs", get(logs::api))
        .route("/api/whoami", get(api::whoami))
        // Operator actions and the long-poll: api_actions.rs.
        .route("/api/deployments/{id}/cancel", post(api_actions::cancel))
        .route("/api/apps/{app}/rollback", post(api_actions::rollback))
        .route(
            "/api/apps/{app}/rollback-choices",
            get(api_actions::rollback_choices),
        )
        .route("/api/apps/{app}/unpin", post(api_actions::unpin))
        // Approvals, windows and freezes: gates.rs.
        .route("/api/deployments/{id}/approve", post(gates::approve))
        .route("/api/deployments/{id}/reject", post(gates::reject))
        .route("/api/deployments/{id}/override", post(gates::override_wait))
        .route("/api/apps/{app}/freeze", post(gates::freeze))
        .route("/api/apps/{app}/unfreeze", post(gates::unfreeze))
        .route("/api/deliveries", get(api_actions::deliveries))
        .route("/api/notifications", get(api_actions::notifications))
        .route("/api/openapi.json", get(api_actions::openapi))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        // Every answer forbids being framed (clickjacking the redeploy button), content
        // sniffing, and leaking Pier's URLs to other sites in `Referer`.
        .layer(fixed_header(header::X_FRAME_OPTIONS, "DENY"))
        .layer(fixed_header(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(fixed_header(header::REFERRER_POLICY, "same-origin"))
        // Scripts only from Pier itself (escaping is the first defence, this the second).
        .layer(fixed_header(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'",
        ))
        // A request, body included, gets `request_timeout` in all: a body trickled a byte at
        // a time is cut off with 408 instead of holding a connection and a handler.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .merge(long_poll)
        .layer(axum::middleware::from_fn_with_state(
            max_body,
            server::refuse_oversize_and_close_after_errors,
        ))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .with_state(state)
}

fn fixed_header(
    name: header::HeaderName,
    value: &'static str,
) -> SetResponseHeaderLayer<HeaderValue> {
    SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
}

/// One span per request, named by its matched route, never by its raw path: a path can
/// carry a secret (a token-in-URL webhook) or forged bytes meant for the log.
fn request_span(req: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str());
    tracing::info_span!("request", method = %req.method(), route)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready only when a delivery would be stored now (a write commits, see
/// `store/readiness.rs`) and the Docker engine answers; 503 with the reason otherwise.
/// Bounded by the write probe's deadline, and shared: however often it is asked, the
/// database sees at most one probe a second.
async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let (db, docker) = tokio::join!(
        s.store.writable(),
        tokio::time::timeout(std::time::Duration::from_secs(1), s.engine.ping())
    );
    let docker = docker.is_ok_and(|r| r.is_ok());
    let body = format!(
        "database: {}\ndocker: {}\n",
        match &db {
            Ok(()) => "ok".to_owned(),
            Err(why) => format!("unavailable: {why}"),
        },
        if docker { "ok" } else { "unavailable" }
    );
    let status = if db.is_ok() && docker {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
}

/// The process's metrics, then each container's resource use. A scrape is a reason to
/// sample: the next one has fresh numbers, and while scrapes come the sampler keeps going.
/// The process's counters are rendered before this scrape's demand is made, so that
/// `pier_stats_engine_calls_total` in a scrape never counts calls made for that scrape.
async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    api_actions::refresh_gauges(&s).await;
    let mut body = s.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    s.stats.want();
    body.push_str(&s.stats.prometheus());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// The admin a bearer token proves, as the record shows them: a named admin's own token
/// (`[[admins]]`: `user NAME`, as when they sign in) or the shared `server.admin_token`
/// (`api token`). Every token is compared in constant time. With neither configured the
/// admin actions are disabled, never open.
pub(crate) fn bearer_admin(config: &Config, headers: &HeaderMap) -> Result<Actor, WebError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Some(a) = crate::gates::admin_by_token(config, given) {
        return Ok(Actor::Session {
            user: a.name.to_string(),
        });
    }
    if config.server.admin_token.is_none() && config.admins.iter().any(|a| a.token.is_some()) {
        return Err(WebError::Unauthorized);
    }
    check_admin(config, headers, None).map(|()| Actor::Token)
}

/// The shared admin token, as `Authorization: Bearer …` or a form field; compared in
/// constant time. Without a configured token the admin actions are disabled, never open.
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
