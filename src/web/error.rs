//! The one place where errors become HTTP answers. A 500 says nothing of its cause; the
//! cause goes to the log.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::intake::{IntakeError, Rejected};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("authentication required")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// The request is well-formed but contradicts the state (a finished deployment, a pin).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    /// It was valid once and is no longer (an expired or used approval link).
    #[error("{0}")]
    Gone(String),
    #[error("too many failed attempts from this address; retry later")]
    TooManyRequests,
    #[error("unsupported content type")]
    UnsupportedMediaType(String),
    #[error("database unavailable, retry later")]
    Unavailable,
    /// Something else is away or full for now (an engine, the log followers): 503 with the
    /// reason, and a `Retry-After`.
    #[error("{0}")]
    Busy(String),
    #[error("internal error")]
    Internal(String),
}

impl From<StoreError> for WebError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %e, "database unavailable");
                WebError::Unavailable
            }
            other => WebError::Internal(other.to_string()),
        }
    }
}

impl From<IntakeError> for WebError {
    fn from(e: IntakeError) -> Self {
        match e {
            IntakeError::UnknownSource => WebError::NotFound("webhook source".into()),
            IntakeError::Unauthenticated(Rejected::Throttled) => WebError::TooManyRequests,
            IntakeError::Unauthenticated(_) => WebError::Unauthorized,
            e @ (IntakeError::TooManyEvents(_) | IntakeError::TooLarge) => {
                WebError::TooLarge(e.to_string())
            }
            IntakeError::Busy => WebError::Unavailable,
            IntakeError::UnsupportedMediaType(t) => WebError::UnsupportedMediaType(t),
            IntakeError::Malformed(m) => WebError::BadRequest(m.0),
            IntakeError::Store(s) => s.into(),
        }
    }
}

impl WebError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::Unauthorized => StatusCode::UNAUTHORIZED,
            WebError::Forbidden(_) => StatusCode::FORBIDDEN,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Conflict(_) => StatusCode::CONFLICT,
            WebError::Gone(_) => StatusCode::GONE,
            WebError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            WebError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            WebError::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            WebError::Unavailable | WebError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            WebError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn public_message(&self) -> String {
        match self {
            WebError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                "internal error".into()
            }
            WebError::UnsupportedMediaType(t) => format!("unsupported content type `{t}`"),
            other => other.to_string(),
        }
    }

    fn finish(&self, mut resp: Response) -> Response {
        *resp.status_mut() = self.status();
        match self {
            WebError::Unavailable | WebError::Busy(_) => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            WebError::TooManyRequests => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            }
            WebError::Unauthorized => {
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        resp
    }

    /// The same error as an HTML page, for browser routes.
    pub(crate) fn html(self) -> Response {
        let msg = self.public_message();
        let body = format!(
            "<!doctype html><title>Pier: {code}</title><link rel=stylesheet href=/static/pier.css>\
             <main><h1>{code}</h1><p>{msg}</p><p><a href=/>Back to the status page</a></p></main>",
            code = self.status(),
            msg = html_escape(&msg)
        );
        self.finish(Html(body).into_response())
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let body = Json(serde_json::json!({ "error": self.public_message() }));
        self.finish(body.into_response())
    }
}

/// `s` escaped for HTML text and attributes by askama's own escaper, the one every template
/// uses: markup built in Rust (an error page, a digest's button) escapes exactly as pages do.
pub(crate) fn html_escape(s: &str) -> String {
    match askama::filters::escape(s, askama::filters::Html) {
        Ok(safe) => safe.to_string(),
        Err(never) => match never {},
    }
}

/// A browser route's error, rendered as HTML.
pub(crate) struct PageError(pub WebError);

impl<E: Into<WebError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        self.0.html()
    }
}
