//! Resource use on the real engine: a container that holds memory shows it on the app
//! page, in `GET /api/apps/{app}` and in `/metrics` within a couple of samples of being
//! asked, and a container the kernel kills for memory, or that keeps exiting, after its
//! deployment is a row of that deployment's timeline and a notification.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

const DEPLOY: Duration = Duration::from_secs(90);
const MIB: u64 = 1 << 20;

/// The app's `command`: `script` in busybox's shell, httpd serving beside it.
fn command(script: &str) -> String {
    let sh = format!("/bin/busybox httpd -f -p 8080 -h /www & {script}");
    format!(
        "command = [\"/bin/busybox\", \"sh\", \"-c\", {}]",
        toml::Value::String(sh)
    )
}

async fn get_text(url: &str) -> (u16, String) {
    let resp = http_client()
        .get(url)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("pier answers");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// The value of `series` for `app` in a scrape, if it is there.
fn series(scrape: &str, series: &str, app: &str) -> Option<f64> {
    let prefix = format!("{series}{{app=\"{app}\",");
    scrape
        .lines()
        .find(|l| l.starts_with(&prefix))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[tokio::test]
async fn a_container_holding_memory_shows_it_on_the_page_and_in_metrics_within_two_samples() {
    // 30 MiB written to the container's /dev/shm stay in its memory (shared memory is not
    // page cache that can be dropped) for as long as it runs.
    let fill = "/bin/busybox dd if=/dev/zero of=/dev/shm/fill bs=1M count=30; \
                while true; do /bin/busybox sleep 60; done";
    let mut env = TestEnv::builder()
        .server_toml("stats_interval = \"1s\"")
        .app(|a| {
            a.extra_toml = format!("memory = \"128m\"\n{}", command(fill));
        })
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");

    // A Pier that did not run the deployment (so it watches nothing) and that nobody
    // asks: over five intervals it asks the engine nothing. The first scrape shows the
    // counters as they were before it asked, and starts the sampler.
    env.pier_mut().kill();
    env.start_pier().await;
    let quiet = Duration::from_secs(5);
    tokio::time::sleep(quiet).await; // the span observed idle, not a wait for a condition
    let metrics = env.pier_url("/metrics");
    let asked = Instant::now();
    let (code, first) = get_text(&metrics).await;
    assert_eq!(code, 200);
    assert!(
        !first.contains("pier_stats_engine_calls_total"),
        "an idle Pier made stats calls:\n{first}"
    );
    assert!(series(&first, "pier_container_memory_bytes", &app).is_none());
    // Within two samples: a scrape that finds two rounds done (counted before the memory
    // series is read) finds the memory too, however slowly this machine runs.
    let (memory, rounds) = wait_until("the container's memory in /metrics", DEPLOY, || async {
        let (_, scrape) = get_text(&metrics).await;
        let rounds = scrape
            .lines()
            .find(|l| l.starts_with("pier_stats_rounds_total{target=\"local\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        let memory = series(&scrape, "pier_container_memory_bytes", &app);
        match memory.filter(|m| *m >= 30.0 * MIB as f64) {
            Some(m) => Some((m, rounds)),
            None if rounds >= 2.0 => panic!("two rounds done, no memory shown:\n{scrape}"),
            None => None,
        }
    })
    .await;
    eprintln!(
        "memory {:.1} MiB in /metrics {:?} after the first scrape, {rounds} rounds counted",
        memory / MIB as f64,
        asked.elapsed()
    );
    let (_, scrape) = get_text(&metrics).await;
    assert_eq!(
        series(&scrape, "pier_container_memory_limit_bytes", &app),
        Some((128 * MIB) as f64)
    );
    assert!(series(&scrape, "pier_container_cpu_seconds_total", &app).is_some());
    assert!(scrape.contains("# TYPE pier_container_cpu_seconds_total counter"));
    assert!(
        scrape.contains(&format!("service=\"{app}\",target=\"local\"")),
        "every series names its app, service and target"
    );

    // The API and the page show the same, the page with a sparkline per number.
    let (code, view) = env.api_get(&format!("/apps/{app}")).await;
    assert_eq!(code, 200);
    let c = &view["resources"]["containers"][0];
    assert!(c["memory_bytes"].as_u64().unwrap() >= 30 * MIB, "{c:#}");
    assert_eq!(c["memory_limit_bytes"], 128 * MIB);
    assert_eq!(c["deployment"], d["id"]);
    let points = wait_until("two points of history", DEPLOY, || async {
        let (_, view) = env.api_get(&format!("/apps/{app}")).await;
        let h = view["resources"]["containers"][0]["history"]
            .as_array()?
            .clone();
        (h.len() >= 2).then_some(h)
    })
    .await;
    assert!(
        points
            .iter()
            .all(|p| p["cpu_cores"].as_f64().unwrap() >= 0.0)
    );
    let (code, page) = get_text(&env.pier_url(&format!("/apps/{app}"))).await;
    assert_eq!(code, 200);
    assert!(
        page.contains("<h2 id=\"resources\">Resource use</h2>"),
        "{page}"
    );
    let label = page
        .split("aria-label=\"Memory over the last hour: now ")
        .nth(1)
        .expect("a memory sparkline that says its numbers");
    let shown: f64 = label
        .split(" MiB")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", &label[..40.min(label.len())]));
    assert!((30.0..40.0).contains(&shown), "{shown} MiB");
    assert!(page.contains("of 128.0 MiB"));
    env.cleanup().await;
}

#[tokio::test]
async fn an_oom_killed_container_after_a_deploy_appears_in_the_timeline_and_in_a_notification() {
    let mut receiver = HookRecorder::start().await;
    // Once it serves, it asks for 64 MiB at a time in a 32 MiB container, every few
    // seconds: the kernel kills that process (the container itself goes on serving).
    let hog = "/bin/busybox sleep 2; while true; do \
               /bin/busybox dd if=/dev/zero of=/dev/null bs=64M count=1; \
               /bin/busybox sleep 3; done";
    let env = TestEnv::builder()
        .server_toml("stats_interval = \"1s\"")
        .sources_toml(&format!(
            "[[notifications]]\nname = \"chat\"\nurl = \"{}\"\nformat = \"slack\"\n\
             events = [\"container.oom_killed\"]\n",
            receiver.url("/slack"),
        ))
        .app(|a| a.extra_toml = format!("memory = \"32m\"\n{}", command(hog)))
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let id = d["id"].as_str().unwrap().to_owned();

    // Nobody looks: the deployment that succeeded is watched on its own.
    let events = wait_until("an OOM kill in the deployment's record", DEPLOY, || async {
        let (_, v) = env.api_get(&format!("/deployments/{id}")).await;
        let events = v["events"].as_array()?.clone();
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events[0]["kind"], "oom_killed", "{events:#?}");
    assert_eq!(events[0]["target"], "local");
    assert!(events[0]["container_name"].as_str().unwrap().contains(&app));

    let hooks = receiver
        .collect_until(Duration::from_secs(60), |got| !got.is_empty())
        .await;
    let text = hooks[0].json()["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains(&app) && text.contains("container.oom_killed"),
        "{text}"
    );
    assert!(text.contains("killed for lack of memory"), "{text}");

    let (code, page) = get_text(&env.pier_url(&format!("/deployments/{id}"))).await;
    assert_eq!(code, 200);
    assert!(page.contains("data-event=\"oom_killed\""), "{page}");
    assert!(
        page.contains("killed for lack of memory (limit 32 MiB)"),
        "{page}"
    );

    // Seen again and again (each kill counted on the app's resources), it stays one row
    // and one notification.
    wait_until("a second OOM kill seen", DEPLOY, || async {
        let (_, view) = env.api_get(&format!("/apps/{app}")).await;
        let kills = view["resources"]["containers"][0]["oom_kills"].as_u64()?;
        (kills >= 2).then_some(())
    })
    .await;
    let (_, v) = env.api_get(&format!("/deployments/{id}")).await;
    assert_eq!(v["events"].as_array().unwrap().len(), 1, "{v:#}");
    let (_, log) = env.api_get("/notifications").await;
    let sent: Vec<&Value> = log["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["event"] == "container.oom_killed")
        .collect();
    assert_eq!(sent.len(), 1, "{log:#}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_container_that_keeps_exiting_after_a_deploy_is_a_restart_loop_in_the_timeline() {
    let mut receiver = HookRecorder::start().await;
    // It serves long enough to pass its health check, then exits; its restart policy
    // (`unless-stopped`) starts it again, and again.
    let env = TestEnv::builder()
        .server_toml("stats_interval = \"1s\"")
        .sources_toml(&format!(
            "[[notifications]]\nname = \"chat\"\nurl = \"{}\"\nformat = \"slack\"\n\
             events = [\"container.restart_loop\"]\n",
            receiver.url("/slack"),
        ))
        .app(|a| a.extra_toml = command("/bin/busybox sleep 5; exit 3"))
        .start()
        .await;
    let app = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    let d = env.latest_final_of(&app, &[], DEPLOY).await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    let id = d["id"].as_str().unwrap().to_owned();

    let events = wait_until(
        "a restart loop in the deployment's record",
        DEPLOY,
        || async {
            let (_, v) = env.api_get(&format!("/deployments/{id}")).await;
            let events = v["events"].as_array()?.clone();
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    assert_eq!(events[0]["kind"], "restart_loop", "{events:#?}");
    assert!(events[0]["restarts"].as_i64().unwrap() >= 3, "{events:#?}");
    let hooks = receiver
        .collect_until(Duration::from_secs(60), |got| !got.is_empty())
        .await;
    let text = hooks[0].json()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("is in a restart loop"), "{text}");
    let (_, page) = get_text(&env.pier_url(&format!("/deployments/{id}"))).await;
    assert!(page.contains("data-event=\"restart_loop\""), "{page}");
    env.cleanup().await;
}
