//! The app's log page (`GET /apps/{app}/logs`) and the live stream of every log view
//! (`GET /apps/{app}/logs/events`, server-sent events: a `line` event per log line, `end`
//! with the reason when the log ends early; the events of the lines the engine sent at
//! once go out in one write). Both need a signed-in session, whatever
//! `pages_need_sign_in` says: an app's output is not for everyone who may see its status.
//!
//! The page shows the last lines without any script, at most [`PAGE_BYTES`] of them; the
//! script follows the log from the last line shown, with a pause button (pier.js), and
//! keeps a bounded number of lines in the page. The app page has the same live view.

use std::collections::VecDeque;
use std::convert::Infallible;

use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, Path, RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::error::PageError;
use super::logs::{DEFAULT_TAIL, Item, LogsQuery, MAX_LINE, MAX_TAIL, given};
use super::session::Viewer;
use super::template::Fmt;
use super::{AppState, WebError, views};
use crate::engine::{LogLine, LogStream};

/// The most text of a log the page shows: the newest lines that fit.
pub(super) const PAGE_BYTES: usize = 1 << 20;

#[derive(Template, WebTemplate)]
#[template(path = "logs.html")]
pub(super) struct LogsPage {
    app: String,
    services: Vec<String>,
    targets: Vec<String>,
    /// The form as given.
    form: LogsQuery,
    /// The live stream of this log.
    events: String,
    lines: Vec<LineView>,
    /// Older lines were left out to keep the page within [`PAGE_BYTES`].
    left_out: bool,
    error: Option<String>,
    live: bool,
    viewer: Viewer,
}
impl Fmt for LogsPage {}

impl LogsPage {
    fn limits(&self) -> String {
        format!(
            "the last {DEFAULT_TAIL} lines unless Since or Last says otherwise, {MAX_TAIL} at \
             most; {} MiB of text on this page; a line is cut at {} KiB",
            PAGE_BYTES >> 20,
            MAX_LINE >> 10
        )
    }

    /// Whether `name` is what the form chose of `field` (`service` or `target`), the
    /// app's first when it chose none.
    fn chosen(&self, field: &str, name: &str) -> bool {
        let (given_value, first) = match field {
            "service" => (given(&self.form.service), self.services.first()),
            _ => (given(&self.form.target), self.targets.first()),
        };
        given_value.or(first.map(String::as_str)) == Some(name)
    }

    /// A text field of the form as given (`since`, `tail`, `deployment`).
    fn field(&self, field: &str) -> String {
        let v = match field {
            "since" => &self.form.since,
            "tail" => &self.form.tail,
            _ => &self.form.deployment,
        };
        given(v).unwrap_or_default().to_owned()
    }
}

pub(super) struct LineView {
    pub stderr: bool,
    /// RFC 3339 with nine digits of fraction (empty if the engine gave none).
    pub at: String,
    pub text: String,
}

impl From<LogLine> for LineView {
    fn from(l: LogLine) -> Self {
        let at =
            l.at.as_ref()
                .map(crate::engine::at_text)
                .unwrap_or_default();
        LineView {
            stderr: l.stream == LogStream::Stderr,
            at,
            text: l.text,
        }
    }
}

/// `GET /apps/{app}/logs?service=&target=&deployment=&since=&tail=`: the last lines,
/// read once, and the form to choose another log. What the query names wrongly is shown
/// on the page with the answer's status (404 for an unknown service, target or container,
/// 400 for a malformed `since`, 503 for an engine that cannot be asked).
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(app): Path<String>,
    OriginalUri(uri): OriginalUri,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    if !viewer.signed_in() {
        return Ok(super::session::to_login(
            uri.path_and_query().map(|p| p.as_str()),
        ));
    }
    let a = views::find_app(&s, &app)?;
    let form: LogsQuery = super::api_actions::query(raw)?;
    let (lines, left_out, error) = match last_lines(&s, &app, &form).await {
        Ok((lines, left_out)) => (lines, left_out, None),
        Err(e @ (WebError::Unauthorized | WebError::Internal(_) | WebError::Unavailable)) => {
            return Err(e.into());
        }
        Err(e) => (Vec::new(), false, Some(e)),
    };
    let mut events = form.clone();
    // The live view goes on from the last line shown (see pier.js), whatever was asked.
    (events.since, events.tail) = (None, None);
    let page = LogsPage {
        app: a.name.to_string(),
        services: a.service_names().into_iter().map(str::to_owned).collect(),
        targets: a.targets.clone(),
        events: format!("/apps/{}/logs/events?{}", a.name, events.to_query_string()),
        form,
        lines,
        left_out,
        error: error.as_ref().map(ToString::to_string),
        live: false,
        viewer,
    };
    let mut resp = page.into_response();
    if let Some(e) = error {
        *resp.status_mut() = e.status();
    }
    Ok(resp)
}

