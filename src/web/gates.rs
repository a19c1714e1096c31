//! The gates over HTTP: approve, reject and override (named admins only), freeze and
//! unfreeze, as JSON API routes (bearer token) and as the pages' forms (a session and its
//! form token, behind the CSRF layer like every other form).

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::api_actions::{deployment_id, json_body};
use super::error::PageError;
use super::forms::AdminForm;
use super::session::Viewer;
use super::template::form_field;
use super::{AppState, WebError, bearer_admin, check_admin, views};
use crate::actions::Actor;
use crate::gates;

/// The named admin whose own bearer token this request carries. The shared
/// `server.admin_token` is refused with 403: an approval must name a person.
fn named_by_token(s: &AppState, headers: &HeaderMap) -> Result<String, WebError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Some(a) = gates::admin_by_token(&s.config, given) {
        return Ok(a.name.clone());
    }
    match check_admin(&s.config, headers, None) {
        Ok(()) => Err(WebError::Forbidden(
            "this needs a named admin's own token ([[admins]]), not server.admin_token".into(),
        )),
        Err(_) => Err(WebError::Unauthorized),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ReasonBody {
    reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FreezeBody {
    until: Option<String>,
    reason: Option<String>,
}

fn decided(id: Uuid, d: crate::store::Decided) -> impl IntoResponse {
    Json(serde_json::json!({
        "id": id,
        "decision": d,
        "status_url": format!("/api/deployments/{id}"),
    }))
}

/// `POST /api/deployments/{id}/approve`: 200 with the approvals so far and whether it
/// runs now; 403 for the shared token or an admin not in the app's `approval.from`; 409
/// when it does not wait for approval.
pub(super) async fn approve(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    let admin = named_by_token(&s, &headers)?;
    let id = deployment_id(&id)?;
    let d = gates::approve(&s.store, &s.current(), id, &admin).await?;
    Ok(decided(id, d))
}

/// `POST /api/deployments/{id}/reject {"reason": …}`: it ends `cancelled`, naming who.
pub(super) async fn reject(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, WebError> {
    let admin = named_by_token(&s, &headers)?;
    let id = deployment_id(&id)?;
    let b: ReasonBody = json_body(&body)?;
    let d = gates::reject(&s.store, &s.current(), id, &admin, b.reason.as_deref()).await?;
    Ok(decided(id, d))
}

/// `POST /api/deployments/{id}/override {"reason": …}`: it runs now, past its window or
/// freeze; the reason is required and recorded.
pub(super) async fn override_wait(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, WebError> {
    let admin = named_by_token(&s, &headers)?;
    let id = deployment_id(&id)?;
    let b: ReasonBody = json_body(&body)?;
    let d = gates::override_wait(&s.store, id, &admin, b.reason.as_deref()).await?;
    Ok(decided(id, d))
}

/// `POST /api/apps/{app}/freeze {"until": "2h" | RFC 3339, "reason": …}`: 200 with the freeze.
pub(super) async fn freeze(
    State(s): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    views::find_app(&s, &app)?;
    let b: FreezeBody = json_body(&body)?;
    let until = b
        .until
        .as_deref()
        .ok_or_else(|| WebError::BadRequest("`until` is required".into()))
        .and_then(|u| gates::parse_until(u).map_err(WebError::from))?;
    let f = gates::freeze(
        &s.store,
        &s.current(),
        &app,
        until,
        b.reason.as_deref(),
        &who,
    )
    .await?;
    Ok(Json(serde_json::json!({ "freeze": f })))
}

/// `POST /api/apps/{app}/unfreeze`: 200 with the freeze that was lifted (null if none).
pub(super) async fn unfreeze(
    State(s): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    let who = bearer_admin(&s.config, &headers)?;
    views::find_app(&s, &app)?;
    let f = gates::unfreeze(&s.store, &s.current(), &app, &who).await?;
    Ok((StatusCode::OK, Json(serde_json::json!({ "lifted": f }))))
}

// The pages' forms --------------------------------------------------------------------------

/// The named admin behind a page form: a session signed in with that admin's own secret.
fn named_session(viewer: &Viewer, form: &AdminForm) -> Result<String, WebError> {
    match (&form.who, &viewer.admin) {
        (Actor::Session { .. }, Some(name)) => Ok(name.clone()),
        _ => Err(WebError::Forbidden(
            "approvals and overrides need a named admin: sign in with your own name and secret"
                .into(),
        )),
    }
}

fn page_id(id: &str) -> Result<Uuid, WebError> {
    Uuid::parse_str(id).map_err(|_| WebError::NotFound(format!("deployment {id}")))
}

fn back_to(id: Uuid) -> Response {
    Redirect::to(&format!("/deployments/{id}")).into_response()
}

/// `POST /deployments/{id}/approve` (form).
pub(super) async fn approve_form(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Extension(viewer): Extension<Viewer>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let admin = named_session(&viewer, &form)?;
    let id = page_id(&id)?;
    gates::approve(&s.store, &s.current(), id, &admin)
        .await
        .map_err(WebError::from)?;
    Ok(back_to(id))
}

/// `POST /deployments/{id}/reject` (form, `reason`).
pub(super) async fn reject_form(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Extension(viewer): Extension<Viewer>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let admin = named_session(&viewer, &form)?;
    let id = page_id(&id)?;
    let reason = form_field(&form.body, "reason");
    gates::reject(&s.store, &s.current(), id, &admin, reason.as_deref())
        .await
        .map_err(WebError::from)?;
    Ok(back_to(id))
}

/// `POST /deployments/{id}/override` (form, `reason`).
pub(super) async fn override_form(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Extension(viewer): Extension<Viewer>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let admin = named_session(&viewer, &form)?;
    let id = page_id(&id)?;
    let reason = form_field(&form.body, "reason");
    gates::override_wait(&s.store, id, &admin, reason.as_deref())
        .await
        .map_err(WebError::from)?;
    Ok(back_to(id))
}

/// `POST /apps/{app}/freeze` (form, `until`, `reason`).
pub(super) async fn freeze_form(
    State(s): State<AppState>,
    Path(app): Path<String>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let until = form_field(&form.body, "until")
        .ok_or_else(|| WebError::BadRequest("the form names no `until`".into()))
        .and_then(|u| gates::parse_until(&u).map_err(WebError::from))?;
    let reason = form_field(&form.body, "reason");
    let f = gates::freeze(
        &s.store,
        &s.current(),
        &app,
        until,
        reason.as_deref(),
        &form.who,
    )
    .await
    .map_err(WebError::from)?;
    Ok(Redirect::to(&format!("/apps/{}", f.app)).into_response())
}

/// `POST /apps/{app}/unfreeze` (form).
pub(super) async fn unfreeze_form(
    State(s): State<AppState>,
    Path(app): Path<String>,
    form: AdminForm,
) -> Result<Response, PageError> {
    views::find_app(&s, &app)?;
    gates::unfreeze(&s.store, &s.current(), &app, &form.who)
        .await
        .map_err(WebError::from)?;
    Ok(Redirect::to(&format!("/apps/{app}")).into_response())
}
