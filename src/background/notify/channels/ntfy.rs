//! ntfy: the message as the POST body to the topic URL, with `Title`, `Priority` (by
//! outcome), `Tags` (emoji short codes), `Click` (the page), an approval's links as
//! `Actions`, and the access token, when given, as `Authorization: Bearer`.

use super::super::message::{Event, Message, Tone};
use super::{Call, USER_AGENT, cut};
use crate::config::Secret;

/// ntfy's priorities: 2 low, 3 default, 4 high.
fn priority(tone: Tone) -> &'static str {
    match tone {
        Tone::Good => "3",
        Tone::Bad | Tone::Asks => "4",
        Tone::Quiet => "2",
    }
}

fn tags(event: Event) -> &'static str {
    match event {
        Event::Succeeded => "white_check_mark,pier",
        Event::Failed => "x,pier",
        Event::RolledBack => "rewind,pier",
        Event::AwaitingApproval => "hourglass,pier",
        Event::OomKilled | Event::RestartLoop => "warning,pier",
        Event::Digest => "newspaper,pier",
    }
}

/// A header value is visible ASCII: anything else in a title is replaced.
fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

pub(super) async fn send(
    call: &Call<'_>,
    url: &str,
    token: Option<&Secret>,
    msg: &Message,
) -> super::Attempt {
    let mut text = msg.summary.clone();
    for (k, v) in &msg.facts {
        text.push_str(&format!("\n{k}: {v}"));
    }
    let mut req = call
        .http
        .post(url)
        .timeout(call.timeout)
        .header("user-agent", USER_AGENT)
        .header("content-type", "text/plain; charset=utf-8")
        .header("Title", ascii(&cut(&msg.title, 200)))
        .header("Priority", priority(msg.tone))
        .header("Tags", tags(msg.event))
        .header("Click", ascii(&msg.url));
    if let Some(l) = &msg.links {
        req = req.header(
            "Actions",
            ascii(&format!(
                "view, Approve, {}; view, Reject, {}",
                l.approve, l.reject
            )),
        );
    }
    if let Some(t) = token {
        req = req.bearer_auth(t.expose());
    }
    super::send(req.body(text)).await
}
