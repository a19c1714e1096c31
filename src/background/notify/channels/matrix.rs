//! Matrix: `PUT /_matrix/client/v3/rooms/{roomId}/send/m.room.message/{txnId}` on the
//! homeserver with the access token as `Authorization: Bearer`, an `m.notice` with a plain
//! body and the same as HTML. The transaction id is the notification's id, so a retry of a
//! message the homeserver did get is recognised there and posted once.

use super::super::message::Message;
use super::super::outcome::Attempt;
use super::{Call, USER_AGENT};

/// A path segment with everything but RFC 3986's unreserved characters percent-encoded
/// (a room id holds `!` and `:`).
pub(super) fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn body(msg: &Message) -> serde_json::Value {
    serde_json::json!({
        "msgtype": "m.notice",
        "body": msg.text(),
        "format": "org.matrix.custom.html",
        "formatted_body": msg.html().replace('\n', "<br>"),
    })
}

pub(super) async fn send(
    call: &Call<'_>,
    (homeserver, room_id): (&str, &str),
    access_token: &str,
    msg: &Message,
) -> Attempt {
    let url = format!(
        "{homeserver}/_matrix/client/v3/rooms/{}/send/m.room.message/{}",
        segment(room_id),
        call.n.id.simple()
    );
    let req = call
        .http
        .put(url)
        .timeout(call.timeout)
        .bearer_auth(access_token)
        .header("content-type", "application/json")
        .header("user-agent", USER_AGENT)
        .body(serde_json::to_vec(&body(msg)).unwrap_or_default());
    super::send(req).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_room_id_is_one_path_segment() {
        assert_eq!(super::segment("!ops:example.org"), "%21ops%3Aexample.org");
        assert_eq!(super::segment("a/b?c"), "a%2Fb%3Fc");
    }
}
