//! The house rules that a reader relies on and a compiler does not check, checked over
//! `src/` as parsed Rust (syn), so that a room that grows crooked fails the suite instead
//! of waiting for the next reader to notice:
//!
//! - no function is longer than [`MAX_FN_LINES`] unless a comment right above it starts
//!   with `// Long by design:` and says why;
//! - the top-level modules (folders) reference each other without a cycle: `domain` and
//!   `error` sit below everything, and a layer that needs one above it is misplaced;
//! - inside a folder, its files and subfolders reference each other without a cycle (the
//!   folder's `mod.rs` is their hub, not one of them);
//! - no file is longer than [`MAX_FILE_LINES`] unless its header says why
//!   (`//! Long by design:`);
//! - only `domain/reference.rs` names oci-client: its own parser holds 7 MiB for the life
//!   of the process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// About a screen: past it a function does several things, and each wants a name.
const MAX_FN_LINES: usize = 80;
const REASON: &str = "// Long by design:";

fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out.sort();
    out
}

fn parse(path: &Path) -> (String, syn::File) {
    let text = std::fs::read_to_string(path).expect("read source");
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (text, file)
}

/// The top-level module a file belongs to: `src/store/batch/mod.rs` is `store`.
fn module_of(path: &Path) -> String {
    let rel = path
        .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .expect("under src");
    let first = rel.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_owned()
}

struct Functions<'a> {
    lines: &'a [&'a str],
    long: Vec<(usize, usize, String)>,
}

impl Functions<'_> {
    /// `sig` to the end of `body`: the function's own lines, not its doc comment.
    fn check(&mut self, name: String, sig: proc_macro2::Span, body: proc_macro2::Span) {
        let (start, end) = (sig.start().line, body.end().line);
        let length = end + 1 - start;
        if length <= MAX_FN_LINES {
            return;
        }
        // The reason sits in the comments above the item (its attributes and docs between).
        let above = self.lines[..start.saturating_sub(1)]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("#[") || t.starts_with("///")
            })
            .any(|l| l.trim_start().starts_with(REASON));
        if !above {
            self.long.push((start, length, name));
        }
    }
}

impl<'ast> Visit<'ast> for Functions<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.check(f.sig.ident.to_string(), f.sig.span(), f.block.span());
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(f.sig.ident.to_string(), f.sig.span(), f.block.span());
        syn::visit::visit_impl_item_fn(self, f);
    }
}

#[test]
fn no_function_is_longer_than_a_screen_without_a_written_reason() {
    let mut found = Vec::new();
    for path in sources() {
        let (text, file) = parse(&path);
        let lines: Vec<&str> = text.lines().collect();
        let mut v = Functions {
            lines: &lines,
            long: Vec::new(),
        };
        v.visit_file(&file);
        for (line, length, name) in v.long {
            found.push(format!("{}:{line} {name} ({length} lines)", path.display()));
        }
    }
    assert!(
        found.is_empty(),
        "functions over {MAX_FN_LINES} lines with no `{REASON}` comment above them:\n{}",
        found.join("\n")
    );
}

/// Every `crate::<module>` a file names, in code (`use` trees and paths), not in docs.
#[derive(Default)]
struct CrateRefs(BTreeSet<String>);

impl<'ast> Visit<'ast> for CrateRefs {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let mut segments = p.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next())
            && first.ident == "crate"
        {
            self.0.insert(second.ident.to_string());
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        fn walk(tree: &syn::UseTree, under_crate: bool, out: &mut BTreeSet<String>) {
            match tree {
                syn::UseTree::Path(p) if !under_crate && p.ident == "crate" => {
                    walk(&p.tree, true, out)
                }
                syn::UseTree::Path(p) if under_crate => {
                    out.insert(p.ident.to_string());
                }
                syn::UseTree::Name(n) if under_crate => {
                    out.insert(n.ident.to_string());
                }
                syn::UseTree::Rename(r) if under_crate => {
                    out.insert(r.ident.to_string());
                }
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        walk(t, under_crate, out);
                    }
                }
                _ => {}
            }
        }
        walk(&u.tree, false, &mut self.0);
    }
}

/// The module graph's strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in sources() {
        let from = module_of(&path);
        if from == "lib" || from == "main" {
            continue;
        }
        let (_, file) = parse(&path);
        let mut refs = CrateRefs::default();
        refs.visit_file(&file);
        let to = edges.entry(from.clone()).or_default();
        to.extend(refs.0.into_iter().filter(|m| *m != from));
    }
    edges
}

#[test]
fn the_folders_reference_each_other_without_a_cycle() {
    let edges = module_graph();
    assert!(
        edges.contains_key("store") && edges["pipeline"].contains("store"),
        "the module graph was read: {edges:?}"
    );
    let found = cycles(&edges);
    let explain: Vec<String> = found
        .iter()
        .map(|c| {
            let inner: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    edges[from]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            format!("{{{}}}: {}", c.join(", "), inner.join(", "))
        })
        .collect();
    assert!(found.is_empty(), "folder cycles:\n{}", explain.join("\n"));
}

#[test]
fn domain_and_error_use_no_other_layer() {
    let edges = module_graph();
    for base in ["domain", "error"] {
        let above: Vec<&String> = edges
            .get(base)
            .into_iter()
            .flatten()
            .filter(|m| !["domain", "error"].contains(&m.as_str()))
            .collect();
        assert!(above.is_empty(), "{base} uses {above:?}");
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&edges), vec![vec!["a", "b", "c"]]);
}

