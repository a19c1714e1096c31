//! The documentation cannot drift from the code: the site under `docs/` builds with
//! mdBook and every link and anchor in it resolves; the configuration reference and
//! `pier.toml`'s JSON Schema are what the code makes of its config structs; every
//! example config loads with `pier check`; every `pier` command the docs show exists, with
//! the options they give it; and the Getting started page's commands bring up the demo.
//!
//! `PIER_BLESS=1 cargo test --test docs` writes the reference and the schema afresh.
//! mdBook is found as `PIER_MDBOOK` or on `PATH` (`scripts/test` installs it).

mod book;
mod commands;
mod examples;
mod newcomer;
mod package;
mod reference;

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown the site is made of, and the README, which links into it.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    files.extend(files_under(&root().join("docs/src"), "md"));
    files
}

/// Every file under `dir` whose name ends with `.ext`, in a stable order.
fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A path as the repository names it, for messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}
