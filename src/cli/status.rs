//! `pier status`: what serves and each app's latest deployment, with a row per engine, as
//! the server sees them: a client of `GET /api/apps`, so it needs neither the config nor
//! the database, and shows the engines the server reaches (with the server's keys), not
//! the ones this machine happens to reach.

use anyhow::bail;
use serde_json::{Map, Value};

use super::Remote;
use super::credentials::{self, Need};

/// The fields of `GET /api/apps`'s rows that `pier status --json` prints.
const FIELDS: [&str; 6] = [
    "name",
    "image",
    "tag",
    "generation",
    "latest_deployment",
    "engines",
];

pub(super) async fn run(remote: Remote, json: bool) -> anyhow::Result<()> {
    let client = credentials::connect(&remote, Need::Nothing)?;
    let answer = client.get("/api/apps").await?;
    let Some(apps) = answer.as_array() else {
        bail!("{} answered no list of apps", client.base());
    };
    let apps: Vec<Value> = apps.iter().map(pick).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&apps)?);
        return Ok(());
    }
    for a in &apps {
        print!("{}", app_text(a));
    }
    Ok(())
}

fn pick(app: &Value) -> Value {
    let mut out = Map::new();
    for f in FIELDS {
        out.insert(f.to_owned(), app.get(f).cloned().unwrap_or(Value::Null));
    }
    Value::Object(out)
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// An app's lines: name and image, what serves, its latest deployment; with several
/// engines or a swarm service, a line per engine (and per node of the service).
fn app_text(a: &Value) -> String {
    let serving = a["generation"]["digest"]
        .as_str()
        .unwrap_or("nothing deployed");
    let latest = &a["latest_deployment"];
    let mut out = format!(
        "{:<20} {}:{}\n  serving: {serving}\n  latest:  {} {} {}\n",
        s(&a["name"]),
        s(&a["image"]),
        s(&a["tag"]),
        latest["id"].as_str().unwrap_or("-"),
        s(&latest["state"]),
        s(&latest["error"]),
    );
    let engines = a["engines"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let swarm = engines.iter().any(|e| !e["service"].is_null());
    if engines.len() > 1 || swarm {
        for e in engines {
            out.push_str(&engine_line(e));
            out.push('\n');
            let service = &e["service"];
            for n in service["nodes"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "    node {:<24} {} {}: {} running, {} on the serving digest\n",
                    s(&n["node"]),
                    s(&n["role"]),
                    s(&n["status"]),
                    n["running"],
                    n["on_digest"]
                ));
            }
            for err in service["task_errors"].as_array().into_iter().flatten() {
                out.push_str(&format!("    task error: {}\n", s(err)));
            }
        }
    }
    out
}

/// `  engine tls1  sha256:…  pier-web-…  running  (rollout: health started)`.
fn engine_line(e: &Value) -> String {
    let digest = e["digest"]
        .as_str()
        .map(crate::web::engines::short_digest)
        .unwrap_or_else(|| "-".to_owned());
    let container = e["container_name"]
        .as_str()
        .or(e["container_id"].as_str())
        .unwrap_or("-");
    let mut line = format!(
        "  engine {:<12} {digest:<20} {container:<32} {}",
        s(&e["target"]),
        s(&e["state"])
    );
    if let Some(why) = e["unreachable"].as_str() {
        line.push_str(&format!(": {why}"));
    }
    let rollout = &e["rollout"];
    if rollout.is_object() {
        let words = match (rollout["step"].as_str(), rollout["step_state"].as_str()) {
            (Some(step), Some(state)) => format!("{step} {state}"),
            _ => "waiting for its batch".to_owned(),
        };
        line.push_str(&format!("  (rollout: {words})"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swarm_app_shows_its_service_per_node() {
        let app = serde_json::json!({
            "name": "web", "image": "r/web", "tag": "main", "warnings": [],
            "generation": { "digest": "sha256:abc" },
            "latest_deployment": { "id": "d1", "state": "succeeded", "error": null },
            "engines": [{
                "target": "swarm", "digest": "sha256:abcdef0123456789", "container_name": null,
                "container_id": null, "state": "3/3 running, 3 on the serving digest",
                "unreachable": null, "rollout": null,
                "service": { "nodes": [
                    { "node": "h1", "role": "manager", "status": "ready", "running": 2, "on_digest": 2 },
                    { "node": "h2", "role": "worker", "status": "ready", "running": 1, "on_digest": 1 }
                ], "task_errors": [] }
            }]
        });
        let text = app_text(&pick(&app));
        assert!(
            text.starts_with("web                  r/web:main\n"),
            "{text}"
        );
        assert!(text.contains("  serving: sha256:abc\n"), "{text}");
        assert!(
            text.contains("3/3 running, 3 on the serving digest"),
            "{text}"
        );
        assert_eq!(text.matches("    node ").count(), 2, "{text}");
        assert!(
            !pick(&app).as_object().unwrap().contains_key("warnings"),
            "--json keeps the fields it always had"
        );
    }
}
