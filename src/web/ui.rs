//! The browser's routes: pages, their live event streams, sign-in, and the forms that change
//! something. Every one of them goes through [`session::load_session`]; every form POST
//! also through tower-http's CSRF layer, which answers 403 to a request another site made
//! (`Sec-Fetch-Site: cross-site`, or an `Origin` that is neither this host nor
//! `server.public_url`), before the handler checks the session's form token.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_http::csrf::CsrfLayer;

use super::guard::Guard;
use super::{AppState, approval_links, forms, gates, live, logs_page, pages, session, streams};
use crate::store::Store;

/// What the browser side keeps in memory: all bounded, none of it written to the database.
pub struct PageState {
    /// Failed sign-ins per client address (the webhooks' brake, a table of its own).
    pub sign_in_brake: Guard,
    /// Password hashes checked at once: hashing is slow on purpose, and must not take every
    /// core.
    pub password_slots: Semaphore,
    /// The one slot that password checks from braked addresses share: a guessing flood
    /// gets one hash at a time and cannot take the two above from honest operators.
    pub braked_password_slot: Semaphore,
    pub live: Arc<live::Hub>,
    /// One permit per log followed now, the API's and the pages' together.
    pub log_followers: Arc<Semaphore>,
    /// Pier's shutdown: followed logs end at once instead of holding the drain.
    pub shutdown: CancellationToken,
    /// The approval links' key, derived from the installation key at the first link.
    pub link_key: tokio::sync::OnceCell<crate::gates::LinkKey>,
}

impl PageState {
    pub fn new(store: Store, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            sign_in_brake: Guard::new(0),
            password_slots: Semaphore::new(2),
            braked_password_slot: Semaphore::new(1),
            live: live::Hub::new(store, shutdown.clone()),
            log_followers: Arc::new(Semaphore::new(super::logs::MAX_FOLLOWERS)),
            shutdown,
            link_key: tokio::sync::OnceCell::new(),
        })
    }
}

pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    let csrf = CsrfLayer::new()
        .add_trusted_origin(&state.config.server.sign_in.public_url)
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "server.public_url is not a trusted origin");
            CsrfLayer::new()
        });
    let forms = Router::new()
        .route("/login", post(session::login))
        .route("/logout", post(session::logout))
        .route("/apps/{app}/redeploy", post(forms::redeploy))
        .route("/apps/{app}/rollback", post(forms::rollback))
        .route("/apps/{app}/unpin", post(forms::unpin))
        .route("/deployments/{id}/cancel", post(forms::cancel))
        .route("/deliveries/{id}/redeliver", post(pages::redeliver))
        .route("/deployments/{id}/approve", post(gates::approve_form))
        .route("/deployments/{id}/reject", post(gates::reject_form))
        .route("/deployments/{id}/override", post(gates::override_form))
        .route("/apps/{app}/freeze", post(gates::freeze_form))
        .route("/apps/{app}/unfreeze", post(gates::unfreeze_form))
        .layer(DefaultBodyLimit::max(session::MAX_LOGIN_FORM))
        .layer(csrf);
    Router::new()
        .route("/", get(pages::index))
        .route("/events", get(streams::index_events))
        .route("/login", get(session::login_form))
        .route("/apps/{app}", get(pages::app))
        .route("/apps/{app}/events", get(streams::app_events))
        .route("/apps/{app}/logs", get(logs_page::page))
        .route("/apps/{app}/logs/events", get(logs_page::events))
        .route("/deployments/{id}", get(pages::deployment))
        .route("/deployments/{id}/events", get(streams::deployment_events))
        .route("/deployments/{id}/link", get(approval_links::follow))
        .route("/deliveries", get(pages::deliveries))
        .merge(forms)
        .layer(from_fn_with_state(state.clone(), session::load_session))
        .route("/static/pier.css", get(pages::stylesheet))
        .route("/static/pier.js", get(streams::script))
}
