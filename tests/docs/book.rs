//! The site builds with mdBook, and every link in it resolves: to a page or file of the
//! built book, and to an anchor that page has. Links that leave the site (`http…`) are
//! not followed; a link from the site to a file outside it (`../../src/…`) is an error,
//! since the published site does not have it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::{files_under, markdown_files, read, root, shown};

/// The mdBook the suite runs: `PIER_MDBOOK`, else `mdbook` on `PATH`.
fn mdbook() -> PathBuf {
    if let Some(p) = std::env::var_os("PIER_MDBOOK") {
        return PathBuf::from(p);
    }
    PathBuf::from("mdbook")
}

/// Builds the book into a folder of its own, so that tests running at once do not share one.
fn build() -> PathBuf {
    let out = std::env::temp_dir().join(format!("pier-book-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let started = Instant::now();
    let result = Command::new(mdbook())
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "run {}: {e}; scripts/test installs mdBook (or set PIER_MDBOOK)",
                mdbook().display()
            )
        });
    let log = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build warned:\n{log}"
    );
    eprintln!("mdbook build: {:.1} s", started.elapsed().as_secs_f64());
    out
}

/// The `id="…"` of a page, and its `href="…"`.
fn ids_and_links(html: &str) -> (BTreeSet<String>, Vec<String>) {
    let attr = |name: &str| -> Vec<String> {
        let needle = format!(" {name}=\"");
        html.match_indices(&needle)
            .filter_map(|(i, _)| {
                let rest = &html[i + needle.len()..];
                rest.find('"').map(|end| rest[..end].to_owned())
            })
            .collect()
    };
    (attr("id").into_iter().collect(), attr("href"))
}

/// `a/./b/../c` as `a/c`.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn the_book_builds_and_every_link_and_anchor_in_it_resolves() {
    let out = build();
    let pages = files_under(&out, "html");
    assert!(pages.len() > 20, "the book has {} pages", pages.len());
    let mut ids: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut links = Vec::new();
    for page in &pages {
        // The print page repeats every page with its links rewritten; 404 is mdBook's own.
        let name = page.file_name().unwrap_or_default();
        if name == "print.html" || name == "404.html" {
            continue;
        }
        let (page_ids, page_links) = ids_and_links(&read(page));
        ids.insert(normal(page), page_ids);
        links.extend(page_links.into_iter().map(|l| (page.clone(), l)));
    }
    let mut broken = Vec::new();
    for (page, link) in &links {
        if link.contains("://") || link.starts_with("mailto:") || link.starts_with("javascript:") {
            continue;
        }
        let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
        let target = if file.is_empty() {
            normal(page)
        } else {
            normal(&page.parent().unwrap_or(&out).join(file))
        };
        let at = page.strip_prefix(&out).unwrap_or(page).display();
        if !target.starts_with(normal(&out)) {
            broken.push(format!("{at}: {link} leaves the site"));
        } else if !target.exists() {
            broken.push(format!("{at}: {link}: no such page or file"));
        } else if !anchor.is_empty() && ids.get(&target).is_some_and(|t| !t.contains(anchor)) {
            broken.push(format!("{at}: {link}: no anchor #{anchor} there"));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        broken.is_empty(),
        "broken links in the book:\n{}",
        broken.join("\n")
    );
}

/// The README is read on the forge, not in the book: its links go to files that exist in
/// the repository (the site's pages as their Markdown sources).
#[test]
fn the_readme_links_to_files_that_exist() {
    let readme = root().join("README.md");
    let text = read(&readme);
    let mut broken = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let link = &rest[..end];
        if link.contains("://") || link.starts_with('#') || link.starts_with("mailto:") {
            continue;
        }
        let file = link.split('#').next().unwrap_or(link);
        if !root().join(file).exists() {
            broken.push(link.to_owned());
        }
    }
    assert!(
        broken.is_empty(),
        "README.md links to missing files: {broken:?}"
    );
}

/// Every page of the site is in its table of contents, so none is built unreachable.
#[test]
fn every_page_is_in_the_table_of_contents() {
    let src = root().join("docs/src");
    let summary = read(&src.join("SUMMARY.md"));
    let missing: Vec<String> = markdown_files()
        .into_iter()
        .filter(|f| f.starts_with(&src) && f.file_name().is_some_and(|n| n != "SUMMARY.md"))
        .filter(|f| {
            let rel = f.strip_prefix(&src).unwrap().display().to_string();
            !summary.contains(&format!("]({rel})"))
        })
        .map(|f| shown(&f))
        .collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
}
