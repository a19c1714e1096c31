//! Signing in to the status page. `/login` takes the admin token, or the admin password
//! checked against its hash from the config, and sets a session cookie whose value is a
//! random id stored (hashed) in Postgres with an expiry; `/logout` deletes it.
//!
//! Every form that changes something needs a session and the session's form token (or the
//! API's bearer token, for scripts); cross-site requests are refused before that by
//! tower-http's CSRF layer (`Sec-Fetch-Site`, `Origin`), see `ui.rs`.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Form, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::client::ClientAddr;
use super::error::PageError;
use super::{AppState, WebError};
use crate::intake::verify;
use crate::store::SignInMethod;

/// Who is looking at a page: a signed-in admin (with the form token their forms carry), or
/// nobody. Put in every browser request's extensions by [`load_session`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Viewer {
    pub user: Option<String>,
    /// The session's form token: a hash of the session id, so a page of another site
    /// (which cannot read the cookie) cannot make it.
    pub form_token: String,
    session_id: Option<String>,
    /// Set when the session is a named admin's (signed in with their own
    /// secret): only then may it approve, reject or override.
    pub admin: Option<String>,
}

impl Viewer {
    pub(crate) fn signed_in(&self) -> bool {
        self.user.is_some()
    }
}

/// Who asked for an action: a signed-in admin by name, or a script holding the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admin {
    Session { user: String },
    Token,
}

const COOKIE: &str = "pier_session";
/// With `https`, the cookie is `__Host-` prefixed: browsers then refuse it unless it is
/// `Secure`, host-only and for `/`, so a sibling subdomain cannot plant or shadow it.
const SECURE_COOKIE: &str = "__Host-pier_session";
/// Longest sign-in form accepted (a name, a token or password, a path).
pub(crate) const MAX_LOGIN_FORM: usize = 8 * 1024;
const MAX_USER: usize = 64;

fn cookie_name(s: &AppState) -> &'static str {
    if s.config.server.sign_in.secure_cookie() {
        SECURE_COOKIE
    } else {
        COOKIE
    }
}

fn form_token_of(session_id: &str) -> String {
    hex::encode(Sha256::digest(
        format!("pier-form-token:{session_id}").as_bytes(),
    ))
}

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

/// Reads the session cookie (one query, only when a cookie is sent) and puts the
/// [`Viewer`] in the request. A page that needs a session and has none is sent to
/// `/login`, with the way back.
pub(crate) async fn load_session(
    State(s): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let mut viewer = Viewer::default();
    if let Some(id) = cookie_value(req.headers(), cookie_name(&s)) {
        match s.store.session(&id).await {
            Ok(Some(session)) => {
                viewer = Viewer {
                    admin: (session.method == "admin").then(|| session.user_name.clone()),
                    user: Some(session.user_name),
                    form_token: form_token_of(&id),
                    session_id: Some(id),
                };
            }
            Ok(None) => {}
            Err(e) => return PageError::from(e).into_response(),
        }
    }
    // An approval link answers a request without a session itself (see approval_links.rs).
    let path = req.uri().path();
    let open = matches!(path, "/login" | "/logout")
        || (path.starts_with("/deployments/") && path.ends_with("/link"));
    if !viewer.signed_in()
        && !open
        && req.method() == axum::http::Method::GET
        && s.config.server.sign_in.pages_need_sign_in
    {
        return to_login(req.uri().path_and_query().map(|p| p.as_str()));
    }
    req.extensions_mut().insert(viewer);
    next.run(req).await
}

pub(super) fn to_login(next: Option<&str>) -> Response {
    let next = next.filter(|n| safe_next(n)).unwrap_or("/");
    let q = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    Redirect::to(&format!("/login?{q}")).into_response()
}

/// Only a path on this site: never `//evil.example` or `/\evil.example`, which browsers
/// read as another host.
fn safe_next(next: &str) -> bool {
    next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && next.len() <= 512
        && !next.chars().any(char::is_control)
}

