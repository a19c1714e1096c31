//! The chat channels of notifications against a recording HTTP server: a real Pier deploys
//! on the real engine, and each format's request (method, path, headers, JSON body) is
//! checked as its service would read it; a 429 with `Retry-After` is waited out, and a
//! receiver that answers 500 forever gets bounded retries and a failed row with the reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::Value;

const DEPLOY: Duration = Duration::from_secs(60);
const ARRIVE: Duration = Duration::from_secs(60);

/// One request a channel made.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Got {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| panic!("not JSON: {self:?}"))
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One scripted answer: a status, maybe a `Retry-After`, maybe a body of its own.
#[derive(Clone)]
pub(crate) struct Answer {
    pub status: u16,
    pub retry_after: Option<&'static str>,
    pub body: Option<&'static str>,
}

/// What a path answers: these first, then `then` forever.
#[derive(Clone)]
pub(crate) struct Script {
    pub first: Vec<Answer>,
    pub then: u16,
}

#[derive(Default)]
struct Shared {
    got: Mutex<Vec<Got>>,
    scripts: HashMap<String, Script>,
    answered: Mutex<HashMap<String, usize>>,
}

/// A loopback HTTP server that records every request and answers by script (200 for a
/// path without one).
pub(crate) struct ChatServer {
    pub base: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn record(
    axum::extract::State(s): axum::extract::State<Arc<Shared>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path().to_owned();
    s.got.lock().unwrap().push(Got {
        method: method.to_string(),
        path: path.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect(),
        body: body.to_vec(),
        at: Instant::now(),
    });
    let n = {
        let mut a = s.answered.lock().unwrap();
        let n = a.entry(path.clone()).or_default();
        *n += 1;
        *n - 1
    };
    let plain = |status| Answer {
        status,
        retry_after: None,
        body: None,
    };
    let a = match s.scripts.get(&path) {
        Some(script) => script
            .first
            .get(n)
            .cloned()
            .unwrap_or_else(|| plain(script.then)),
        None => plain(200),
    };
    let mut resp = (
        axum::http::StatusCode::from_u16(a.status).unwrap(),
        a.body.unwrap_or(r#"{"ok":true}"#),
    )
        .into_response();
    if let Some(r) = a.retry_after {
        resp.headers_mut().insert("retry-after", r.parse().unwrap());
    }
    resp
}

impl ChatServer {
    pub(crate) async fn start(scripts: &[(&str, Script)]) -> ChatServer {
        let shared = Arc::new(Shared {
            scripts: scripts
                .iter()
                .map(|(p, s)| (p.to_string(), s.clone()))
                .collect(),
            ..Default::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(record)
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ChatServer {
            base,
            shared,
            server,
        }
    }

    pub(crate) fn got(&self) -> Vec<Got> {
        self.shared.got.lock().unwrap().clone()
    }

    /// Waits until `done(requests so far)` holds.
    pub(crate) async fn until(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        wait_until(what, ARRIVE, || async {
            let got = self.got();
            done(&got).then_some(got)
        })
        .await
    }
}

fn on<'a>(got: &'a [Got], path: &str) -> Vec<&'a Got> {
    got.iter().filter(|g| g.path == path).collect()
}

#[tokio::test]
async fn each_chat_format_gets_its_own_request_and_a_429_is_waited_out() {
    let (bot, room_token, ntfy_token) = (
        format!("123456:{}", random_hex(24)),
        format!("syt_{}", random_hex(20)),
        format!("tk_{}", random_hex(20)),
    );
    // Slack says when in `Retry-After`; Telegram in its JSON answer.
    let limited = |retry_after, body| Script {
        first: vec![Answer {
            status: 429,
            retry_after,
            body,
        }],
        then: 200,
    };
    let telegram_path = format!("/bot{bot}/sendMessage");
    let chat = ChatServer::start(&[
        ("/slack", limited(Some("2"), None)),
        (
            &telegram_path,
            limited(
                None,
                Some(r#"{"ok":false,"error_code":429,"parameters":{"retry_after":2}}"#),
            ),
        ),
    ])
    .await;
    let b = &chat.base;
    let events = "events = [\"deployment.succeeded\"]";
    let env = TestEnv::builder()
        .pier_env("PIER_TEST_BOT_TOKEN", &bot)
        .pier_env("PIER_TEST_MATRIX_TOKEN", &room_token)
        .sources_toml(&format!(
            "[[notifications]]\nname = \"discord\"\nformat = \"discord\"\nurl = \"{b}/api/webhooks/1/x\"\n{events}\n\
             [[notifications]]\nname = \"teams\"\nformat = \"teams\"\nurl = \"{b}/workflows/teams\"\n{events}\n\
             [[notifications]]\nname = \"ntfy\"\nformat = \"ntfy\"\nurl = \"{b}/pier-topic\"\ntoken = \"{ntfy_token}\"\n{events}\n\
             [[notifications]]\nname = \"telegram\"\nformat = \"telegram\"\napi_url = \"{b}\"\n\
             bot_token = \"env:PIER_TEST_BOT_TOKEN\"\nchat_id = \"-1001\"\n{events}\n\
             [[notifications]]\nname = \"matrix\"\nformat = \"matrix\"\nhomeserver = \"{b}\"\n\
             room_id = \"!ops:example.org\"\naccess_token = \"env:PIER_TEST_MATRIX_TOKEN\"\n{events}\n\
             [[notifications]]\nname = \"slack\"\nformat = \"slack\"\nurl = \"{b}/slack\"\n\
             backoff = \"200ms\"\n{events}\n"
        ))
        .start()
        .await;
    let app = env.app().to_owned();
    let digest = env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded");
    let id = d["id"].as_str().unwrap().to_owned();
    let page = env.pier_url(&format!("/deployments/{id}"));

    let got = chat
        .until("every channel was called, slack and telegram twice", |g| {
            g.len() >= 8 && on(g, "/slack").len() >= 2 && on(g, &telegram_path).len() >= 2
        })
        .await;

    let discord = on(&got, "/api/webhooks/1/x")[0];
    assert_eq!(discord.method, "POST");
    assert_eq!(discord.headers["content-type"], "application/json");
    let body = discord.json();
    assert_eq!(body["allowed_mentions"]["parse"], serde_json::json!([]));
    let embed = &body["embeds"][0];
    assert_eq!(embed["title"], format!("{app}: deployment succeeded"));
    assert_eq!(embed["url"], page);
    assert_eq!(embed["color"], 0x2ea043);
    assert!(embed["fields"].to_string().contains(&digest), "{body:#}");

    let teams = on(&got, "/workflows/teams")[0].json();
    assert_eq!(teams["type"], "message");
    let att = &teams["attachments"][0];
    assert_eq!(
        att["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(att["content"]["type"], "AdaptiveCard");
    assert_eq!(att["content"]["actions"][0]["type"], "Action.OpenUrl");
    assert_eq!(att["content"]["actions"][0]["url"], page);
    let facts = att["content"]["body"][2]["facts"].to_string();
    assert!(facts.contains(&digest), "{teams:#}");

    let ntfy = on(&got, "/pier-topic")[0];
    assert_eq!(
        ntfy.headers["title"],
        format!("{app}: deployment succeeded")
    );
    assert_eq!(ntfy.headers["priority"], "3");
    assert_eq!(ntfy.headers["tags"], "white_check_mark,pier");
    assert_eq!(ntfy.headers["click"], page);
    assert_eq!(
        ntfy.headers["authorization"],
        format!("Bearer {ntfy_token}")
    );
    assert!(ntfy.text().contains(&digest), "{ntfy:?}");

    let tg = on(&got, &telegram_path);
    assert!(tg[1].at - tg[0].at >= Duration::from_millis(1900), "{tg:?}");
    let telegram = tg[1].json();
    assert_eq!(telegram["chat_id"], "-1001");
    assert_eq!(telegram["parse_mode"], "HTML");
    let text = telegram["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("<b>Pier: {app} deployment")),
        "{text}"
    );
    assert!(text.contains(&format!("<a href=\"{page}\">")), "{text}");

    let matrix = got
        .iter()
        .find(|g| g.path.starts_with("/_matrix/"))
        .expect("a Matrix request");
    assert_eq!(matrix.method, "PUT");
    let txn = matrix.path.rsplit('/').next().unwrap().to_owned();
    assert_eq!(
        matrix.path,
        format!("/_matrix/client/v3/rooms/%21ops%3Aexample.org/send/m.room.message/{txn}")
    );
    assert_eq!(
        matrix.headers["authorization"],
        format!("Bearer {room_token}")
    );
    let m = matrix.json();
    assert_eq!(m["msgtype"], "m.notice");
    assert_eq!(m["format"], "org.matrix.custom.html");
    assert!(m["body"].as_str().unwrap().contains(&page), "{m:#}");

    // Slack said 429 with Retry-After: 2; the retry came no sooner, though the endpoint's
    // own backoff is 200 ms.
    let slack = on(&got, "/slack");
    assert!(slack[1].at - slack[0].at >= Duration::from_millis(1900));
    assert!(
        slack[1].json()["text"]
            .as_str()
            .unwrap()
            .contains("succeeded")
    );

    let log = wait_until("every notification is sent", ARRIVE, || async {
        let (_, log) = env.api_get("/notifications").await;
        let all = log["notifications"].as_array()?.clone();
        (all.len() == 6 && all.iter().all(|n| n["state"] == "sent")).then_some(all)
    })
    .await;
    let slack_row = log.iter().find(|n| n["endpoint"] == "slack").unwrap();
    assert_eq!(slack_row["log"][0]["status"], 429, "{slack_row:#}");
    assert_eq!(slack_row["log"][1]["status"], 200, "{slack_row:#}");
    // Matrix's transaction id is the notification's: a retry is the same message.
    let matrix_row = log.iter().find(|n| n["endpoint"] == "matrix").unwrap();
    assert_eq!(txn, matrix_row["id"].as_str().unwrap().replace('-', ""));
    // The tokens are in no log line and no answer.
    let answer = serde_json::to_string(&log).unwrap();
    for secret in [&bot, &room_token, &ntfy_token] {
        assert!(!env.pier().log().contains(secret.as_str()));
        assert!(!answer.contains(secret.as_str()));
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_receiver_answering_500_and_an_smtp_server_that_never_speaks_fail_with_reasons() {
    let chat = ChatServer::start(&[(
        "/broken",
        Script {
            first: vec![],
            then: 500,
        },
    )])
    .await;
    // Accepts every connection and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let smtp_port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            conns.push(c);
        }
    });
    let env = TestEnv::builder()
        .sources_toml(&format!(
            "[[notifications]]\nname = \"broken\"\nformat = \"discord\"\nurl = \"{}/broken\"\n\
             max_attempts = 3\nbackoff = \"200ms\"\n\
             [[notifications]]\nname = \"mail\"\nformat = \"email\"\nsmtp_host = \"127.0.0.1\"\n\
             smtp_port = {smtp_port}\nfrom = \"pier@example.org\"\nto = [\"ops@example.org\"]\n\
             timeout = \"2s\"\nmax_attempts = 2\nbackoff = \"200ms\"\n",
            chat.base
        ))
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded");

    let rows = wait_until("both notifications have given up", ARRIVE, || async {
        let (_, log) = env.api_get("/notifications").await;
        let all = log["notifications"].as_array()?.clone();
        (all.len() == 2 && all.iter().all(|n| n["state"] == "failed")).then_some(all)
    })
    .await;
    let broken = rows.iter().find(|n| n["endpoint"] == "broken").unwrap();
    assert_eq!(broken["attempts"], 3, "{broken:#}");
    assert!(
        broken["last_error"].as_str().unwrap().contains("500"),
        "{broken:#}"
    );
    for a in broken["log"].as_array().unwrap() {
        assert_eq!(a["status"], 500, "{broken:#}");
    }
    assert_eq!(
        on(&chat.got(), "/broken").len(),
        3,
        "no more than max_attempts"
    );

    let mail = rows.iter().find(|n| n["endpoint"] == "mail").unwrap();
    assert_eq!(mail["attempts"], 2, "{mail:#}");
    let why = mail["last_error"].as_str().unwrap();
    assert!(why.contains("did not finish within"), "{mail:#}");
    for a in mail["log"].as_array().unwrap() {
        assert!(a["status"].is_null());
        // The 2 s deadline held: an attempt did not wait for the silent server (a bound
        // far above 2 s, for a loaded machine).
        assert!(a["took_ms"].as_i64().unwrap() < 20_000, "{mail:#}");
    }
    held.abort();
    env.cleanup().await;
}

#[tokio::test]
async fn check_names_the_field_a_channel_lacks_and_never_prints_its_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = format!("123456:{}", random_hex(24));
    let text = format!(
        r#"[server]
database_url = "postgres://pier:pier@127.0.0.1:{db}/pier"

[[apps]]
name = "web"
image = "127.0.0.1:5000/demo/web"
port = 8080
publish = "127.0.0.1:{publish}"

[[notifications]]
name = "tg"
format = "telegram"
bot_token = "env:PIER_CHECK_TEST_BOT"
"#,
        db = free_port(),
        publish = free_port(),
    );
    let config = dir.path().join("pier.toml");
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    let out = run_pier_client(
        dir.path(),
        &[("PIER_CHECK_TEST_BOT", &token)],
        &["--config", &c, "check"],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("notification `tg`: format `telegram` needs `chat_id`"),
        "{err}"
    );
    assert!(!err.contains(&token), "{err}");
}
