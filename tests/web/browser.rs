//! The status page in a real browser: Debian's headless Chromium driven through
//! chromedriver (WebDriver), against a running `pier serve` with the real engine and
//! registry. An operator signs in, sees the app running, redeploys and watches the new
//! deployment's timeline reach `succeeded` without a reload, rolls back to the earlier
//! digest, sees a following push leave the pinned app alone, unpins, and sees the newest
//! push deploy; the app page's log view follows the log live and pauses. Every page is
//! saved as a screenshot under `target/browser-screenshots/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;
use fantoccini::{Client, ClientBuilder, Locator};

const DEPLOY: Duration = Duration::from_secs(90);

/// chromedriver, killed (with its browser) when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn browser(profile: &std::path::Path) -> (Driver, Client) {
    let port = free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian package chromium-driver) runs");
    let driver = Driver(child);
    let status = format!("http://127.0.0.1:{port}/status");
    wait_until("chromedriver answers", Duration::from_secs(20), || async {
        matches!(http_get(&status).await, Some((200, _))).then_some(())
    })
    .await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", format!("--user-data-dir={}", profile.display())],
        }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session");
    (driver, client)
}

fn shots_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("browser-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(shots_dir().join(format!("{name}.png")), png).expect("save screenshot");
}

async fn source(c: &Client) -> String {
    c.source().await.expect("page source")
}

/// Waits until the page (as it is now, never reloaded by the test) satisfies `ok`.
async fn until_page(c: &Client, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) {
    wait_until(what, timeout, || async {
        let html = c.source().await.ok()?;
        ok(&html).then_some(())
    })
    .await;
}

async fn state_badge(c: &Client) -> String {
    match c.find(Locator::Css("#state")).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Marks the document: a reload would lose the mark.
async fn mark(c: &Client) {
    c.execute("window.__pierMark = 'kept';", vec![])
        .await
        .unwrap();
}

async fn still_marked(c: &Client) -> bool {
    c.execute("return window.__pierMark === 'kept';", vec![])
        .await
        .unwrap()
        .as_bool()
        .unwrap_or(false)
}

/// Waits until `digest` has deployed successfully and nothing else waits or runs.
async fn settled_on(env: &TestEnv, digest: &str) {
    wait_until(&format!("{digest} deployed and the queue empty"), DEPLOY, || async {
        let (done, open): (bool, bool) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM deployments WHERE state = 'succeeded' AND resolved_digest = $1),
                    EXISTS (SELECT 1 FROM deployments WHERE state IN ('queued', 'running'))",
        )
        .bind(digest)
        .fetch_one(&env.db.pool)
        .await
        .ok()?;
        (done && !open).then_some(())
    })
    .await;
}

fn short(digest: &str) -> String {
    digest["sha256:".len().."sha256:".len() + 12].to_owned()
}

/// Clicks the button and waits for the browser to land on a new page whose URL has
/// `part`. The document is marked before the click, so a button that posts and redirects
/// back to the same URL is not taken as done while the old page is still shown.
///
/// Chromium aborts a navigation when the host's network changes (`ERR_NETWORK_CHANGED`),
/// and tests beside this one (and other work on a shared machine) add and remove veths
/// and namespaces, in bursts of up to a minute while the tests beside it start: on
/// Chromium's error page, the button's page is opened again and the button pressed again,
/// unless it is gone (what it did was done).
async fn press(c: &Client, css: &str, part: &str) -> String {
    let from = c.current_url().await.expect("the page's URL");
    let until = std::time::Instant::now() + DEPLOY;
    let mut again = false;
    loop {
        if std::time::Instant::now() > until {
            panic!("pressing {css} was interrupted by network changes for {DEPLOY:?}");
        }
        if again {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = c.goto(from.as_str()).await;
            if aborted(&source(c).await).is_some() {
                continue;
            }
        }
        mark(c).await;
        let Ok(button) = c.find(Locator::Css(css)).await else {
            assert!(again, "no {css} on {from}");
            return from.to_string();
        };
        button.click().await.unwrap();
        let landed = landed_at(c, part).await;
        let html = source(c).await;
        match aborted(&html) {
            None => return landed,
            Some(error) => eprintln!("pressing {css} again: Chromium aborted it ({error})"),
        }
        again = true;
    }
}

/// The error code of Chromium's page of an aborted navigation (`ERR_NETWORK_CHANGED`).
fn aborted(html: &str) -> Option<&str> {
    let at = html.find("\"errorCode\":\"ERR_")? + "\"errorCode\":\"".len();
    html[at..].split('"').next()
}

