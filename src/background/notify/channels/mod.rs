//! One file per channel format, each turning a [`Message`] into its target's own request:
//! Standard Webhooks (signed JSON), Slack and Discord webhooks, a Teams Adaptive Card, an
//! ntfy topic, Telegram's Bot API, a Matrix room, an email. Every request has the
//! endpoint's deadline and follows no redirect; every answer becomes an [`Attempt`].

mod discord;
mod email;
mod matrix;
mod ntfy;
mod slack;
mod standard_webhooks;
mod teams;
mod telegram;

use std::time::Duration;

use super::message::Message;
use super::outcome::Attempt;
use crate::config::Destination;
use crate::store::DueNotification;

/// What every channel's send needs beside its own settings.
pub(crate) struct Call<'a> {
    pub http: &'a reqwest::Client,
    /// The endpoint's deadline for the whole attempt.
    pub timeout: Duration,
    pub n: &'a DueNotification,
}

const USER_AGENT: &str = concat!("pier/", env!("CARGO_PKG_VERSION"));

/// Sends `msg` to `dest`.
pub(crate) async fn deliver(call: &Call<'_>, dest: &Destination, msg: &Message) -> Attempt {
    match dest {
        Destination::StandardWebhooks { url, key } => {
            standard_webhooks::send(call, url.expose(), key.expose(), msg).await
        }
        Destination::Slack { url } => {
            post_json(call, url.expose(), &slack::body(call.n, msg)).await
        }
        Destination::Discord { url } => post_json(call, url.expose(), &discord::body(msg)).await,
        Destination::Teams { url } => post_json(call, url.expose(), &teams::body(msg)).await,
        Destination::Ntfy { url, token } => {
            ntfy::send(call, url.expose(), token.as_ref(), msg).await
        }
        Destination::Telegram {
            api_url,
            bot_token,
            chat_id,
        } => telegram::send(call, (api_url.as_str(), bot_token.expose()), chat_id, msg).await,
        Destination::Matrix {
            homeserver,
            room_id,
            access_token,
        } => {
            matrix::send(
                call,
                (homeserver.as_str(), room_id.as_str()),
                access_token.expose(),
                msg,
            )
            .await
        }
        Destination::Email(mail) => email::send(call, mail, msg).await,
    }
}

/// A JSON POST with the endpoint's deadline; the answer's status decides.
async fn post_json(call: &Call<'_>, url: &str, body: &serde_json::Value) -> Attempt {
    let req = call
        .http
        .post(url)
        .timeout(call.timeout)
        .header("content-type", "application/json")
        .header("user-agent", USER_AGENT)
        .body(serde_json::to_vec(body).unwrap_or_default());
    send(req).await
}

async fn send(req: reqwest::RequestBuilder) -> Attempt {
    match req.send().await {
        Ok(resp) => Attempt::answered(resp.status(), resp.headers()),
        Err(e) => Attempt::transport(e),
    }
}

/// At most `max` characters of `s`, with `…` when cut: chat services refuse longer fields.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut c: String = s.chars().take(max.saturating_sub(1)).collect();
    c.push('…');
    c
}
