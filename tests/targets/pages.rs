//! The app page, `GET /api/apps/{app}` and `pier status` show a row per
//! engine of an app on several engines (the host's `local` and a real dockerd in a network
//! namespace reached over TLS): the same digest serving on both, each engine's own
//! container and state, and which engine each step of the rollout ran on. When the other
//! engine's dockerd stops, every answer still comes within a deadline, says that engine is
//! unreachable (naming no key file), and `local`'s row is as it was.
//!
//! The overview's card of an app on three engines has a row per engine, and one whose
//! dockerd stopped says so without holding up the others; the app page's live stream sends
//! each engine's progress while a rollout crosses the engines, as the workers journal it.

use std::time::{Duration, Instant};

use crate::support::rollout::{Fleet, FleetSpec};
use crate::support::*;
use serde_json::Value;

/// What a page or `pier status` may take with an engine down: the per-engine deadline
/// (2 s) and margin for a loaded machine, far below a connect timeout (15 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(8);
/// What `pier status`, a process of its own, may take: its start-up (a debug binary on a
/// loaded machine takes seconds) and the same deadline; still below what waiting for a
/// silent engine's connect timeout alone would cost (15 s).
const STATUS_WITHIN: Duration = Duration::from_secs(12);
const DEPLOYED_WITHIN: Duration = Duration::from_secs(180);

/// `GET /api/apps/{app}`, timed.
async fn api_app(env: &TestEnv, app: &str) -> (Value, Duration) {
    let t = Instant::now();
    let (status, v) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(status, 200, "{v}");
    (v, t.elapsed())
}

/// The app page's HTML, timed.
async fn app_page(env: &TestEnv, app: &str) -> (String, Duration) {
    let t = Instant::now();
    let (status, html) = http_get_within(&env.pier_url(&format!("/apps/{app}")), ANSWER_WITHIN)
        .await
        .expect("the app page answers");
    assert_eq!(status, 200, "{html}");
    (html, t.elapsed())
}

fn engine<'a>(view: &'a Value, target: &str) -> &'a Value {
    view["engines"]
        .as_array()
        .expect("an `engines` array")
        .iter()
        .find(|e| e["target"] == target)
        .unwrap_or_else(|| panic!("no engine row for {target}: {view}"))
}

/// The `<tr>` of one engine on the app page.
fn engine_row<'a>(html: &'a str, target: &str) -> &'a str {
    let start = html
        .find(&format!("<tr id=\"engine-{target}\""))
        .unwrap_or_else(|| panic!("no row for engine {target}:\n{html}"));
    let len = html[start..].find("</tr>").expect("the row ends");
    &html[start..start + len]
}

/// `pier status [--json]` against the Pier that `config` describes (its `listen` and its
/// inline admin token, as an operator's `PIER_URL` and `PIER_TOKEN`), timed; it must end
/// within [`STATUS_WITHIN`].
async fn pier_status(config: &std::path::Path, json: bool) -> (String, Duration) {
    let toml = std::fs::read_to_string(config).expect("read the config");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_pier"));
    cmd.arg("status");
    if let Some(listen) = listen_of(&toml) {
        cmd.env("PIER_URL", format!("http://{listen}"));
    }
    if let Some(token) = admin_token_of(&toml) {
        cmd.env("PIER_TOKEN", token);
    }
    if json {
        cmd.arg("--json");
    }
    cmd.kill_on_drop(true);
    let t = Instant::now();
    let out = tokio::time::timeout(STATUS_WITHIN, cmd.output())
        .await
        .expect("pier status ends within the deadline")
        .expect("run pier status");
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pier status failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (text, took)
}

fn status_engine<'a>(apps: &'a Value, app: &str, target: &str) -> &'a Value {
    let a = apps
        .as_array()
        .expect("a list of apps")
        .iter()
        .find(|a| a["name"] == app)
        .expect("the app is listed");
    engine(a, target)
}

