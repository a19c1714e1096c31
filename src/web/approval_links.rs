//! `GET /deployments/{id}/link?action=…&for=…&expires=…&nonce=…&sig=…`: where an approval
//! link from a notification lands. In this order: the signature (an altered link is 403
//! and nothing of it is believed), the expiry (410), a signed-in named admin allowed to
//! approve the app (else sign-in, or 403), the deployment still waiting (409), and the
//! link's one use (410 the second time). Then the admin is taken to the deployment's
//! page with the action preselected: the link itself never approves or rejects.
//!
//! The session cookie is `SameSite=Strict`, so a click in a web mail (another site)
//! arrives without it. A request without a session is answered once with a page that
//! reloads the same link from Pier's own site (then the cookie comes along); only if
//! there is still none is the browser sent to sign in, with the way back.

use axum::Extension;
use axum::extract::{Path, Query, RawQuery, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use uuid::Uuid;

use super::error::{PageError, html_escape};
use super::session::{Viewer, to_login};
use super::{AppState, WebError};
use crate::gates::{ApprovalLink, LinkError, LinkKey, LinkQuery};

impl From<LinkError> for WebError {
    fn from(e: LinkError) -> Self {
        match e {
            e @ (LinkError::Altered | LinkError::NotYours(_)) => WebError::Forbidden(e.to_string()),
            e @ (LinkError::Expired(_) | LinkError::Used) => WebError::Gone(e.to_string()),
            e @ LinkError::NotWaiting { .. } => WebError::Conflict(e.to_string()),
            LinkError::Action(a) => a.into(),
        }
    }
}

/// The links' key, read from the database once per process.
async fn key(s: &AppState) -> Result<&LinkKey, WebError> {
    s.pages
        .link_key
        .get_or_try_init(|| async {
            let k = s.store.installation_key().await?;
            Ok::<_, WebError>(LinkKey::derive(&k))
        })
        .await
}

const HOP: &str = "hop=1";

pub(super) async fn follow(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<LinkQuery>,
    RawQuery(raw): RawQuery,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, PageError> {
    let id = Uuid::parse_str(&id).map_err(|_| WebError::NotFound(format!("deployment {id}")))?;
    let link =
        ApprovalLink::verify(key(&s).await?, id, &q, chrono::Utc::now()).map_err(WebError::from)?;
    let raw = raw.unwrap_or_default();
    let Some(admin) = viewer.admin.clone() else {
        if viewer.signed_in() {
            return Err(WebError::Forbidden(
                "approval links need a named admin: sign in with your own name and secret".into(),
            )
            .into());
        }
        return Ok(sign_in_first(id, &raw));
    };
    link.open(&s.store, &s.current(), &admin)
        .await
        .map_err(WebError::from)?;
    tracing::info!(%admin, deployment = %id, action = %link.action, "approval link followed");
    Ok(Redirect::to(&format!("/deployments/{id}?decide={}#decide", link.action)).into_response())
}

/// No session: once, the same link again from Pier's own page (the cookie comes along);
/// the second time, sign-in with the way back to the link.
fn sign_in_first(id: Uuid, raw: &str) -> Response {
    let path = format!("/deployments/{id}/link");
    let bare: Vec<&str> = raw.split('&').filter(|p| *p != HOP).collect();
    let link = format!("{path}?{}", bare.join("&"));
    if raw.split('&').any(|p| p == HOP) {
        return to_login(Some(&link));
    }
    let again = html_escape(&format!("{link}&{HOP}"));
    Html(format!(
        "<!doctype html><title>Pier: approval link</title>\
         <meta http-equiv=refresh content=\"0; url={again}\">\
         <link rel=stylesheet href=/static/pier.css>\
         <main><p>Opening the approval… <a href=\"{again}\">Continue</a></p></main>"
    ))
    .into_response()
}