/// Waits until the browser has left the marked page for a complete one at `part`, or for
/// Chromium's page of an aborted navigation.
async fn landed_at(c: &Client, part: &str) -> String {
    wait_until(
        &format!("the browser has left the page for a new one at {part}"),
        Duration::from_secs(30),
        || async {
            // While the browser navigates, scripts may fail to run: not there yet.
            let marked = c
                .execute("return window.__pierMark === 'kept';", vec![])
                .await
                .ok()?
                .as_bool()?;
            let ready = c
                .execute("return document.readyState;", vec![])
                .await
                .ok()?;
            let url = c.current_url().await.ok()?.to_string();
            let there = url.contains(part) || aborted(&c.source().await.ok()?).is_some();
            (!marked && ready == "complete" && there).then_some(url)
        },
    )
    .await
}

/// Watches the deployment page the browser is on until its timeline says `succeeded`,
/// without reloading it.
async fn watch_until_succeeded(c: &Client, name: &str) {
    mark(c).await;
    let first = state_badge(c).await;
    if first != "succeeded" {
        shot(c, &format!("{name}-running")).await;
    }
    wait_until("the timeline says succeeded", DEPLOY, || async {
        (state_badge(c).await == "succeeded").then_some(())
    })
    .await;
    assert!(still_marked(c).await, "the page was not reloaded");
    shot(c, name).await;
}

#[tokio::test]
async fn an_operator_signs_in_redeploys_rolls_back_pins_and_unpins_in_a_real_browser() {
    let env = TestEnv::start().await;
    let profile = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    let base = env.pier_url("");
    let app = env.app().to_owned();
    // Each version spends two seconds in its health step: time to watch it live.
    let v1 = env.push(&TestImage::slow_start("v1", 2), "main").await;
    settled_on(&env, &v1).await;

    // Sign in.
    c.goto(&format!("{base}/")).await.unwrap();
    press(&c, "header .who a", "/login").await;
    shot(&c, "01-sign-in").await;
    c.find(Locator::Css("input[name=user]"))
        .await
        .unwrap()
        .send_keys("alice")
        .await
        .unwrap();
    c.find(Locator::Css("input[name=secret]"))
        .await
        .unwrap()
        .send_keys(&env.admin_token)
        .await
        .unwrap();
    c.find(Locator::Css("form.stack button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_page(&c, "signed in as alice", Duration::from_secs(10), |h| {
        h.contains("class=\"user\"") && h.contains("alice")
    })
    .await;

    // The overview: the app runs v1.
    let html = source(&c).await;
    assert!(
        html.contains(&app) && html.contains(&short(&v1)),
        "overview shows v1"
    );
    assert!(html.contains(">running<"), "the engine says it runs");
    shot(&c, "02-overview").await;

    // Redeploy, and watch the new deployment's timeline reach succeeded, live.
    c.goto(&format!("{base}/apps/{app}")).await.unwrap();
    shot(&c, "03-app").await;
    press(&c, "#redeploy", "/deployments/").await;
    watch_until_succeeded(&c, "04-redeploy-succeeded").await;
    let html = source(&c).await;
    assert!(
        html.contains("manual by user alice"),
        "the trigger names who"
    );
    assert!(html.contains("bar-track"), "a timeline of steps");

    // v2 arrives by a push.
    let v2 = env.push(&TestImage::slow_start("v2", 2), "main").await;
    settled_on(&env, &v2).await;
    env.wait_app_version("v2", Duration::from_secs(5)).await;

    // Roll back to v1 from the app page: it deploys and pins.
    c.goto(&format!("{base}/apps/{app}")).await.unwrap();
    shot(&c, "05-app-with-rollback-choices").await;
    press(
        &c,
        &format!("button.rollback[data-digest=\"{v1}\"]"),
        "/deployments/",
    )
    .await;
    watch_until_succeeded(&c, "06-rollback-succeeded").await;
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    c.goto(&format!("{base}/apps/{app}")).await.unwrap();
    let pin = c
        .find(Locator::Css("#pin"))
        .await
        .expect("the pin is shown")
        .text()
        .await
        .unwrap();
    assert!(
        pin.contains(&short(&v1)) && pin.contains("user alice"),
        "{pin}"
    );
    shot(&c, "07-pinned").await;

    // A push while pinned is recorded, and does not move the app.
    let v3 = env.push(&TestImage::slow_start("v3", 2), "main").await;
    wait_until(
        "the push is recorded as held by the pin",
        DEPLOY,
        || async {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE verdict = 'pinned'")
                    .fetch_one(&env.db.pool)
                    .await
                    .ok()?;
            (n > 0).then_some(())
        },
    )
    .await;
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deployments WHERE state IN ('queued', 'running')")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(open, 0, "nothing queued for the pinned app");
    env.wait_app_version("v1", Duration::from_secs(5)).await;
    c.goto(&format!("{base}/deliveries")).await.unwrap();
    shot(&c, "08-deliveries").await;

    // Unpin; the newest push deploys, and the overview shows it without a reload.
    c.goto(&format!("{base}/apps/{app}")).await.unwrap();
    press(&c, "#unpin", &format!("/apps/{app}")).await;
    until_page(&c, "the app page no longer shows the pin", DEPLOY, |h| {
        !h.contains("id=\"pin\"")
    })
    .await;
    c.goto(&format!("{base}/")).await.unwrap();
    mark(&c).await;
    let v4 = env.push(&TestImage::slow_start("v4", 2), "main").await;
    assert_ne!(v3, v4);
    until_page(&c, "the overview shows v4 running", DEPLOY, |h| {
        h.contains(&short(&v4)) && !h.contains("In progress")
    })
    .await;
    assert!(still_marked(&c).await, "the overview was not reloaded");
    env.wait_app_version("v4", Duration::from_secs(10)).await;
    shot(&c, "09-overview-after-unpin").await;

    // On a phone.
    c.set_window_size(390, 844).await.unwrap();
    shot(&c, "10-phone-overview").await;
    c.goto(&format!("{base}/apps/{app}")).await.unwrap();
    shot(&c, "11-phone-app").await;
    c.close().await.unwrap();
    env.cleanup().await;
}

