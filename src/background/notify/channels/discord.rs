//! Discord webhooks: one embed with the title linking to Pier, a colour by outcome, the
//! facts as fields. `allowed_mentions` is empty, so an error text that says `@everyone`
//! pings nobody.

use super::super::message::{Message, Tone};
use super::cut;

/// Discord's own limits: title 256, description 4096, field value 1024, 25 fields.
const TITLE: usize = 256;
const VALUE: usize = 1024;
const FIELDS: usize = 25;

fn colour(tone: Tone) -> u32 {
    match tone {
        Tone::Good => 0x2e_a0_43,
        Tone::Bad => 0xd1_24_2f,
        Tone::Asks => 0xbf_87_00,
        Tone::Quiet => 0x57_60_6a,
    }
}

pub(super) fn body(msg: &Message) -> serde_json::Value {
    let mut fields: Vec<serde_json::Value> = msg
        .facts
        .iter()
        .take(FIELDS - 1)
        .map(|(k, v)| serde_json::json!({ "name": cut(k, TITLE), "value": cut(v, VALUE), "inline": v.len() < 40 }))
        .collect();
    if let Some(l) = &msg.links {
        fields.push(serde_json::json!({
            "name": "Decide",
            "value": format!("[Approve]({}) · [Reject]({})", l.approve, l.reject),
            "inline": false,
        }));
    }
    serde_json::json!({
        "username": "Pier",
        "allowed_mentions": { "parse": [] },
        "embeds": [{
            "title": cut(&msg.title, TITLE),
            "description": cut(&msg.summary, 4096),
            "url": msg.url,
            "color": colour(msg.tone),
            "fields": fields,
        }],
    })
}
