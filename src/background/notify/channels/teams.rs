//! Microsoft Teams through a Workflows webhook ("Post to a channel when a webhook request
//! is received"): a `message` whose one attachment is an Adaptive Card, with the facts as
//! a FactSet and the page (and an approval's links) as OpenUrl actions.

use super::super::message::{Message, Tone};

pub(super) fn body(msg: &Message) -> serde_json::Value {
    let colour = match msg.tone {
        Tone::Good => "Good",
        Tone::Bad => "Attention",
        Tone::Asks => "Warning",
        Tone::Quiet => "Default",
    };
    let facts: Vec<serde_json::Value> = msg
        .facts
        .iter()
        .map(|(k, v)| serde_json::json!({ "title": k, "value": v }))
        .collect();
    let mut actions = vec![serde_json::json!({
        "type": "Action.OpenUrl", "title": "Open in Pier", "url": msg.url,
    })];
    if let Some(l) = &msg.links {
        actions.push(
            serde_json::json!({ "type": "Action.OpenUrl", "title": "Approve", "url": l.approve }),
        );
        actions.push(
            serde_json::json!({ "type": "Action.OpenUrl", "title": "Reject", "url": l.reject }),
        );
    }
    let card = serde_json::json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            { "type": "TextBlock", "text": msg.title, "weight": "Bolder", "size": "Medium",
              "color": colour, "wrap": true },
            { "type": "TextBlock", "text": msg.summary, "wrap": true },
            { "type": "FactSet", "facts": facts },
        ],
        "actions": actions,
    });
    serde_json::json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": card,
        }],
    })
}