/// A named admin approves a waiting deployment from its page, and watches it run.
#[tokio::test]
async fn a_named_admin_approves_a_waiting_deployment_in_a_real_browser() {
    let ops = random_hex(32);
    let env = TestEnv::builder()
        .sources_toml(&format!("[[admins]]\nname = \"ops\"\ntoken = \"{ops}\"\n"))
        .app(|a| a.extra_toml = "approval = { required = 1, from = [\"ops\"] }".into())
        .start()
        .await;
    let profile = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    let base = env.pier_url("");
    env.push(&TestImage::healthy("v1"), "main").await;
    let app = env.app().to_owned();
    let id = wait_until("the deployment waits for approval", DEPLOY, || async {
        let (_, v) = env.api_get(&format!("/apps/{app}")).await;
        let d = v.get("latest_deployment")?;
        (d.get("state")?.as_str()? == "awaiting_approval")
            .then(|| d["id"].as_str().unwrap().to_owned())
    })
    .await;

    c.goto(&format!("{base}/login")).await.unwrap();
    for (css, text) in [
        ("input[name=user]", "ops"),
        ("input[name=secret]", ops.as_str()),
    ] {
        c.find(Locator::Css(css))
            .await
            .unwrap()
            .send_keys(text)
            .await
            .unwrap();
    }
    c.find(Locator::Css("form.stack button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_page(&c, "signed in as ops", Duration::from_secs(10), |h| {
        h.contains("class=\"user\"") && h.contains("ops")
    })
    .await;
    c.goto(&format!("{base}/deployments/{id}")).await.unwrap();
    // The live part of the page may be drawn again at any moment: read it, never hold it.
    until_page(
        &c,
        "the page says why it waits",
        Duration::from_secs(10),
        |h| h.contains("id=\"waiting\"") && h.contains("Waits for 1 approval(s) of ops"),
    )
    .await;
    shot(&c, "20-awaiting-approval").await;
    mark(&c).await;
    c.execute("document.querySelector('#approve').click();", vec![])
        .await
        .expect("the approve button is there");
    let page = format!("/deployments/{id}");
    wait_until(
        "the approval posted and the page came back",
        Duration::from_secs(30),
        || async {
            let marked = c
                .execute("return window.__pierMark === 'kept';", vec![])
                .await
                .ok()?
                .as_bool()?;
            let ready = c
                .execute("return document.readyState;", vec![])
                .await
                .ok()?;
            let url = c.current_url().await.ok()?.to_string();
            (!marked && ready == "complete" && url.contains(&page)).then_some(())
        },
    )
    .await;
    watch_until_succeeded(&c, "21-approved-succeeded").await;
    let html = source(&c).await;
    assert!(
        html.contains("<strong>approve</strong> by ops"),
        "the decision is shown"
    );
    env.wait_app_version("v1", Duration::from_secs(10)).await;
    c.close().await.unwrap();
    env.cleanup().await;
}