/// The log read once, the newest lines that fit in [`PAGE_BYTES`]; whether older ones
/// were left out.
async fn last_lines(
    s: &AppState,
    app: &str,
    form: &LogsQuery,
) -> Result<(Vec<LineView>, bool), WebError> {
    let mut items = form.choose(s, app).await?.read().await?;
    let (mut kept, mut bytes, mut left_out) = (VecDeque::new(), 0, false);
    while let Some(item) = items.next().await {
        let lines = match item {
            Item::Lines(lines) => lines,
            Item::Idle => continue,
            Item::Ended(why) => return Err(WebError::Busy(why)),
        };
        for line in lines.into_iter().map(LineView::from) {
            bytes += line.text.len();
            kept.push_back(line);
            while bytes > PAGE_BYTES {
                let Some(old) = kept.pop_front() else { break };
                bytes -= old.text.len();
                left_out = true;
            }
        }
    }
    Ok((kept.into(), left_out))
}

/// `GET /apps/{app}/logs/events?service=&target=&deployment=&since=&tail=`: the log
/// followed, as server-sent events. Not signed in: 401.
pub(super) async fn events(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(app): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    if !viewer.signed_in() {
        return Err(WebError::Unauthorized.into());
    }
    let q: LogsQuery = super::api_actions::query(raw)?;
    let items = q.follows().choose(&s, &app).await?.read().await?;
    let events = items.map(|item| Ok::<_, Infallible>(events_of(item)));
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response())
}

/// The server-sent events of `item`, in one chunk of the stream: a `line` event per line
/// (its JSON, which holds no raw newline), a comment for [`Item::Idle`], `end` with the
/// reason (a `data:` field per line of it).
fn events_of(item: Item) -> Bytes {
    let mut b = Vec::new();
    match item {
        Item::Lines(lines) => {
            for l in &lines {
                b.extend_from_slice(b"event: line\ndata: ");
                // Writing to a Vec fails only for a value that cannot be JSON; a line can.
                let _ = serde_json::to_writer(&mut b, l);
                b.extend_from_slice(b"\n\n");
            }
        }
        Item::Idle => b.extend_from_slice(b": \n\n"),
        Item::Ended(why) => {
            b.extend_from_slice(b"event: end\n");
            for part in why.split(['\r', '\n']) {
                b.extend_from_slice(b"data: ");
                b.extend_from_slice(part.as_bytes());
                b.push(b'\n');
            }
            b.push(b'\n');
        }
    }
    Bytes::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> LogLine {
        LogLine {
            stream: LogStream::Stdout,
            at: None,
            text: text.into(),
            cut: false,
        }
    }

    #[test]
    fn a_batch_of_lines_is_one_chunk_of_line_events_and_a_reason_keeps_its_lines() {
        let chunk = events_of(Item::Lines(vec![line("one"), line("two\nlines")]));
        assert_eq!(
            std::str::from_utf8(&chunk).unwrap(),
            "event: line\ndata: {\"stream\":\"stdout\",\"at\":null,\"text\":\"one\"}\n\n\
             event: line\ndata: {\"stream\":\"stdout\",\"at\":null,\"text\":\"two\\nlines\"}\n\n"
        );
        let end = events_of(Item::Ended("gone\nfor good".into()));
        assert_eq!(&end[..], b"event: end\ndata: gone\ndata: for good\n\n");
        assert_eq!(&events_of(Item::Idle)[..], b": \n\n");
    }
}
