//! The proxy's loopback admin endpoint: `GET /routes` says, per app, which route version
//! is applied and which generation it serves, and per upstream what is in flight. The
//! pipeline's `applied` and `drain` steps wait on it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::table::Entry;

#[derive(Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct Upstream {
    pub in_flight: u64,
    pub served: u64,
}

#[derive(Serialize)]
struct Routes {
    routes: Vec<Entry>,
    upstreams: BTreeMap<String, Upstream>,
}

pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let app = Router::new()
        .route("/routes", get(routes))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(shared);
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
}

async fn routes(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let table = shared.table();
    let mut routes: Vec<Entry> = table.entries().cloned().collect();
    routes.sort_by(|a, b| a.app.cmp(&b.app));
    let upstreams = shared
        .counters
        .snapshot()
        .into_iter()
        .map(|(k, (in_flight, served))| (k, Upstream { in_flight, served }))
        .collect();
    Json(serde_json::to_value(Routes { routes, upstreams }).expect("routes serialize"))
}