#[tokio::test]
async fn each_engine_has_its_row_and_an_engine_that_stops_is_shown_unreachable_without_delaying_the_others()
 {
    let mut env = TestEnv::builder()
        .no_health()
        // The pause between the two batches is the window in which the test looks at a
        // rollout in progress: `local` switched, `tls1` waiting for its batch.
        .app(|a| {
            a.extra_toml =
                "targets = [\"local\", \"tls1\"]\nrollout = { batch = 1, pause = \"8s\" }\n".into()
        })
        .without_pier()
        .start()
        .await;
    let mut remote = ExtraEngine::builder()
        .forward(env.registry_port)
        .start()
        .await;
    let config = format!("{}\n{}", env.config_toml(), remote.tls_target_toml("tls1"));
    let config_file = tempfile::NamedTempFile::new().expect("config file");
    std::fs::write(config_file.path(), &config).expect("write the config");
    env.pier = Some(PierCommand::new(&config).start().await);
    let app = env.app().to_owned();

    let digest = env.push(&TestImage::with_healthcheck("v1"), "main").await;
    let (view, _) = wait_until(
        "the API shows local switched and tls1 waiting for its batch",
        DEPLOYED_WITHIN,
        || async {
            let (view, took) = api_app(&env, &app).await;
            let (local, remote) = (engine(&view, "local"), engine(&view, "tls1"));
            let at = |e: &Value, k: &str| e["rollout"][k].as_str().map(str::to_owned);
            (at(local, "step").as_deref() == Some("switch")
                && at(local, "step_state").as_deref() == Some("succeeded")
                && remote["rollout"].is_object()
                && remote["rollout"]["step"].is_null())
            .then_some((view, took))
        },
    )
    .await;
    assert_eq!(engine(&view, "local")["digest"], digest.as_str(), "{view}");
    assert!(engine(&view, "tls1")["digest"].is_null(), "{view}");
    assert_eq!(engine(&view, "tls1")["state"], "nothing deployed yet");
    let (html, _) = app_page(&env, &app).await;
    assert!(
        engine_row(&html, "tls1").contains("waiting for its batch"),
        "{html}"
    );
    assert!(
        engine_row(&html, "local").contains("switch succeeded"),
        "{html}"
    );
    let d = env.latest_final_of(&app, &[], DEPLOYED_WITHIN).await;
    let id = d["id"].as_str().expect("a deployment id").to_owned();
    if d["state"] != "succeeded" {
        let (_, full) = env.api_get(&format!("/deployments/{id}")).await;
        panic!("the rollout did not succeed: {full:#}");
    }

    // Both engines serve the pushed digest, each in its own container.
    let (view, _) = api_app(&env, &app).await;
    for target in ["local", "tls1"] {
        let e = engine(&view, target);
        assert_eq!(e["reachable"], true, "{e}");
        assert_eq!(e["digest"], digest.as_str(), "{e}");
        assert_eq!(e["container_digest"], digest.as_str(), "{e}");
        assert_eq!(e["running"], true, "{e}");
        assert_eq!(e["state"], "running", "{e}");
        assert_eq!(e["kind"], "engine", "{e}");
        assert!(e["container_name"].as_str().is_some_and(|n| !n.is_empty()));
    }
    let remote_id = engine(&view, "tls1")["container_id"]
        .as_str()
        .expect("a container id")
        .to_owned();
    let (on_remote, listed) = remote.docker(&["ps", "-q", "--no-trunc"]);
    assert!(on_remote, "{listed}");
    assert!(
        listed.contains(&remote_id),
        "tls1's container {remote_id} runs on the other engine: {listed}"
    );
    assert_ne!(engine(&view, "local")["container_id"], remote_id.as_str());
    assert!(
        engine(&view, "tls1")["endpoint"]
            .as_str()
            .is_some_and(|a| a.contains(&remote.address().to_string()) && a.contains("TLS")),
        "{view}"
    );
    // The fields from before several engines are still there (the first target's).
    assert_eq!(view["generation"]["digest"], digest.as_str());
    assert!(view["engine_error"].is_null());

    let (html, _) = app_page(&env, &app).await;
    let short = &digest["sha256:".len().."sha256:".len() + 12];
    for target in ["local", "tls1"] {
        let row = engine_row(&html, target);
        assert!(row.contains("data-state=\"running\""), "{row}");
        assert!(row.contains(short), "{row}");
    }
    assert!(html.contains("running on all 2 engines"), "{html}");

    // The timeline says which engine each step ran on.
    let (_, steps_html) =
        http_get_within(&env.pier_url(&format!("/deployments/{id}")), ANSWER_WITHIN)
            .await
            .expect("the deployment page answers");
    for target in ["local", "tls1"] {
        assert!(
            steps_html.contains(&format!("data-engine=\"{target}\"")),
            "no step shown on {target}:\n{steps_html}"
        );
    }

    let (status, _) = pier_status(config_file.path(), true).await;
    let status: Value = serde_json::from_str(&status).expect("pier status --json is JSON");
    for target in ["local", "tls1"] {
        let e = status_engine(&status, &app, target);
        assert_eq!(e["digest"], digest.as_str(), "{e}");
        assert_eq!(e["state"], "running", "{e}");
    }
    let (text, _) = pier_status(config_file.path(), false).await;
    assert!(
        text.lines()
            .any(|l| l.contains("engine tls1") && l.contains("running")),
        "{text}"
    );

    // The other engine goes down: every answer still comes at once, and says so.
    remote.stop_dockerd();
    let key = remote.client_files().key.display().to_string();
    let (view, took) = api_app(&env, &app).await;
    assert!(took < ANSWER_WITHIN, "the API took {took:?}");
    let down = engine(&view, "tls1");
    assert_eq!(down["reachable"], false, "{down}");
    assert_eq!(down["state"], "unreachable", "{down}");
    let why = down["unreachable"].as_str().expect("a reason");
    assert!(!why.is_empty());
    assert!(!why.contains(&key) && !why.contains("/tmp"), "{why}");
    // The journal's facts stay: what tls1 was told to serve.
    assert_eq!(down["digest"], digest.as_str(), "{down}");
    let local = engine(&view, "local");
    assert_eq!(local["reachable"], true, "{local}");
    assert_eq!(local["state"], "running", "{local}");
    assert_eq!(local["container_digest"], digest.as_str(), "{local}");
    eprintln!("the API answered in {took:?} with tls1 down: {why}");

    let (html, took) = app_page(&env, &app).await;
    assert!(took < ANSWER_WITHIN, "the page took {took:?}");
    let row = engine_row(&html, "tls1");
    assert!(row.contains("unreachable"), "{row}");
    assert!(!html.contains(&key), "the page names the key file");
    assert!(
        engine_row(&html, "local").contains("data-state=\"running\""),
        "{html}"
    );
    assert!(html.contains("tls1 unreachable"), "{html}");

    let t = Instant::now();
    let (code, _) = http_get_within(&env.pier_url("/"), ANSWER_WITHIN)
        .await
        .expect("the overview answers");
    assert_eq!(code, 200);
    assert!(t.elapsed() < ANSWER_WITHIN);

    let (status, took) = pier_status(config_file.path(), true).await;
    let status: Value = serde_json::from_str(&status).expect("pier status --json is JSON");
    assert_eq!(status_engine(&status, &app, "tls1")["reachable"], false);
    assert_eq!(status_engine(&status, &app, "local")["state"], "running");
    eprintln!("pier status answered in {took:?} with tls1 down");

    // Worse than down: an engine that accepts the connection and then says nothing (a
    // hung host). Each answer waits for it at most the per-engine deadline.
    let mut silent = remote
        .command("socat")
        .args([
            &format!("TCP-LISTEN:2376,bind={},reuseaddr,fork", remote.address()),
            "EXEC:sleep 60",
        ])
        .spawn()
        .expect("start a silent listener in the engine's namespace");
    let (view, took) = wait_until(
        "the API says tls1 did not answer in time",
        Duration::from_secs(60),
        || async {
            let (view, took) = api_app(&env, &app).await;
            let why = engine(&view, "tls1")["unreachable"].as_str()?.to_owned();
            why.starts_with("no answer within").then_some((view, took))
        },
    )
    .await;
    assert!(took < ANSWER_WITHIN, "the API took {took:?}");
    assert_eq!(engine(&view, "local")["state"], "running", "{view}");
    eprintln!("the API answered in {took:?} with tls1 silent");
    let (_, took) = pier_status(config_file.path(), false).await;
    eprintln!("pier status answered in {took:?} with tls1 silent");
    let _ = silent.kill();
    let _ = silent.wait();

    env.cleanup().await;
    remote.cleanup();
}

