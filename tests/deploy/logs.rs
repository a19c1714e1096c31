//! An app's log as its engine keeps it, through `GET /api/apps/{app}/logs`, `pier logs`
//! and the log views of the pages: the serving container's lines with their stream and
//! time, the app's secrets masked (as written and base64-encoded), `since` and `tail`
//! honoured, a followed log showing new lines as the app writes them (the CLI and the
//! page's event stream), every bad query refused with its reason, and a flood of output
//! read slowly or not at all never growing Pier's memory past a cap.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);

async fn env_with_a_talking_app() -> TestEnv {
    let env = talking_app(TestEnv::builder()).start().await;
    deployed(&env).await;
    env
}

/// Pushes v1 and waits until it serves (its `switch` journaled).
async fn deployed(env: &TestEnv) {
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(env.app(), &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
}

/// `GET /api/apps/{app}/logs?{query}` with the admin token: status and the lines.
async fn api_logs(env: &TestEnv, app: &str, query: &str) -> (u16, Vec<Value>) {
    let resp = http_client()
        .get(env.pier_url(&format!("/api/apps/{app}/logs?{query}")))
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
        let (status, lines) = api_logs(env, env.app(), "tail=1000").await;
        let last = ticks(texts(&lines)).into_iter().max()?;
        (status == 200 && last >= n).then_some(lines)
    })
    .await
}

fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("v", s)]).unwrap()[2..].to_owned()
}

/// The error of a refused answer, which must name `reason`.
fn refused(answer: &(u16, Vec<Value>), status: u16, reason: &str) {
    assert_eq!(answer.0, status, "{:?}", answer.1);
    let error = answer.1[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains(reason), "{error:?} should say {reason:?}");
}

