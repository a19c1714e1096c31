//! Blue-green across three real engines (`local`, `e2` over TLS, `e3` over
//! SSH), each host serving the app through its own `pier proxy` (`--target e2` and `e3`
//! inside their namespaces). Batch by batch, each engine starts the new generation beside
//! the old one, proves it, switches its route and soaks; the next engine starts only
//! after that soak, and the old generations are retired only once every engine passed.
//! A failure on the third engine switches the first two back by route.

use std::time::Duration;

use crate::support::rollout::*;
use crate::support::*;
use serde_json::Value;

const ENGINES: [&str; 3] = ["local", "e2", "e3"];
/// What an answer on an engine's proxy may take to change once the deployment is final.
const ANSWER: Duration = Duration::from_secs(30);

/// A fleet of three hosts, each with its proxy, and a blue-green app with HTTP health and a
/// soak of 2 s; e3's engine gives its containers `nofile=1111` (which the
/// `http_unhealthy_at_nofile` images fail their health on).
async fn blue_green_fleet() -> Fleet {
    Fleet::start(FleetSpec {
        route: Some("soak = \"2s\"\ndrain_timeout = \"5s\""),
        app_toml: "health = { path = \"/health\", timeout = \"10s\" }\n".into(),
        third_dockerd_args: vec!["--default-ulimit", "nofile=1111:1111"],
        ..FleetSpec::default()
    })
    .await
}

/// Waits until every engine's proxy answers `version`.
async fn wait_answering(fleet: &Fleet, version: &str) {
    for target in ENGINES {
        wait_until(&format!("{target} answers {version}"), ANSWER, || async {
            (fleet.version_on(target).await.as_deref() == Some(version)).then_some(())
        })
        .await;
    }
}

/// v1 deployed and serving through every host's proxy: its container ids, by engine.
async fn v1_everywhere(fleet: &Fleet) -> (String, Vec<String>) {
    let v1 = fleet.env.push(&TestImage::healthy("v1"), "main").await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    wait_answering(fleet, "v1").await;
    let ids = fleet.assert_serving(&v1, "v1").await;
    (v1, ids)
}

fn finished(d: &Value, step: &str, target: &str) -> chrono::DateTime<chrono::Utc> {
    time(&step_of(d, step, target)["finished_at"])
}

fn started(d: &Value, step: &str, target: &str) -> chrono::DateTime<chrono::Utc> {
    time(&step_of(d, step, target)["started_at"])
}

#[tokio::test]
async fn a_blue_green_rollout_switches_engine_by_engine_behind_each_hosts_proxy_without_a_failed_request()
 {
    let fleet = blue_green_fleet().await;
    v1_everywhere(&fleet).await;

    let port = fleet.env.publish().port();
    let local = Load::start(&fleet.env.app_url("/version"), 200_000, FLEET_DEPLOY);
    let remotes = [
        fleet.remote("e2").load_inside(port),
        fleet.remote("e3").load_inside(port),
    ];
    for load in &remotes {
        wait_until("the load runs", ANSWER, || async {
            (load.answers().len() > 20).then_some(())
        })
        .await;
    }
    let v2 = fleet.env.push(&TestImage::healthy("v2"), "main").await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "succeeded", "{d:#}");
    assert_eq!(d["resolved_digest"], v2.as_str(), "{d:#}");
    wait_answering(&fleet, "v2").await;
    for load in &remotes {
        wait_until("the load sees v2", ANSWER, || async {
            load.answers().iter().any(|a| a == "v2 200").then_some(())
        })
        .await;
    }
    let here = local.finish().await;
    let there: Vec<Vec<String>> = remotes.into_iter().map(|l| l.finish()).collect();
    let failed_here = failures(&here);
    assert!(here.len() > 50, "the local load ran: {}", here.len());
    assert!(
        failed_here.is_empty(),
        "local: {:?}",
        &failed_here[..failed_here.len().min(5)]
    );
    for (target, answers) in ["e2", "e3"].iter().zip(&there) {
        let failed: Vec<&String> = answers.iter().filter(|a| !a.ends_with(" 200")).collect();
        eprintln!(
            "{target}: {} requests, {} failed",
            answers.len(),
            failed.len()
        );
        assert!(
            answers.len() > 20,
            "{target}: the load ran: {}",
            answers.len()
        );
        assert!(
            failed.is_empty(),
            "{target}: {:?}",
            &failed[..failed.len().min(5)]
        );
    }
    fleet.assert_serving(&v2, "v2").await;

    // One batch at a time: an engine starts only after the one before it passed its soak,
    // and no old generation goes before the last engine's soak.
    for pair in ENGINES.windows(2) {
        assert!(
            started(&d, "pull", pair[1]) >= finished(&d, "soak", pair[0]),
            "{} began before {} passed its soak: {d:#}",
            pair[1],
            pair[0]
        );
    }
    let last_soak = finished(&d, "soak", "e3");
    for target in ENGINES {
        let switch = step_of(&d, "switch", target);
        assert!(switch["intent"]["upstream"].is_string(), "{switch:#}");
        assert!(
            started(&d, "retire", target) >= last_soak,
            "{target}: {d:#}"
        );
        assert_eq!(
            fleet.serving_generation(target).await.as_deref(),
            Some(v2.as_str())
        );
    }
    fleet.cleanup().await;
}

