//! Standard Webhooks: the notification's JSON (`type`, `timestamp`, `data`, `url`, and an
//! approval's `links`), signed with `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::super::message::{Event, Message};
use super::{Call, USER_AGENT};
use crate::config::standard_webhooks_key;

/// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, as Standard Webhooks defines it.
pub(crate) fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

fn body(call: &Call<'_>, msg: &Message) -> serde_json::Value {
    let n = call.n;
    let when = if msg.event == Event::Digest {
        "to"
    } else {
        "finished_at"
    };
    let mut b = serde_json::json!({
        "type": n.event,
        "timestamp": n.payload.get(when),
        "data": n.payload,
        "url": msg.url,
    });
    if let Some(l) = &msg.links {
        b["links"] = serde_json::json!({ "approve": l.approve, "reject": l.reject });
    }
    b
}

pub(super) async fn send(
    call: &Call<'_>,
    url: &str,
    secret: &str,
    msg: &Message,
) -> super::Attempt {
    let body = serde_json::to_vec(&body(call, msg)).unwrap_or_default();
    // Checked when the config was loaded.
    let key = standard_webhooks_key(secret).unwrap_or_default();
    let id = format!("msg_{}", call.n.id.simple());
    let ts = chrono::Utc::now().timestamp();
    let req = call
        .http
        .post(url)
        .timeout(call.timeout)
        .header("content-type", "application/json")
        .header("user-agent", USER_AGENT)
        .header("webhook-id", &id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sign(&key, &id, ts, &body))
        .body(body);
    super::send(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let key = standard_webhooks_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