// Inside a folder --------------------------------------------------------------------------

/// A module's path from the crate root: `src/web/timeline/swarm.rs` is `web::timeline::swarm`;
/// a folder's `mod.rs` is the folder.
fn module_path(path: &Path) -> Vec<String> {
    let rel = path
        .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// Every module path a file names in code, made absolute: `super::` and `self::` resolved
/// against the module the path sits in (inline `mod tests {}` blocks included).
struct AbsoluteRefs {
    here: Vec<String>,
    out: BTreeSet<Vec<String>>,
}

impl AbsoluteRefs {
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut at = self.here.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                at.clear();
                rest = &rest[1..];
            }
            Some("super") | Some("self") => {
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "super" => {
                            at.pop()?;
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    fn add(&mut self, segments: Vec<String>) {
        if let Some(abs) = self.resolve(&segments) {
            self.out.insert(abs);
        }
    }
}

impl<'ast> Visit<'ast> for AbsoluteRefs {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.here.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.here.pop();
        }
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.add(segments);
        syn::visit::visit_path(self, p);
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        fn walk(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
            match tree {
                syn::UseTree::Path(p) => {
                    prefix.push(p.ident.to_string());
                    walk(&p.tree, prefix, out);
                    prefix.pop();
                }
                syn::UseTree::Name(n) => {
                    let mut full = prefix.clone();
                    full.push(n.ident.to_string());
                    out.push(full);
                }
                syn::UseTree::Rename(r) => {
                    let mut full = prefix.clone();
                    full.push(r.ident.to_string());
                    out.push(full);
                }
                syn::UseTree::Glob(_) => out.push(prefix.clone()),
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        walk(t, prefix, out);
                    }
                }
            }
        }
        let mut found = Vec::new();
        walk(&u.tree, &mut Vec::new(), &mut found);
        for f in found {
            self.add(f);
        }
    }
}

/// For each folder, the edges between its children (its files and subfolders, not its
/// `mod.rs`): `a -> b` when anything in `a` names something inside `b`.
fn folder_graphs() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let files = sources();
    for path in &files {
        let m = module_path(path);
        if let Some((last, parent)) = m.split_last() {
            children
                .entry(parent.to_vec())
                .or_default()
                .insert(last.clone());
        }
    }
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for path in &files {
        let here = module_path(path);
        let (_, file) = parse(path);
        let mut refs = AbsoluteRefs {
            here: here.clone(),
            out: BTreeSet::new(),
        };
        refs.visit_file(&file);
        // Every folder this file sits under, and which of its children holds the file.
        for depth in 0..here.len() {
            let folder = &here[..depth];
            let from = &here[depth];
            let Some(kids) = children.get(folder) else {
                continue;
            };
            for target in &refs.out {
                if target.len() > depth
                    && target[..depth] == *folder
                    && target[depth] != *from
                    && kids.contains(&target[depth])
                {
                    graphs
                        .entry(folder.join("::"))
                        .or_default()
                        .entry(from.clone())
                        .or_default()
                        .insert(target[depth].clone());
                }
            }
        }
    }
    graphs
}

#[test]
fn the_files_of_a_folder_reference_each_other_without_a_cycle() {
    let graphs = folder_graphs();
    assert!(
        graphs.get("web").is_some_and(|g| !g.is_empty()),
        "the folders' graphs were read: {graphs:?}"
    );
    let mut found = Vec::new();
    for (folder, edges) in &graphs {
        for c in cycles(edges) {
            let inner: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    edges[from]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            let name = if folder.is_empty() { "src" } else { folder };
            found.push(format!(
                "{name}: {{{}}}: {}",
                c.join(", "),
                inner.join(", ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "cycles inside folders:\n{}",
        found.join("\n")
    );
}

// The size of a file ---------------------------------------------------------------------

/// Past this a file holds several concerns, and each wants a name of its own.
const MAX_FILE_LINES: usize = 600;
const FILE_REASON: &str = "//! Long by design:";

#[test]
fn no_file_is_longer_than_600_lines_without_a_written_reason() {
    let mut found = Vec::new();
    for path in sources() {
        let text = std::fs::read_to_string(&path).expect("read source");
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES && !text.lines().any(|l| l.starts_with(FILE_REASON)) {
            found.push(format!("{} ({lines} lines)", path.display()));
        }
    }
    assert!(
        found.is_empty(),
        "files over {MAX_FILE_LINES} lines with no `{FILE_REASON}` line in their header:\n{}",
        found.join("\n")
    );
}

// Image references -----------------------------------------------------------------------

/// oci-client's `Reference::try_from` builds a regex with a Unicode tag class that takes
/// 20 MiB to compile and keeps 7 MiB for the life of the process: Pier reads references
/// with the same grammar compiled with ASCII classes, in `domain/reference.rs` alone.
#[test]
fn only_the_reference_grammar_names_oci_client() {
    let found: Vec<String> = sources()
        .into_iter()
        .filter(|p| !p.ends_with("src/domain/reference.rs"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).expect("read source");
            text.contains("oci_client") || text.contains("oci_spec")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        found.is_empty(),
        "these name oci-client; parse image references with domain::reference::parse:\n{}",
        found.join("\n")
    );
}