/// The overview's card of `app`.
fn card<'a>(html: &'a str, app: &str) -> &'a str {
    let start = html
        .find(&format!("data-app=\"{app}\""))
        .unwrap_or_else(|| panic!("no card for {app}:\n{html}"));
    let len = html[start..].find("</article>").expect("the card ends");
    &html[start..start + len]
}

/// The row of one engine in an overview card.
fn card_row<'a>(card: &'a str, target: &str) -> &'a str {
    let start = card
        .find(&format!(
            "<tr class=\"card-engine\" data-target=\"{target}\""
        ))
        .unwrap_or_else(|| panic!("no row for engine {target} in the card:\n{card}"));
    let len = card[start..].find("</tr>").expect("the row ends");
    &card[start..start + len]
}

/// The value of `name="…"` in an HTML tag, as the page escaped it.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[at..].find('"')?;
    Some(&tag[at..at + len])
}

/// `sha256:` and the first 12 hex digits, as pages show a digest.
fn short(digest: &str) -> &str {
    &digest[.."sha256:".len() + 12]
}

#[tokio::test]
async fn overview_shows_each_engine_of_an_app_on_several_targets_and_an_unreachable_one_as_such() {
    let mut fleet = Fleet::start(FleetSpec::default()).await;
    let app = fleet.env.app().to_owned();
    let digest = fleet
        .env
        .push(&TestImage::with_healthcheck("v1"), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");

    let (code, html) = http_get_within(&fleet.env.pier_url("/"), ANSWER_WITHIN)
        .await
        .expect("the overview answers");
    assert_eq!(code, 200, "{html}");
    let c = card(&html, &app);
    assert!(c.contains("running on all 3 engines"), "{c}");
    for target in ["local", "e2", "e3"] {
        let row = card_row(c, target);
        assert_eq!(attr(row, "data-state"), Some("running"), "{row}");
        assert!(
            row.contains(short(&digest)),
            "{target} shows its digest: {row}"
        );
        // The engine's own status line for the container.
        assert!(row.contains("Up "), "{row}");
        assert!(!row.contains("unreachable"), "{row}");
    }

    // e3's dockerd stops: the overview still answers within the per-engine deadline, says
    // e3 is unreachable and why (no key file named), and the other engines' rows are whole.
    let secrets: Vec<String> = {
        let e2 = fleet
            .remote_mut("e2")
            .client_files()
            .key
            .display()
            .to_string();
        let e3 = fleet.remote_mut("e3");
        vec![
            e2,
            e3.ssh_identity().display().to_string(),
            e3.known_hosts().display().to_string(),
        ]
    };
    fleet.remote_mut("e3").stop_dockerd();
    let t = Instant::now();
    let (code, html) = http_get_within(&fleet.env.pier_url("/"), ANSWER_WITHIN)
        .await
        .expect("the overview answers with e3 down");
    let took = t.elapsed();
    assert_eq!(code, 200, "{html}");
    assert!(took < ANSWER_WITHIN, "the overview took {took:?}");
    let c = card(&html, &app);
    let down = card_row(c, "e3");
    assert_eq!(attr(down, "data-state"), Some("unreachable"), "{down}");
    assert!(down.contains(">unreachable</span>"), "{down}");
    assert!(
        down.contains("<span class=\"error\">") && !down.contains("<span class=\"error\"></span>"),
        "the reason is shown: {down}"
    );
    // What the journal says e3 was told to serve stays shown.
    assert!(down.contains(short(&digest)), "{down}");
    for target in ["local", "e2"] {
        let row = card_row(c, target);
        assert_eq!(attr(row, "data-state"), Some("running"), "{row}");
        assert!(row.contains(short(&digest)) && row.contains("Up "), "{row}");
    }
    assert!(
        c.contains("running on 2 of 3 engines (e3 unreachable)"),
        "{c}"
    );
    for secret in &secrets {
        assert!(
            !html.contains(secret.as_str()),
            "the overview names {secret}"
        );
    }
    eprintln!("the overview answered in {took:?} with e3 down");

    // The live overview renders the same card.
    let t = Instant::now();
    let (events, _) =
        read_events_until(&fleet.env.pier_url("/events"), ANSWER_WITHIN, |_| true).await;
    let first = events
        .first()
        .expect("the overview stream sends its first frame");
    assert!(t.elapsed() < ANSWER_WITHIN);
    let c = card(&first.data, &app);
    assert_eq!(attr(card_row(c, "e3"), "data-state"), Some("unreachable"));
    assert_eq!(attr(card_row(c, "e2"), "data-state"), Some("running"));
    assert_eq!(attr(card_row(c, "local"), "data-state"), Some("running"));

    fleet.cleanup().await;
}

/// One frame of the app page's stream: each engine's `data-state` and `data-rollout`.
#[derive(Debug, Clone, PartialEq)]
struct EngineFrame {
    rows: Vec<(String, String, Option<String>)>,
    /// Whether every row shows `digest`.
    digest_everywhere: bool,
}

impl EngineFrame {
    fn of(html: &str, targets: &[&str], digest: &str) -> EngineFrame {
        let rows: Vec<_> = targets
            .iter()
            .map(|t| {
                let row = engine_row(html, t);
                let state = attr(row, "data-state").unwrap_or_default().to_owned();
                (
                    t.to_string(),
                    state,
                    attr(row, "data-rollout").map(str::to_owned),
                )
            })
            .collect();
        let digest_everywhere = targets
            .iter()
            .all(|t| engine_row(html, t).contains(short(digest)));
        EngineFrame {
            rows,
            digest_everywhere,
        }
    }

    fn rollout(&self, target: &str) -> Option<&str> {
        self.rows.iter().find(|r| r.0 == target)?.2.as_deref()
    }

    /// The deployment has ended and every engine runs it.
    fn settled(&self) -> bool {
        self.digest_everywhere && self.rows.iter().all(|r| r.1 == "running" && r.2.is_none())
    }
}

#[tokio::test]
async fn app_page_stream_sends_each_engines_progress_during_a_rollout() {
    let mut env = TestEnv::builder()
        .no_health()
        // The pause holds the second batch back: the stream must show `local` switched
        // while `tls1` waits, then `tls1`'s own steps.
        .app(|a| {
            a.extra_toml =
                "targets = [\"local\", \"tls1\"]\nrollout = { batch = 1, pause = \"4s\" }\n".into()
        })
        .without_pier()
        .start()
        .await;
    let mut remote = ExtraEngine::builder()
        .forward(env.registry_port)
        .start()
        .await;
    let config = format!("{}\n{}", env.config_toml(), remote.tls_target_toml("tls1"));
    env.pier = Some(PierCommand::new(&config).start().await);
    let app = env.app().to_owned();
    let targets = ["local", "tls1"];

    let (html, _) = app_page(&env, &app).await;
    assert!(
        html.contains(&format!("data-live=\"/apps/{app}/events\"")),
        "{html}"
    );
    let mut stream = EventStream::open(&env.pier_url(&format!("/apps/{app}/events"))).await;
    let until = tokio::time::Instant::now() + DEPLOYED_WITHIN;
    let Next::Event(first) = stream.next_before(until).await else {
        panic!("no first frame")
    };
    assert_eq!(first.name, "engines");
    for t in targets {
        assert_eq!(
            attr(engine_row(&first.data, t), "data-state"),
            Some("nothing deployed yet")
        );
    }

    // Listening: what the workers journal from now on arrives as frames.
    let digest = env.push(&TestImage::with_healthcheck("v1"), "main").await;
    let mut frames = Vec::new();
    let last = loop {
        let event = match stream.next_before(until).await {
            Next::Event(e) => e,
            other => panic!("the stream stopped ({other:?}) after {frames:#?}"),
        };
        assert_eq!(event.name, "engines", "the app stream never ends by itself");
        let frame = EngineFrame::of(&event.data, &targets, &digest);
        if frame.settled() {
            break frame;
        }
        if frames.last() != Some(&frame) {
            frames.push(frame);
        }
    };
    eprintln!("frames before the end: {frames:#?}");

    // Each engine's progress came while the deployment ran (a row has `data-rollout`
    // only then), in the rollout's order: local switched while tls1 waited for its batch,
    // then tls1's own steps.
    let waiting = frames
        .iter()
        .position(|f| {
            f.rollout("local") == Some("switch succeeded")
                && f.rollout("tls1") == Some("waiting for its batch")
        })
        .unwrap_or_else(|| panic!("no frame with local switched and tls1 waiting: {frames:#?}"));
    let on_tls1: Vec<&str> = frames[waiting..]
        .iter()
        .filter_map(|f| f.rollout("tls1"))
        .filter(|w| *w != "waiting for its batch")
        .collect();
    assert!(
        !on_tls1.is_empty(),
        "no frame showed tls1's own steps: {frames:#?}"
    );
    assert!(
        frames[..waiting]
            .iter()
            .any(|f| f.rollout("local").is_some_and(|w| w != "switch succeeded")),
        "no frame showed local's steps before its switch: {frames:#?}"
    );
    assert!(last.settled(), "{last:?}");

    let d = env.latest_final_of(&app, &[], DEPLOYED_WITHIN).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let (view, _) = api_app(&env, &app).await;
    for t in targets {
        assert_eq!(engine(&view, t)["digest"], digest.as_str(), "{view}");
        assert_eq!(engine(&view, t)["state"], "running", "{view}");
    }

    drop(stream);
    env.cleanup().await;
    remote.cleanup();
}