/// The tick lines the app page's log view shows now, in order.
async fn shown_ticks(c: &Client) -> Vec<u32> {
    let lines = c
        .execute(
            "return Array.from(document.querySelectorAll('.log-view .log-line'))\
             .map(function (l) { return l.textContent; });",
            vec![],
        )
        .await
        .unwrap_or_default();
    let lines: Vec<String> = serde_json::from_value(lines).unwrap_or_default();
    ticks(lines.iter().map(String::as_str))
}

/// The newest tick in the app's log, through the API.
async fn newest_tick(env: &TestEnv) -> Option<u32> {
    let text = http_client()
        .get(env.pier_url(&format!("/api/apps/{}/logs?tail=5", env.app())))
        .bearer_auth(&env.admin_token)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    ticks(lines.iter().filter_map(|l| l["text"].as_str()))
        .into_iter()
        .max()
}

/// The app page's log view follows the log as the app writes, without a reload; Pause
/// stops it, and Resume goes on from the last line shown, showing no line twice and none
/// of the app's secrets.
#[tokio::test]
async fn the_app_pages_log_view_follows_the_log_live_and_pauses_in_a_real_browser() {
    let env = talking_app(TestEnv::builder()).start().await;
    let profile = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    let (base, app) = (env.pier_url(""), env.app().to_owned());
    let v1 = env.push(&TestImage::healthy("v1"), "main").await;
    settled_on(&env, &v1).await;
    c.goto(&format!("{base}/login")).await.unwrap();
    for (css, text) in [
        ("input[name=user]", "alice"),
        ("input[name=secret]", env.admin_token.as_str()),
    ] {
        c.find(Locator::Css(css))
            .await
            .unwrap()
            .send_keys(text)
            .await
            .unwrap();
    }
    c.find(Locator::Css("form.stack button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_page(&c, "signed in", Duration::from_secs(10), |h| {
        h.contains("class=\"user\"")
    })
    .await;

    c.goto(&format!("{base}/apps/{app}")).await.unwrap();
    mark(&c).await;
    let first = wait_until("the log view shows ticks", DEPLOY, || async {
        shown_ticks(&c).await.into_iter().max()
    })
    .await;
    wait_until("a newer tick shows up live", DEPLOY, || async {
        shown_ticks(&c)
            .await
            .into_iter()
            .max()
            .filter(|n| *n > first)
    })
    .await;

    c.find(Locator::Css(".log-view .log-pause"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_page(
        &c,
        "the view says it is paused",
        Duration::from_secs(10),
        |h| h.contains(r#"<span class="log-state">paused</span>"#),
    )
    .await;
    let paused = shown_ticks(&c).await;
    let last = *paused.iter().max().unwrap();
    wait_until("the app writes two ticks more", DEPLOY, || async {
        newest_tick(&env).await.filter(|n| *n >= last + 2)
    })
    .await;
    assert_eq!(
        shown_ticks(&c).await,
        paused,
        "nothing is added while paused"
    );

    c.find(Locator::Css(".log-view .log-pause"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let resumed = wait_until("the view goes on after Resume", DEPLOY, || async {
        let now = shown_ticks(&c).await;
        (now.iter().max() > Some(&(last + 2))).then_some(now)
    })
    .await;
    assert!(
        resumed.windows(2).all(|w| w[0] < w[1]),
        "no line twice, none lost: {resumed:?}"
    );
    assert!(
        resumed.windows(2).all(|w| w[1] == w[0] + 1),
        "no line lost: {resumed:?}"
    );
    assert!(still_marked(&c).await, "the page was not reloaded");
    assert!(!source(&c).await.contains(LOG_SECRET));
    c.execute("document.getElementById('logs').scrollIntoView();", vec![])
        .await
        .unwrap();
    shot(&c, "30-app-log").await;
    c.goto(&format!("{base}/apps/{app}/logs?since=1h"))
        .await
        .unwrap();
    shot(&c, "31-log-page").await;
    c.close().await.unwrap();
    env.cleanup().await;
}
