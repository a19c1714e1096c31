//! Telegram's Bot API: `POST {api_url}/bot{token}/sendMessage` with `chat_id`, the message
//! as HTML (`parse_mode`) and no link previews. The token is part of the URL, so nothing
//! here ever shows the URL: errors are built without it. A 429 names its wait in the body
//! (`parameters.retry_after`) as well as, sometimes, in `Retry-After`.

use std::time::Duration;

use super::super::message::Message;
use super::super::outcome::{Attempt, MAX_RETRY_AFTER};
use super::{Call, USER_AGENT, cut};

/// Telegram's limit for one message's text.
const MAX_TEXT: usize = 4096;
/// Most of an error answer read for its `retry_after`.
const MAX_ERROR_BODY: usize = 4096;

pub(super) fn body(chat_id: &str, msg: &Message) -> serde_json::Value {
    serde_json::json!({
        "chat_id": chat_id,
        "text": cut(&msg.html(), MAX_TEXT),
        "parse_mode": "HTML",
        "link_preview_options": { "is_disabled": true },
    })
}

pub(super) async fn send(
    call: &Call<'_>,
    (api_url, token): (&str, &str),
    chat_id: &str,
    msg: &Message,
) -> Attempt {
    let url = format!("{api_url}/bot{token}/sendMessage");
    let req = call
        .http
        .post(url)
        .timeout(call.timeout)
        .header("content-type", "application/json")
        .header("user-agent", USER_AGENT)
        .body(serde_json::to_vec(&body(chat_id, msg)).unwrap_or_default());
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Attempt::transport(e),
    };
    let mut attempt = Attempt::answered(resp.status(), resp.headers());
    if let Attempt::NotSent { retry_after, .. } = &mut attempt
        && retry_after.is_none()
    {
        *retry_after = body_retry_after(resp).await;
    }
    attempt
}

/// `{"ok": false, "parameters": {"retry_after": N}}`, read within a small cap.
async fn body_retry_after(mut resp: reqwest::Response) -> Option<Duration> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ERROR_BODY {
            return None;
        }
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let secs = v.pointer("/parameters/retry_after")?.as_u64()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}
