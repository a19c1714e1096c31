//! Slack-compatible incoming webhooks (Slack, Mattermost, Rocket.Chat): `{"text": …}`, one
//! line as before channels had their own formats (`Pier: web deployment ID succeeded (…)
//! URL`), with an approval's links after it and a digest's apps line by line.

use super::super::message::{Event, Message};
use crate::store::DueNotification;

pub(super) fn body(n: &DueNotification, msg: &Message) -> serde_json::Value {
    if msg.event == Event::Digest {
        return serde_json::json!({ "text": msg.text() });
    }
    let s = |k: &str| n.payload.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let mut text = format!(
        "Pier: {} deployment {} {}",
        n.app,
        s("id"),
        n.event.trim_start_matches("deployment.")
    );
    if !s("digest").is_empty() {
        text.push_str(&format!(" ({}", s("digest")));
        if !s("tag").is_empty() {
            text.push_str(&format!(", tag {}", s("tag")));
        }
        text.push(')');
    }
    if !s("error").is_empty() {
        let e: String = s("error").chars().take(300).collect();
        text.push_str(&format!(": {e}"));
    }
    if !s("waiting_for").is_empty() {
        text.push_str(&format!(": waits for {}", s("waiting_for")));
    }
    text.push_str(&format!(" {}", msg.url));
    if let Some(l) = &msg.links {
        text.push_str(&format!(
            "\n<{}|Approve> · <{}|Reject>",
            l.approve, l.reject
        ));
    }
    serde_json::json!({ "text": text })
}
