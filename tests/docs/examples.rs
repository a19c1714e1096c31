//! Every config in `examples/` loads as `pier serve` would load it: `pier check` on each,
//! with the secrets it names (`env:NAME`) set to values of the right shape.

use std::process::Command;

use super::{files_under, read, root, shown};

/// A value of the shape the variable's use needs, told by its name.
pub(super) fn stand_in(name: &str) -> &'static str {
    if name.contains("DATABASE_URL") || name.starts_with("PIER_DB_") {
        "postgres://pier:pier@127.0.0.1:5432/pier"
    } else if name.ends_with("_URL") {
        "https://hooks.example.com/services/T000/B000/XXXX"
    } else if name.contains("NOTIFY_SECRET") || name.contains("STANDARD_WEBHOOKS") {
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    } else {
        // Long enough for every token and HMAC key, URL-safe for the senders whose token
        // is a path segment.
        "an-example-secret-of-more-than-32-bytes-0123456789"
    }
}

/// The `env:NAME` references of a config file.
pub(super) fn env_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .match_indices("\"env:")
        .filter_map(|(i, _)| {
            let rest = &text[i + 5..];
            let end = rest.find('"')?;
            Some(rest[..end].to_owned())
        })
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_example_config_loads_with_pier_check() {
    let configs = files_under(&root().join("examples"), "toml");
    assert!(
        configs.len() >= 7,
        "examples/ holds {} configs; expected the tour and six setups",
        configs.len()
    );
    let mut failed = Vec::new();
    for config in &configs {
        let text = read(config);
        let mut check = Command::new(env!("CARGO_BIN_EXE_pier"));
        check
            .arg("--config")
            .arg(config)
            .arg("check")
            .env_remove("PIER_CONFIG");
        for name in env_names(&text) {
            check.env(&name, stand_in(&name));
        }
        let out = check.output().expect("run pier check");
        if !out.status.success() {
            failed.push(format!(
                "{}:\n{}",
                shown(config),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "pier check refused:\n{}",
        failed.join("\n")
    );
}

/// The configs the docs point to are the ones that exist.
#[test]
fn the_example_pages_show_every_example_config() {
    let page = read(&root().join("docs/src/reference/examples.md"));
    for config in files_under(&root().join("examples"), "toml") {
        let name = config.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            page.contains(&format!("{{{{#include ../../../examples/{name}}}}}")),
            "docs/src/reference/examples.md does not show examples/{name}"
        );
    }
}
