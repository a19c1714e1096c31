//! The configuration reference and the JSON Schema are made from the config structs; the
//! files in `docs/` are checked against what the code makes now.

use super::{read, root, shown};

/// Compares a generated file with the one checked in, or writes it with `PIER_BLESS=1`.
fn matches_the_code(relative: &str, made: &str) {
    let path = root().join(relative);
    if std::env::var_os("PIER_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, made).unwrap_or_else(|e| panic!("write {relative}: {e}"));
        return;
    }
    let have = if path.exists() {
        read(&path)
    } else {
        String::new()
    };
    if have != made {
        let line = have
            .lines()
            .zip(made.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || have.lines().count().min(made.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "{} differs from what the code makes (first at line {line}): a config field was \
             added, removed or re-documented. Write it afresh with \
             `PIER_BLESS=1 cargo test --test docs reference::` and commit it.",
            shown(&path)
        );
    }
}

#[test]
fn the_configuration_reference_is_made_from_the_config_structs() {
    matches_the_code(
        "docs/src/reference/configuration.md",
        &pier::config::reference_markdown(),
    );
}

#[test]
fn the_published_json_schema_is_made_from_the_config_structs() {
    matches_the_code(
        "docs/src/reference/pier.schema.json",
        &pier::config::json_schema_text(),
    );
}

#[test]
fn every_config_field_is_documented_beside_it() {
    let missing = pier::config::undocumented_fields();
    assert!(
        missing.is_empty(),
        "these fields have no doc comment, so the reference says nothing about them: {}",
        missing.join(", ")
    );
}

/// Both directions by name, beside the byte comparison above: a field the code reads is
/// named in the reference, and a field the reference names is one the code reads.
#[test]
fn the_reference_names_exactly_the_fields_the_code_reads() {
    let schema = pier::config::json_schema();
    let mut fields = Vec::new();
    collect_fields(&schema, &schema, &mut fields, 0);
    let page = read(&root().join("docs/src/reference/configuration.md"));
    let named: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    for f in &fields {
        assert!(
            named.contains(&f.as_str()),
            "field `{f}` is missing from the reference"
        );
    }
    for n in &named {
        assert!(
            fields.iter().any(|f| f == n),
            "the reference names `{n}`, which no config struct has"
        );
    }
}

fn collect_fields(
    root: &serde_json::Value,
    s: &serde_json::Value,
    out: &mut Vec<String>,
    depth: usize,
) {
    if depth > 12 {
        return;
    }
    if let Some([one]) = s.get("allOf").and_then(|a| a.as_array()).map(Vec::as_slice) {
        return collect_fields(root, one, out, depth);
    }
    let s = match s.get("$ref").and_then(|r| r.as_str()) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap_or(r);
            &root["definitions"][name]
        }
        None => s,
    };
    if let Some(props) = s.get("properties").and_then(|p| p.as_object()) {
        for (k, v) in props {
            if depth > 0 {
                out.push(k.clone());
            }
            collect_fields(root, v, out, depth + 1);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = s.get(key).filter(|v| v.is_object()) {
            collect_fields(root, v, out, depth + 1);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(alts) = s.get(key).and_then(|a| a.as_array()) {
            for a in alts {
                collect_fields(root, a, out, depth + 1);
            }
        }
    }
}