#[tokio::test]
async fn an_apps_log_is_read_with_its_secrets_masked_and_since_and_tail_honoured() {
    let env = env_with_a_talking_app().await;
    let app = env.app().to_owned();
    let lines = wait_ticks(&env, 3).await;
    let all = texts(&lines);
    assert!(all.contains(&"token=***"), "{all:?}");
    assert!(all.iter().any(|l| l.starts_with("b64:***")), "{all:?}");
    let joined = all.join("\n");
    assert!(!joined.contains(LOG_SECRET), "the secret leaked: {joined}");
    let oops = lines
        .iter()
        .find(|l| l["text"] == "oops on stderr")
        .expect("the stderr line");
    assert_eq!(oops["stream"], "stderr");
    assert!(lines.iter().all(|l| l["at"].is_string()), "{lines:#?}");
    assert!(lines.iter().any(|l| l["stream"] == "stdout"));

    // `tail` keeps the last lines, `since` drops what came before it, to the nanosecond.
    let (_, last) = api_logs(&env, &app, "tail=2").await;
    assert_eq!(last.len(), 2, "{last:#?}");
    let at_of = |n: u32| {
        lines
            .iter()
            .find(|l| l["text"] == format!("tick {n}"))
            .and_then(|l| l["at"].as_str())
            .map(str::to_owned)
            .expect("that tick")
    };
    let (_, later) = api_logs(&env, &app, &format!("since={}", urlencode(&at_of(3)))).await;
    let later = texts(&later);
    assert_eq!(ticks(later.iter().copied()).first(), Some(&3), "{later:?}");
    assert!(
        !later.contains(&"token=***"),
        "since is honoured: {later:?}"
    );
    let (_, recent) = api_logs(&env, &app, "since=1h").await;
    assert!(texts(&recent).contains(&"token=***"), "{recent:?}");

    // Every bad query is refused with its reason; no token, no log.
    refused(&api_logs(&env, &app, "tail=5001").await, 400, "tail");
    refused(
        &api_logs(&env, &app, "since=yesterday-ish").await,
        400,
        "since",
    );
    refused(
        &api_logs(&env, &app, "service=nope").await,
        404,
        "service `nope`",
    );
    refused(
        &api_logs(&env, &app, "target=nope").await,
        404,
        "target `nope`",
    );
    refused(
        &api_logs(&env, "no-such-app", "").await,
        404,
        "app `no-such-app`",
    );
    let gone = "deployment=00000000-0000-0000-0000-000000000000";
    refused(&api_logs(&env, &app, gone).await, 404, "gone");
    let anonymous = http_client()
        .get(env.pier_url(&format!("/api/apps/{app}/logs")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);

    // The page needs a session, shows the last lines masked, and keeps its form.
    let page = get_anonymous(&env.pier_url(&format!("/apps/{app}/logs"))).await;
    assert_eq!(page.status, 303, "the log page needs a session: {page:?}");
    let events = get_anonymous(&env.pier_url(&format!("/apps/{app}/logs/events"))).await;
    assert_eq!(events.status, 401);
    let admin = SignedIn::new(&env.pier_url(""), "admin", &env.admin_token).await;
    let page = admin
        .get(&format!("/apps/{app}/logs?tail=20&since=1h"))
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("tick "), "the page shows the last lines");
    assert!(
        page.body.contains(r#"class="log-line stderr""#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"value="1h""#),
        "the form keeps its values"
    );
    assert!(!page.body.contains(LOG_SECRET));
    let page = admin.get(&format!("/apps/{app}/logs?service=nope")).await;
    assert_eq!(page.status, 404);
    assert!(page.body.contains("service `nope`"), "{}", page.body);
    let app_page = admin.get(&format!("/apps/{app}")).await;
    assert!(
        app_page
            .body
            .contains(&format!(r#"data-log="/apps/{app}/logs/events""#)),
        "the app page has a live log view: {}",
        app_page.body
    );
    env.cleanup().await;
}

/// The next `line` event of a log view's event stream with a tick above `above`.
async fn page_tick_above(admin: &SignedIn, app: &str, above: u32) -> u32 {
    let resp = http_client()
        .get(format!("{}/apps/{app}/logs/events?tail=0", admin.base))
        .header("Cookie", &admin.cookie)
        .send()
        .await
        .expect("the event stream answers");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let read = async {
        while let Some(Ok(chunk)) = body.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(at) = buf.find("\n\n") {
                let block: String = buf.drain(..at + 2).collect();
                if !block.lines().any(|l| l == "event: line") {
                    continue;
                }
                let data = block.lines().find_map(|l| l.strip_prefix("data: "));
                let line: Value = serde_json::from_str(data.expect("data")).expect("a JSON line");
                if let Some(&n) = ticks(line["text"].as_str()).first()
                    && n > above
                {
                    return n;
                }
            }
        }
        panic!("the event stream ended");
    };
    tokio::time::timeout(DEPLOY, read)
        .await
        .expect("the page's stream shows new lines as they come")
}

#[tokio::test]
async fn pier_logs_follows_new_lines_as_the_app_writes_them_and_so_does_the_page() {
    let env = env_with_a_talking_app().await;
    let before = ticks(texts(&wait_ticks(&env, 1).await))
        .into_iter()
        .max()
        .unwrap();
    let token = &env.admin_token;
    let mut follow = PierLogs::start(&env.pier_url(""), token, &[env.app(), "-f", "-n", "100"]);
    let no_secret = |line: &str| assert!(!line.contains(LOG_SECRET), "{line}");
    // A tick the app wrote after `pier logs` started, whose number no read before had.
    let newer = follow.tick_above(before + 2, DEPLOY, no_secret).await;
    assert!(newer > before + 2);
    assert!(follow.is_running(), "it follows until stopped");
    let stderr = follow.stop().await;
    assert!(
        stderr.contains("oops on stderr"),
        "stderr lines to stderr: {stderr}"
    );

    let admin = SignedIn::new(&env.pier_url(""), "admin", &env.admin_token).await;
    let shown = page_tick_above(&admin, env.app(), newer).await;
    assert!(shown > newer);
    env.cleanup().await;
}

/// `FLOOD` lines of 20,000 bytes (longer than Pier keeps of a line) as fast as the shell
/// writes them, once `/tmp/go` exists, then `flood done` and a tick a second.
const FLOOD: u32 = 5000;
const FLOODING: &str = "trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /www & \
    line=$(/bin/busybox head -c 20000 /dev/zero | /bin/busybox tr '\\0' x); \
    while [ ! -e /tmp/go ]; do /bin/busybox sleep 1; done; \
    i=0; while [ $i -lt 5000 ]; do echo \"$i $line\"; i=$((i+1)); done; echo flood done; \
    while true; do /bin/busybox sleep 1; echo tick; done";
/// What Pier's resident memory may grow by while the flood is read slowly or not at all:
/// far less than the flood (100 MB) that buffering would hold.
const RSS_CAP: u64 = 30 << 20;

#[tokio::test]
async fn a_flood_of_output_read_slowly_or_not_at_all_never_grows_piers_memory_past_a_cap() {
    let env = TestEnv::builder()
        .app(|a| a.extra_toml = command_toml(FLOODING))
        .start()
        .await;
    deployed(&env).await;
    let (app, pid) = (env.app().to_owned(), env.pier().pid().expect("pier's pid"));
    let container = env
        .engine
        .running_containers_of_app(&app)
        .await
        .pop()
        .and_then(|c| c.id)
        .expect("the app's container");
    let follow = || {
        http_client()
            .get(env.pier_url(&format!("/api/apps/{app}/logs?follow=true&tail=0")))
            .bearer_auth(&env.admin_token)
            .send()
    };
    // Warm: one read of the log, then the baseline.
    assert_eq!(api_logs(&env, &app, "tail=10").await.0, 200);
    let baseline = vm_rss(pid);

    // One reader that reads nothing, one that reads a chunk every 50 ms.
    let idle = follow().await.expect("the idle reader's answer");
    assert_eq!(idle.status(), 200);
    let slow = follow().await.expect("the slow reader's answer");
    assert_eq!(slow.status(), 200);
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = read.clone();
    let slow_reader = tokio::spawn(async move {
        let mut body = slow.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            counted.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let (ok, out) = docker_cli(&["exec", &container, "/bin/busybox", "touch", "/tmp/go"]);
    assert!(ok, "start the flood: {out}");

    // Until the app has written the whole flood and the slow reader got half a megabyte
    // of it, Pier's memory is sampled every 50 ms; its peak stays within the cap.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampled = peak.clone();
    let sampler = tokio::spawn(async move {
        loop {
            sampled.fetch_max(vm_rss(pid), std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let started = Instant::now();
    loop {
        let id = container.clone();
        let (_, tail) =
            tokio::task::spawn_blocking(move || docker_cli(&["logs", "--tail", "3", &id]))
                .await
                .unwrap();
        let done = tail.contains("flood done") || tail.contains("tick");
        if done && read.load(std::sync::atomic::Ordering::Relaxed) > 512 << 10 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the flood was not written and read within 180 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    sampler.abort();
    let peak = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(vm_rss(pid));
    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "pier's VmRSS: {} MiB before, {} MiB at most during a flood of {FLOOD} lines of 20 kB \
         (grew {} MiB)",
        baseline >> 20,
        peak >> 20,
        grown >> 20
    );
    assert!(
        grown < RSS_CAP,
        "pier grew by {} MiB (cap {} MiB)",
        grown >> 20,
        RSS_CAP >> 20
    );
    // Readers that go away free their slots: as many follows as allowed work again.
    slow_reader.abort();
    drop(idle);
    let mut again = Vec::new();
    for _ in 0..16 {
        let r = wait_until("a follower's slot", DEPLOY, || async {
            follow().await.ok().filter(|r| r.status() == 200)
        })
        .await;
        again.push(r);
    }
    let one_more = follow().await.expect("an answer");
    assert_eq!(
        one_more.status(),
        503,
        "at most 16 logs are followed at once"
    );
    drop(again);
    env.cleanup().await;
}