#[tokio::test]
async fn a_version_failing_health_on_the_third_engine_switches_the_first_two_back_by_route() {
    let fleet = blue_green_fleet().await;
    let (v1, v1_ids) = v1_everywhere(&fleet).await;

    fleet
        .env
        .push(&TestImage::http_unhealthy_at_nofile("v2", 1111), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains("engine e3 failed: health"), "{d:#}");
    wait_answering(&fleet, "v1").await;
    // The same v1 containers serve again (the proxy's standby during the soak).
    assert_eq!(fleet.assert_serving(&v1, "v1").await, v1_ids);
    for target in ["local", "e2"] {
        assert_eq!(step_of(&d, "soak", target)["state"], "succeeded", "{d:#}");
        let revert = step_of(&d, "revert", target);
        assert_eq!(revert["state"], "succeeded", "{target}: {revert:#}");
        assert_eq!(revert["intent"]["to"]["digest"], v1.as_str(), "{revert:#}");
        assert!(started(&d, "revert", target) >= finished(&d, "health", "e3"));
    }
    assert!(
        find_step(&d, "switch", "e3").is_none(),
        "e3 never switched: {d:#}"
    );
    for target in ENGINES {
        assert_eq!(
            fleet.serving_generation(target).await.as_deref(),
            Some(v1.as_str()),
            "{target}"
        );
    }
    fleet.cleanup().await;
}

#[tokio::test]
async fn a_first_version_failing_on_the_third_engine_leaves_no_engine_serving_it() {
    let fleet = blue_green_fleet().await;
    fleet
        .env
        .push(&TestImage::http_unhealthy_at_nofile("v1", 1111), "main")
        .await;
    let d = fleet.final_deployment().await;
    assert_eq!(d["state"], "failed", "{d:#}");
    let outcome = d["outcome"].as_str().unwrap_or_default();
    assert!(outcome.contains("serves nothing of the app again"), "{d:#}");
    for target in ENGINES {
        let engine = fleet.engine(target).await;
        let left = engine.containers_of_app(fleet.env.app()).await;
        assert!(left.is_empty(), "{target}: {left:#?}");
        assert_eq!(fleet.serving_generation(target).await, None, "{target}");
    }
    let routes: i64 = sqlx::query_scalar("SELECT count(*) FROM proxy_routes WHERE app = $1")
        .bind(fleet.env.app())
        .fetch_one(&fleet.env.db.pool)
        .await
        .expect("count proxy_routes");
    assert_eq!(routes, 0, "no route points at a removed candidate");
    // The proxy keeps the app's listen address, with no upstream to send requests to.
    wait_until("the local proxy dropped the upstream", ANSWER, || async {
        let view = fleet.env.proxy_routes().await;
        let entry = view["routes"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["app"] == fleet.env.app()).cloned());
        entry.filter(|e| e["upstream"].is_null()).map(|_| ())
    })
    .await;
    fleet.cleanup().await;
}
