use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;

use super::views::{self, AppView};
use super::{AppState, WebError, bearer_admin, hooks};
use crate::actions::Actor;

pub(super) async fn apps(State(s): State<AppState>) -> Result<Json<Vec<AppView>>, WebError> {
    let config = s.current();
    let mut snapshot = views::containers_of_all(&s, &config.apps).await;
    // `pier status` reads this list: a swarm app's row says what its service runs per
    // node, as the app's own answer does, not "no service yet".
    snapshot.add_services(&s.targets, &config.apps).await;
    let mut out = Vec::new();
    for app in &config.apps {
        let mut view = views::app_view(&s, app, &snapshot, 10).await?;
        // The latest counters only: an hour of points per container is the app's own
        // answer's, not every app's at once.
        for c in &mut view.resources.containers {
            c.history.clear();
        }
        out.push(view);
    }
    Ok(Json(out))
}

pub(super) async fn app(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<AppView>, WebError> {
    Ok(Json(views::one_app(&s, &name, 20).await?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DeployRequest {
    /// Deploy exactly this digest instead of resolving the app's tag.
    digest: Option<String>,
}

/// `GET /api/whoami` (bearer token): whose token this is and how what it does is recorded,
/// so that a client (`pier login`, `pier approve --as NAME`) can check who it acts as
/// before it acts. 401 for a token that is nobody's.
pub(super) async fn whoami(
    State(s): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    let admin = match &who {
        Actor::Session { user } => Some(user.clone()),
        _ => None,
    };
    Ok(Json(
        serde_json::json!({ "admin": admin, "recorded_as": who.describe() }),
    ))
}

/// `POST /api/apps/{app}/deploy` (admin bearer token): queues a manual deployment of the
/// app's tag, or of a pinned digest given as `{"digest": "sha256:…"}`.
pub(super) async fn deploy(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    views::find_app(&s, &name)?;
    let req: DeployRequest = if body.iter().all(u8::is_ascii_whitespace) {
        DeployRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| WebError::BadRequest(format!("invalid body: {e}")))?
    };
    let enqueued = crate::actions::deploy(&s.store, &s.current(), &name, req.digest, &who).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "deployment": hooks::deployment_ref(enqueued) })),
    ))
}
