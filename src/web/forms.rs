//! The page's buttons: redeploy, roll back to an earlier digest (which pins the app),
//! unpin, cancel or stop. Each goes through the operator actions service
//! (`crate::actions`), the same rules the API and the CLI follow, recorded with who did it:
//! the signed-in user, or the bearer token for a script. Credentials come first: nothing
//! else in the request is looked at before they check out.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use uuid::Uuid;

use super::error::PageError;
use super::session::{Admin, Viewer, admin_form};
use super::template::form_field;
use super::{AppState, WebError};
use crate::actions::{self, Actor};
use crate::store::Enqueued;

fn actor(admin: Admin) -> Actor {
    match admin {
        Admin::Session { user } => Actor::Session { user },
        Admin::Token => Actor::Token,
    }
}

/// A state-changing form's admin, checked before anything else of the request is read
/// (see [`admin_form`]), with the form's body for the handler; without them the request
/// is refused here (sign-in redirect, 401 or 403) and the handler never runs.
pub(super) struct AdminForm {
    pub who: Actor,
    pub body: Bytes,
}

impl FromRequest<AppState> for AdminForm {
    type Rejection = Response;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Extension(viewer) = Extension::<Viewer>::from_request_parts(&mut parts, s)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), s)
            .await
            .map_err(IntoResponse::into_response)?;
        match admin_form(s, &viewer, &headers, &body) {
            Ok(admin) => Ok(AdminForm {
                who: actor(admin),
                body,
            }),
            Err(refused) => Err(refused.into_response()),
        }
    }
}

fn to_deployment(e: Enqueued) -> Response {
    let (Enqueued::Queued { id, .. } | Enqueued::AlreadyPending { id, .. }) = e;
    Redirect::to(&format!("/deployments/{id}")).into_response()
}

/// `POST /apps/{app}/redeploy`: resolve the app's tag afresh and run every step, even
/// when that digest already serves (a pinned app redeploys its pin).
pub(super) async fn redeploy(
    State(s): State<AppState>,
    Path(name): Path<String>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let e = actions::redeploy(&s.store, &s.current(), &name, &form.who)
        .await
        .map_err(WebError::from)?;
    Ok(to_deployment(e))
}

/// `POST /apps/{app}/rollback` (`digest`): deploy that earlier successful digest and pin
/// the app to it.
pub(super) async fn rollback(
    State(s): State<AppState>,
    Path(name): Path<String>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let digest = form_field(&form.body, "digest")
        .ok_or_else(|| WebError::BadRequest("the form names no digest".into()))?;
    let e = actions::rollback(&s.store, &s.current(), &name, &digest, &form.who)
        .await
        .map_err(WebError::from)?;
    Ok(to_deployment(e))
}

/// `POST /apps/{app}/unpin`: pushes move the app again.
pub(super) async fn unpin(
    State(s): State<AppState>,
    Path(name): Path<String>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let done = actions::unpin(&s.store, &name, &form.who)
        .await
        .map_err(WebError::from)?;
    Ok(Redirect::to(&format!("/apps/{}", done.app)).into_response())
}

/// `POST /deployments/{id}/cancel`: cancel it while it waits, or stop it at its next step
/// boundary while it runs (the previous generation keeps serving).
pub(super) async fn cancel(
    State(s): State<AppState>,
    Path(id): Path<String>,
    form: AdminForm,
) -> Result<Response, PageError> {
    let id = Uuid::parse_str(&id).map_err(|_| WebError::NotFound(format!("deployment {id}")))?;
    actions::cancel(&s.store, id, &form.who)
        .await
        .map_err(WebError::from)?;
    Ok(Redirect::to(&format!("/deployments/{id}")).into_response())
}