/// Why a form was not let through.
pub enum Refused {
    /// No session: the browser is sent to sign in.
    SignIn,
    /// A wrong bearer token (401), or a missing or wrong form token (403).
    Page(WebError),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::SignIn => Redirect::to("/login").into_response(),
            Refused::Page(e) => PageError(e).into_response(),
        }
    }
}

/// The admin behind a form that changes something: the API's bearer token (scripts), or a
/// session plus its form token (`form_token` field). Without either the browser is sent
/// to sign in; a session whose form token is missing or wrong gets 403.
pub(crate) fn admin_form(
    s: &AppState,
    viewer: &Viewer,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Admin, Refused> {
    if headers.contains_key(header::AUTHORIZATION) {
        return super::check_admin(&s.config, headers, None)
            .map(|()| Admin::Token)
            .map_err(Refused::Page);
    }
    let Some(user) = &viewer.user else {
        return Err(Refused::SignIn);
    };
    let given = super::template::form_field(body, "form_token");
    verify::token(given.as_deref(), &viewer.form_token)
        .map_err(|_| {
            Refused::Page(WebError::Forbidden(
                "this form is stale or came from another site: reload the page and try again"
                    .into(),
            ))
        })
        .map(|()| Admin::Session { user: user.clone() })
}

#[derive(Template, WebTemplate)]
#[template(path = "login.html")]
pub(super) struct LoginPage {
    next: String,
    user: String,
    error: Option<String>,
    enabled: bool,
    password: bool,
    viewer: Viewer,
    live: bool,
}
impl super::template::Fmt for LoginPage {}

#[derive(Deserialize, Default)]
pub(super) struct LoginQuery {
    next: Option<String>,
}

fn login_page(
    s: &AppState,
    next: Option<String>,
    user: String,
    error: Option<String>,
) -> LoginPage {
    LoginPage {
        next: next.filter(|n| safe_next(n)).unwrap_or_else(|| "/".into()),
        user,
        error,
        enabled: s.config.server.admin_token.is_some()
            || s.config.server.sign_in.password_hash.is_some()
            || !s.config.admins.is_empty(),
        password: s.config.server.sign_in.password_hash.is_some()
            || s.config.admins.iter().any(|a| a.password_hash.is_some()),
        viewer: Viewer::default(),
        live: false,
    }
}

/// `GET /login`: the sign-in form.
pub(super) async fn login_form(
    State(s): State<AppState>,
    Query(q): Query<LoginQuery>,
) -> LoginPage {
    login_page(&s, q.next, String::new(), None)
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    user: String,
    secret: String,
    next: Option<String>,
}

/// `POST /login`. Every attempt is checked, from any address: a right secret always
/// signs in, however many wrong ones came from the same address (behind a TLS proxy every
/// operator shares one). What a braked address loses is speed: its password checks share
/// one slot instead of the usual two, so a guessing flood gets at most one hash at a time,
/// and its failures are answered 429. A password is checked on a blocking thread: hashing
/// is slow on purpose.
pub(super) async fn login(
    State(s): State<AppState>,
    ClientAddr(addr): ClientAddr,
    Form(f): Form<LoginForm>,
) -> Result<Response, PageError> {
    // Shown on pages (escaped) and written to the log: no control characters, no forged lines.
    let user: String = f
        .user
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_USER)
        .collect();
    let user = if user.is_empty() {
        "admin".to_owned()
    } else {
        user
    };
    let braked = s.pages.sign_in_brake.throttled(addr);
    let method = match check_secret(&s, &user, f.secret, braked).await {
        Some(m) => m,
        None => {
            s.pages.sign_in_brake.record_failure(addr);
            if braked {
                return Err(WebError::TooManyRequests.into());
            }
            tracing::warn!(client = %ClientAddr(addr), "failed sign-in");
            let page = login_page(&s, f.next, user, Some("Wrong token or password.".into()));
            return Ok((StatusCode::UNAUTHORIZED, page).into_response());
        }
    };
    let id = new_session_id();
    let ttl = s.config.server.sign_in.session_ttl;
    s.store.create_session(&id, &user, method, ttl).await?;
    tracing::info!(%user, method = ?method, "signed in");
    let mut cookie = format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        cookie_name(&s),
        ttl.as_secs()
    );
    if s.config.server.sign_in.secure_cookie() {
        cookie.push_str("; Secure");
    }
    let next = f
        .next
        .filter(|n| safe_next(n))
        .unwrap_or_else(|| "/".into());
    let mut resp = Redirect::to(&next).into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| WebError::Internal(e.to_string()))?,
    );
    Ok(resp)
}

