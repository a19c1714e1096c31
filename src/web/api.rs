use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;

use super::views::{self, AppView};
use super::{AppState, WebError, check_admin, hooks};
use crate::actions::Actor;
use crate::store::{NewDeployment, Trigger};

pub(super) async fn apps(State(s): State<AppState>) -> Result<Json<Vec<AppView>>, WebError> {
    let (all, err) = views::containers_by_app(&s).await;
    let mut out = Vec::new();
    for app in &s.config.apps {
        out.push(views::app_view(&s, app, &all, err.as_deref(), 10).await?);
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

/// `POST /api/apps/{app}/deploy` (admin bearer token): queues a manual deployment of the
/// app's tag, or of a pinned digest given as `{"digest": "sha256:…"}`.
pub(super) async fn deploy(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, WebError> {
    check_admin(&s.config, &headers, None)?;
    views::find_app(&s, &name)?;
    let req: DeployRequest = if body.iter().all(u8::is_ascii_whitespace) {
        DeployRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| WebError::BadRequest(format!("invalid body: {e}")))?
    };
    let enqueued =
        crate::actions::deploy(&s.store, &s.config, &name, req.digest, &Actor::Token).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "deployment": hooks::deployment_ref(enqueued) })),
    ))
}

/// A manual deployment of the app's tag, or of `digest`. A glob or range names no
/// manifest, so for such an app the tag that serves now is resolved again; before anything
/// has deployed there is none, and only a digest can be deployed by hand.
pub(super) async fn manual_for(
    s: &AppState,
    app: &crate::config::AppConfig,
    digest: Option<String>,
) -> Result<NewDeployment, WebError> {
    let mut d = manual(app, digest);
    if !d.pinned && app.rule.fixed().is_none() {
        let tag = s.store.serving_tag(&app.name).await?.ok_or_else(|| {
            WebError::BadRequest(format!(
                "app `{}` follows {}, and no matching tag has deployed yet: deploy a digest",
                app.name, app.rule
            ))
        })?;
        d.requested_tag = Some(tag);
    }
    Ok(d)
}

pub(super) fn manual(app: &crate::config::AppConfig, digest: Option<String>) -> NewDeployment {
    NewDeployment {
        app: app.name.clone(),
        trigger: Trigger::Manual,
        delivery_id: None,
        image: app.image.clone(),
        requested_tag: digest.is_none().then(|| app.tag.clone()),
        pinned: digest.is_some(),
        claimed_digest: digest,
    }
}
