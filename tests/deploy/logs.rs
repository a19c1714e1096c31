//! An app's log as its engine keeps it, through `GET /api/apps/{app}/logs`, `pier logs`
//! and the log page: the serving container's lines with their stream and time, the app's
//! secrets masked (as written and base64-encoded), `since` and `tail` honoured, a followed
//! log showing new lines as the app writes them, and every bound refused with a reason.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);
const SECRET: &str = "s3cret-log-token";

/// Prints its secret (plain and base64), a line on stderr, then a numbered tick a second
/// while it serves.
const SCRIPT: &str = "trap 'exit 0' TERM; /bin/busybox echo \"token=$API_TOKEN\"; \
    /bin/busybox printf 'b64:%s\\n' \"$(/bin/busybox printf %s \"$API_TOKEN\" | /bin/busybox base64)\"; \
    /bin/busybox echo 'oops on stderr' >&2; /bin/busybox httpd -f -p 8080 -h /www & \
    i=0; while true; do /bin/busybox echo tick $i; i=$((i+1)); /bin/busybox sleep 1; done";

async fn env_with_a_talking_app() -> TestEnv {
    let env = TestEnv::builder()
        .app(|a| {
            a.env
                .insert("API_TOKEN".into(), "env:PIER_TEST_LOG_TOKEN".into());
            a.extra_toml = format!(
                "command = [\"/bin/busybox\", \"sh\", \"-c\", {}]",
                toml::Value::String(SCRIPT.into())
            );
        })
        .pier_env("PIER_TEST_LOG_TOKEN", SECRET)
        .start()
        .await;
    env.push(&TestImage::healthy("v1"), "main").await;
    env.wait_app_version("v1", DEPLOY).await;
    env
}

/// `GET /api/apps/{app}/logs?{query}` with the admin token: status and the lines.
async fn api_logs(env: &TestEnv, query: &str) -> (u16, Vec<Value>) {
    let resp = http_client()
        .get(env.pier_url(&format!("/api/apps/{}/logs?{query}", env.app())))
        .bearer_auth(&env.admin_token)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("the log API answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::String(l.to_owned())))
        .collect();
    (status, lines)
}

fn texts(lines: &[Value]) -> Vec<&str> {
    lines.iter().filter_map(|l| l["text"].as_str()).collect()
}

/// Waits until the log holds a tick numbered `n` or more; returns the lines.
async fn wait_ticks(env: &TestEnv, n: u32) -> Vec<Value> {
    wait_until(&format!("tick {n} in the log"), DEPLOY, || async move {
        let (status, lines) = api_logs(env, "tail=1000").await;
        let ticks = texts(&lines)
            .iter()
            .filter_map(|t| t.strip_prefix("tick ")?.parse::<u32>().ok())
            .max()?;
        (status == 200 && ticks >= n).then_some(lines)
    })
    .await
}

#[tokio::test]
async fn an_apps_log_is_read_with_its_secrets_masked_and_since_and_tail_honoured() {
    let env = env_with_a_talking_app().await;
    let lines = wait_ticks(&env, 3).await;
    let all = texts(&lines);
    assert!(all.contains(&"token=***"), "{all:?}");
    let joined = all.join("\n");
    assert!(!joined.contains(SECRET), "the secret leaked: {joined}");
    let b64 = base64_of(SECRET);
    assert!(!joined.contains(b64.trim_end_matches('=')), "{joined}");
    let oops = lines
        .iter()
        .find(|l| l["text"] == "oops on stderr")
        .expect("the stderr line");
    assert_eq!(oops["stream"], "stderr");
    assert!(lines.iter().all(|l| l["at"].is_string()), "{lines:#?}");

    // `tail` keeps the last lines, `since` drops what came before it.
    let (_, last) = api_logs(&env, "tail=2").await;
    assert_eq!(last.len(), 2, "{last:#?}");
    assert_eq!(last[1]["text"], lines.last().unwrap()["text"]);
    let tick = |n: u32| {
        lines
            .iter()
            .find(|l| l["text"] == format!("tick {n}"))
            .and_then(|l| l["at"].as_str())
            .map(str::to_owned)
            .expect("that tick")
    };
    let since = tick(3);
    let (_, later) = api_logs(&env, &format!("tail=1000&since={}", urlencode(&since))).await;
    let later = texts(&later);
    assert!(later.contains(&"tick 3"), "{later:?}");
    assert!(
        !later.contains(&"token=***"),
        "since is honoured: {later:?}"
    );

    // Every bound is a 4xx with its reason; no token, no log.
    let (status, body) = api_logs(&env, "tail=5001").await;
    assert_eq!(status, 400, "{body:?}");
    let (status, body) = api_logs(&env, "service=nope").await;
    assert_eq!(status, 400, "{body:?}");
    assert!(
        body[0]["error"]
            .as_str()
            .unwrap()
            .contains("no service nope"),
        "{body:?}"
    );
    let (status, _) = api_logs(&env, "since=yesterday-ish").await;
    assert_eq!(status, 400);
    let anonymous = http_client()
        .get(env.pier_url(&format!("/api/apps/{}/logs", env.app())))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let page = get_anonymous(&env.pier_url(&format!("/apps/{}/logs", env.app()))).await;
    assert_eq!(page.status, 303, "the log page needs a session: {page:?}");
    let admin = SignedIn::new(&env.pier_url(""), "admin", &env.admin_token).await;
    let page = admin
        .get(&format!("/apps/{}/logs?tail=20", env.app()))
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("tick "), "the page shows the last lines");
    assert!(!page.body.contains(SECRET));
    env.cleanup().await;
}

#[tokio::test]
async fn pier_logs_follows_new_lines_as_the_app_writes_them() {
    let env = env_with_a_talking_app().await;
    let seen = wait_ticks(&env, 1).await;
    let before = texts(&seen)
        .iter()
        .filter_map(|t| t.strip_prefix("tick ")?.parse::<u32>().ok())
        .max()
        .unwrap();
    let config = std::fs::read_to_string(env.pier().config_path()).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pier"))
        .args(["logs", env.app(), "-f", "--tail", "5"])
        .env("PIER_URL", env.pier_url(""))
        .env(
            "PIER_TOKEN",
            admin_token_of(&config).expect("an inline admin token"),
        )
        .env_remove("PIER_TOKEN_FILE")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run pier logs -f");
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // A tick the app wrote after `pier logs` started, whose number no read before had.
    let newer = tokio::time::timeout(DEPLOY, async {
        while let Ok(Some(line)) = out.next_line().await {
            assert!(!line.contains(SECRET), "{line}");
            if let Some(n) = line
                .strip_prefix("tick ")
                .and_then(|n| n.parse::<u32>().ok())
                && n > before + 2
            {
                return n;
            }
        }
        panic!("pier logs -f ended before a new line");
    })
    .await
    .expect("pier logs -f shows new lines as they come");
    assert!(newer > before + 2);
    assert!(
        child.try_wait().unwrap().is_none(),
        "it follows until stopped"
    );
    child.kill().await.unwrap();
    env.cleanup().await;
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("v", s)]).unwrap()[2..].to_owned()
}