async fn check_secret(
    s: &AppState,
    user: &str,
    secret: String,
    braked: bool,
) -> Option<SignInMethod> {
    if secret.is_empty() || secret.len() > 1024 {
        return None;
    }
    // A named admin's name signs in only with that admin's own secret: nobody else can
    // call themselves `ops` and have their approvals counted as ops's.
    if let Some(admin) = s.config.admins.iter().find(|a| a.name == user) {
        if let Some(token) = &admin.token
            && verify::token(Some(&secret), token.expose()).is_ok()
        {
            return Some(SignInMethod::Admin);
        }
        let hash = admin.password_hash.clone()?;
        return hashed(s, secret, hash, braked)
            .await
            .then_some(SignInMethod::Admin);
    }
    if let Some(token) = &s.config.server.admin_token
        && verify::token(Some(&secret), token.expose()).is_ok()
    {
        return Some(SignInMethod::Token);
    }
    let hash = s.config.server.sign_in.password_hash.clone()?;
    hashed(s, secret, hash, braked)
        .await
        .then_some(SignInMethod::Password)
}

/// A password checked against its hash on a blocking thread, in one of the slots.
async fn hashed(s: &AppState, secret: String, hash: crate::config::Secret, braked: bool) -> bool {
    let slots = if braked {
        &s.pages.braked_password_slot
    } else {
        &s.pages.password_slots
    };
    let Ok(_slot) = slots.acquire().await else {
        return false;
    };
    tokio::task::spawn_blocking(move || password_matches(&secret, hash.expose()))
        .await
        .unwrap_or(false)
}

/// Argon2 (`$argon2…`) or bcrypt (`$2…`), whichever the hash is.
fn password_matches(password: &str, hash: &str) -> bool {
    use argon2::{PasswordHash, PasswordVerifier};
    if hash.starts_with("$argon2") {
        PasswordHash::new(hash).is_ok_and(|h| {
            argon2::Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
    } else {
        bcrypt::verify(password, hash).unwrap_or(false)
    }
}

fn new_session_id() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `POST /logout` (with the form token): deletes the session and the cookie.
pub(super) async fn logout(
    State(s): State<AppState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, PageError> {
    if let Err(refused) = admin_form(&s, &viewer, &headers, &body) {
        return Ok(refused.into_response());
    }
    if let Some(id) = &viewer.session_id {
        s.store.end_session(id).await?;
    }
    let mut resp = Redirect::to("/login").into_response();
    let mut cookie = format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        cookie_name(&s)
    );
    if s.config.server.sign_in.secure_cookie() {
        cookie.push_str("; Secure");
    }
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_on_this_site_are_followed_after_sign_in() {
        assert!(safe_next("/apps/web?x=1"));
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "https://evil.example",
            "",
            "/\n",
        ] {
            assert!(!safe_next(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; pier_session=abc"),
        );
        assert_eq!(cookie_value(&h, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie_value(&h, SECURE_COOKIE), None);
    }

    #[test]
    fn argon2_and_bcrypt_hashes_verify_their_password_only() {
        use argon2::PasswordHasher;
        let salt = argon2::password_hash::SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
        let a = argon2::Argon2::default()
            .hash_password(b"correct horse", &salt)
            .unwrap()
            .to_string();
        assert!(password_matches("correct horse", &a));
        assert!(!password_matches("wrong", &a));
        let b = bcrypt::hash("correct horse", 4).unwrap();
        assert!(password_matches("correct horse", &b));
        assert!(!password_matches("wrong", &b));
        assert!(!password_matches("x", "$argon2id$garbage"));
    }
}
