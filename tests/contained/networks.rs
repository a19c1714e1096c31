//! The private network of an app that left the config is removed by
//! reconciliation once nothing is attached, and the removal is recorded; a network with a
//! container on it (running or stopped), one without Pier's labels, and one labelled for an
//! app this Pier never deployed are left alone. Real engine, registry and Postgres.

use std::time::Duration;

use crate::support::*;
use pier::background::reconcile::Reconciled;

const DEPLOY: Duration = Duration::from_secs(60);

/// The engine's id of the network `name`, if it exists.
fn network_id(name: &str) -> Option<String> {
    let (ok, out) = docker_cli(&["network", "inspect", name, "--format", "{{.Id}}"]);
    ok.then(|| out.trim().to_owned())
}

/// A network the test made by hand, removed whatever happens to the test.
struct HandMade(String);

impl HandMade {
    fn create(name: String, labels: &[&str]) -> Self {
        let mut args = vec!["network", "create"];
        for l in labels {
            args.extend(["--label", l]);
        }
        args.push(&name);
        let (ok, out) = docker_cli(&args);
        assert!(ok, "{out}");
        Self(name)
    }
}

impl Drop for HandMade {
    fn drop(&mut self) {
        let _ = docker_cli(&["network", "rm", &self.0]);
    }
}

/// One reconciliation pass in this process, with `toml` as the config.
async fn reconcile_with(toml: &str) -> Reconciled {
    let config = pier::config::Config::parse(toml, std::path::Path::new(".")).expect("config");
    let store = pier::store::Store::connect_lazy_many(&config.server.database_urls()).unwrap();
    let targets = pier::target::Targets::build(&config.targets, None).unwrap();
    pier::background::reconcile::reconcile_all(&config, &store, &targets)
        .await
        .expect("reconcile")
}

#[tokio::test]
async fn the_network_of_an_app_removed_from_the_config_is_removed_by_reconcile() {
    let kept = AppSpec::new("kept");
    let env = TestEnv::builder()
        .server_toml("sweep_interval = \"1s\"")
        .add_app(kept.clone())
        .start()
        .await;
    let gone = env.app().to_owned();
    env.push(&TestImage::healthy("v1"), "main").await;
    env.registry()
        .push(&kept.repo, "main", &TestImage::healthy("k1"))
        .await;
    env.wait_app_version("v1", DEPLOY).await;
    let url = format!("http://127.0.0.1:{}/version", kept.publish_port);
    wait_until("the other app serves k1", DEPLOY, || async {
        matches!(http_get(&url).await, Some((200, v)) if v == "k1").then_some(())
    })
    .await;
    // Both deployments are over before the apps leave the config: a deployment that is
    // still running then would fail and remove its candidate.
    for app in [&gone, &kept.name] {
        let d = env.latest_final_of(app, &[], DEPLOY).await;
        assert_eq!(d["state"], "succeeded", "{d:#}");
    }
    let own = format!("pier-{gone}");
    let own_id = network_id(&own).expect("the app's network exists");
    // Named like an app's network, but not made by Pier; and labelled as Pier's for an app
    // this installation never deployed (another Pier on the same engine, say).
    let unlabelled = HandMade::create(format!("pier-{}", unique_app("hand")), &[]);
    let foreign_app = unique_app("foreign");
    let foreign = HandMade::create(
        format!("pier-{foreign_app}"),
        &["pier.managed=true", &format!("pier.app={foreign_app}")],
    );
    let untouched = |r: &Reconciled| {
        assert!(
            !r.networks_removed.contains(&unlabelled.0) && !r.networks_removed.contains(&foreign.0),
            "{r:?}"
        );
        assert!(network_id(&unlabelled.0).is_some(), "without Pier's labels");
        assert!(network_id(&foreign.0).is_some(), "never deployed here");
    };

    // Both apps leave the config of the running Pier (whose sweep runs every second) and
    // of this process's passes. Their containers stay (reconciliation never removes what an
    // app that is gone left running), so their networks stay too.
    let start = env.config_text();
    let neither = without_app(&without_app(&start, &gone), &kept.name);
    env.reload(&neither, 1, DEPLOY).await;
    let r = reconcile_with(&neither).await;
    assert!(r.networks_removed.is_empty(), "{r:?}");
    untouched(&r);
    assert_eq!(network_id(&own).as_deref(), Some(own_id.as_str()));

    // A stopped container is attached too: the engine would remove the network under it,
    // and that container could never start again.
    let mine = containers_of(&gone);
    assert_eq!(mine.len(), 1, "{mine:?}");
    let (ok, out) = docker_cli(&["stop", "-t", "1", &mine[0]]);
    assert!(ok, "{out}");
    let r = reconcile_with(&neither).await;
    assert!(r.networks_removed.is_empty(), "{r:?}");
    assert!(network_id(&own).is_some(), "a stopped container is on it");

    // The operator removes the app's container: the running Pier's sweep removes its
    // network and records it.
    let (ok, out) = docker_cli(&["rm", "-f", &mine[0]]);
    assert!(ok, "{out}");
    // The record is written right after the removal: waiting for it waits for both.
    let rows = wait_until(
        "the sweep removes the network and records it",
        DEPLOY,
        || async {
            let rows: Vec<(String, Option<String>, String)> = sqlx::query_as(
                "SELECT action, network_id, detail FROM reconcile_actions WHERE app = $1",
            )
            .bind(&gone)
            .fetch_all(&env.db.pool)
            .await
            .unwrap();
            (!rows.is_empty()).then_some(rows)
        },
    )
    .await;
    assert_eq!(network_id(&own), None, "removed from the engine");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "removed_network");
    assert_eq!(rows[0].1.as_deref(), Some(own_id.as_str()));
    assert!(rows[0].2.contains(&own), "{rows:?}");
    // A whole pass after that removes nothing else: the other app's container is still on
    // its network, and the hand-made ones are not Pier's.
    let r = reconcile_with(&neither).await;
    assert!(r.networks_removed.is_empty(), "{r:?}");
    untouched(&r);
    assert!(
        network_id(&format!("pier-{}", kept.name)).is_some(),
        "its app's container is still on it"
    );
    env.cleanup().await;
}
