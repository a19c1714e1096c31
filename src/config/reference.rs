//! The configuration reference, `docs/src/reference/configuration.md`, written from the
//! schema (`schema.rs`): one section per table, one row per field, the field's doc comment
//! as its meaning. A paragraph of a doc comment that starts with `Default:` fills the
//! default column where serde's default cannot say it (a default worked out at load).

use serde_json::{Map, Value};

/// The tables in the order a reader meets them; any other comes after, by name.
const ORDER: &[&str] = &[
    "server",
    "registries",
    "sources",
    "apps",
    "targets",
    "proxy",
    "trust",
    "admins",
    "notifications",
    "policy",
    "retention",
];

const HEADER: &str = "# Configuration reference

<!-- Made from the code (src/config/): each field's text is the doc comment beside the field.
     Regenerate with: PIER_BLESS=1 cargo test --test docs -->

Pier reads one TOML file: `pier --config PATH` (or `PIER_CONFIG`; default `./pier.toml`). It
checks the whole file at start-up, unknown keys included, and refuses to start with a message
naming the field; `pier --config PATH check` does the same without starting anything and names
every secret it cannot read. Only the server's own commands read this file (`serve`, `worker`,
`proxy`, `migrate`, `check`, `reload`, `import`, `volumes`); the operator's commands do not.

This page is made from the code, and so is [`pier.schema.json`](pier.schema.json), the same
definitions as a JSON Schema (draft 07) that editors read: with Taplo or VS Code's Even Better
TOML, put `#:schema ./pier.schema.json` (a path or URL of the schema) on the first line of
`pier.toml`, or name the schema for `pier.toml` in a `.taplo.toml` rule. Examples of whole
files are in [Example configurations](examples.md).
";

/// The reference page's text.
pub fn reference_markdown() -> String {
    let schema = super::schema::json_schema();
    let page = Page::new(&schema);
    let mut out = String::from(HEADER);
    page.value_types(&mut out);
    let mut printed = Vec::new();
    for (name, prop) in page.root_tables() {
        page.section(&mut out, &mut printed, 2, Path::root(name), prop);
    }
    out
}

/// Every field (as `table.field`) whose doc comment is missing: the reference would say
/// nothing about it.
pub fn undocumented_fields() -> Vec<String> {
    let schema = super::schema::json_schema();
    let page = Page::new(&schema);
    let mut missing = Vec::new();
    for (name, prop) in page.root_tables() {
        page.undocumented(&mut missing, name, prop, 0);
    }
    missing
}

/// Where a table sits in the file, as its heading writes it (`apps.services.<name>`).
struct Path {
    heading: String,
}

impl Path {
    fn root(name: &str) -> Path {
        Path {
            heading: name.to_owned(),
        }
    }

    fn child(&self, field: &str, shape: Shape) -> Path {
        let heading = match shape {
            Shape::Map => format!("{}.{field}.<name>", self.heading),
            _ => format!("{}.{field}", self.heading),
        };
        Path { heading }
    }

    /// `[server]`, `[[apps]]`, `[apps.services.<name>]`.
    fn title(&self, shape: Shape) -> String {
        match shape {
            Shape::Array => format!("`[[{}]]`", self.heading),
            _ => format!("`[{}]`", self.heading),
        }
    }
}

/// How a table appears in the file.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Table,
    Array,
    Map,
}

/// mdBook's heading id: lower-case, letters, digits, `-` and `_` kept, spaces to `-`.
fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

struct Page<'a> {
    root: &'a Value,
    defs: Map<String, Value>,
}

impl<'a> Page<'a> {
    fn new(root: &'a Value) -> Page<'a> {
        let defs = root
            .get("definitions")
            .or_else(|| root.get("$defs"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Page { root, defs }
    }

    fn root_tables(&self) -> Vec<(&'a str, &'a Value)> {
        let Some(props) = self.root.get("properties").and_then(Value::as_object) else {
            return Vec::new();
        };
        let mut names: Vec<&str> = ORDER
            .iter()
            .copied()
            .filter(|n| props.contains_key(*n))
            .collect();
        names.extend(
            props
                .keys()
                .map(String::as_str)
                .filter(|k| !ORDER.contains(k)),
        );
        names.into_iter().map(|n| (n, &props[n])).collect()
    }

    /// A schema with its `$ref` followed and its `null` alternative dropped.
    fn resolve<'s>(&'s self, s: &'s Value) -> &'s Value {
        if let Some(one) = single_all_of(s) {
            return self.resolve(one);
        }
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let name = r.rsplit('/').next().unwrap_or(r);
            if let Some(d) = self.defs.get(name) {
                return self.resolve(d);
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = s.get(key).and_then(Value::as_array) {
                let real: Vec<&Value> = alts.iter().filter(|a| !is_null(a)).collect();
                if real.len() == 1 && alts.len() == 2 {
                    return self.resolve(real[0]);
                }
            }
        }
        s
    }

    /// The definition's name a schema refers to, through an optional's `anyOf`.
    fn def_name(&self, s: &Value) -> Option<String> {
        if let Some(one) = single_all_of(s) {
            return self.def_name(one);
        }
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            return r.rsplit('/').next().map(str::to_owned);
        }
        let alts = s.get("anyOf").or_else(|| s.get("oneOf"))?.as_array()?;
        let real: Vec<&Value> = alts.iter().filter(|a| !is_null(a)).collect();
        match real.as_slice() {
            [one] if alts.len() == 2 => self.def_name(one),
            _ => None,
        }
    }

    /// The table a field holds, if it holds one: its shape and its object schema.
    fn table_of<'s>(&'s self, s: &'s Value) -> Option<(Shape, &'s Value, Option<String>)> {
        let r = self.resolve(s);
        if has_properties(r) {
            return Some((Shape::Table, r, self.def_name(s)));
        }
        if let Some(items) = r.get("items") {
            let i = self.resolve(items);
            return has_properties(i).then(|| (Shape::Array, i, self.def_name(items)));
        }
        if let Some(v) = r.get("additionalProperties").filter(|v| v.is_object()) {
            let i = self.resolve(v);
            return has_properties(i).then(|| (Shape::Map, i, self.def_name(v)));
        }
        None
    }

    fn value_types(&self, out: &mut String) {
        out.push_str("\n## Value types\n\n");
        for (name, what) in [
            ("Secret", "secret"),
            ("Duration", "duration"),
            ("Size", "size"),
        ] {
            if let Some(d) = self.defs.get(name).and_then(|d| d.get("description")) {
                let text = d.as_str().unwrap_or_default();
                out.push_str(&format!("- **{what}**: {}\n", cell(text)));
            }
        }
        out.push_str(
            "\nEvery value of an app's `env` may be a secret reference too; such values are \
             masked (`***`) in the logs Pier shows.\n",
        );
    }

    // Long by design: a section is its heading, its text, its table and the sections of
    // the tables inside it, written in that order.
    fn section(
        &self,
        out: &mut String,
        printed: &mut Vec<(String, String, String)>,
        level: usize,
        path: Path,
        prop: &Value,
    ) {
        let Some((shape, table, def)) = self.table_of(prop) else {
            return;
        };
        let title = path.title(shape);
        if let Some(d) = def.filter(|d| !printed.iter().any(|(p, _, _)| p == d)) {
            printed.push((d, anchor(&title), title.clone()));
        }
        out.push_str(&format!("\n{} {title}\n\n", "#".repeat(level)));
        let intro = table
            .get("description")
            .or_else(|| prop.get("description"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !intro.is_empty() {
            out.push_str(&paragraphs(intro));
            out.push_str("\n\n");
        }
        out.push_str("| field | type | default | meaning |\n| --- | --- | --- | --- |\n");
        let fields = self.fields(table);
        let mut nested = Vec::new();
        for (name, field, required) in &fields {
            let mut kind = self.type_name(field);
            if let Some((inner, _, d)) = self.table_of(field) {
                let child = path.child(name, inner);
                let known = d.as_ref().and_then(|d| {
                    printed
                        .iter()
                        .find(|(p, _, _)| p == d)
                        .map(|(_, a, t)| (a.clone(), t.clone()))
                });
                let (target, shown) = known
                    .clone()
                    .unwrap_or_else(|| (anchor(&child.title(inner)), child.title(inner)));
                kind = format!("{kind}, see [{shown}](#{target})");
                if known.is_none() {
                    // Registered now: a later field of the same type links to this section.
                    if let Some(d) = d {
                        printed.push((d, target, shown));
                    }
                    nested.push((child, *field));
                }
            }
            if *required {
                kind.push_str(", **required**");
            }
            let (meaning, stated) = split_default(field_text(field));
            let default = field
                .get("default")
                .map(|d| format!("`{}`", toml_value(d)))
                .or(stated)
                .unwrap_or_default();
            let meaning = format!("{meaning}{}", self.variants(field));
            out.push_str(&format!(
                "| `{name}` | {} | {} | {} |\n",
                cell(&kind),
                cell(&default),
                cell(&meaning)
            ));
        }
        for (child, field) in nested {
            self.section(out, printed, (level + 1).min(4), child, field);
        }
    }

    /// A table's fields: the required ones first, then by name.
    fn fields<'s>(&self, table: &'s Value) -> Vec<(&'s str, &'s Value, bool)> {
        let required: Vec<&str> = table
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields: Vec<(&str, &Value, bool)> = table
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.as_str(), v, required.contains(&k.as_str())))
                    .collect()
            })
            .unwrap_or_default();
        fields.sort_by_key(|(name, _, required)| (!required, *name));
        fields
    }

    fn undocumented(&self, missing: &mut Vec<String>, path: &str, prop: &Value, depth: usize) {
        let Some((_, table, _)) = self.table_of(prop) else {
            return;
        };
        for (name, field, _) in self.fields(table) {
            if field_text(field).trim().is_empty() {
                missing.push(format!("{path}.{name}"));
            }
            if depth < 4 {
                self.undocumented(missing, &format!("{path}.{name}"), field, depth + 1);
            }
        }
    }

    /// The type column: `duration`, `secret`, `list of string`, `"a"` or `"b"`.
    fn type_name(&self, s: &Value) -> String {
        if let Some(one) = single_all_of(s) {
            return self.type_name(one);
        }
        if let Some(name) = s
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.rsplit('/').next())
        {
            match name {
                "Duration" => return "duration".into(),
                "Size" => return "size".into(),
                "Secret" => return "secret".into(),
                _ => {}
            }
            if let Some(d) = self.defs.get(name) {
                return self.type_name(d);
            }
        }
        if let Some(values) = enum_values(s) {
            return values.join(" or ");
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = s.get(key).and_then(Value::as_array) {
                let names: Vec<String> = alts
                    .iter()
                    .filter(|a| !is_null(a))
                    .map(|a| self.type_name(a))
                    .collect();
                return names.join(" or ");
            }
        }
        let types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => Vec::new(),
        };
        let one = |t: &str| match t {
            "boolean" => "bool".to_owned(),
            "array" => match s.get("items") {
                Some(items) => format!("list of {}", self.type_name(items)),
                None => "list".to_owned(),
            },
            "object" => match s.get("additionalProperties").filter(|v| v.is_object()) {
                Some(v) => format!("table of {}", self.type_name(v)),
                None => "table".to_owned(),
            },
            other => other.to_owned(),
        };
        types.into_iter().map(one).collect::<Vec<_>>().join(" or ")
    }

    /// What each documented value of an enum means, after the field's own text.
    fn variants(&self, field: &Value) -> String {
        let s = self.resolve(field);
        let Some(alts) = s.get("oneOf").and_then(Value::as_array) else {
            return String::new();
        };
        let said: Vec<String> = alts
            .iter()
            .filter_map(|a| {
                let value = a.get("const")?.as_str()?;
                let text = a.get("description")?.as_str()?;
                Some(format!("`{value}`: {}", text.trim()))
            })
            .collect();
        match said.is_empty() {
            true => String::new(),
            false => format!(" {}", said.join(" ")),
        }
    }
}

/// Draft 07 ignores what stands beside a `$ref`, so a described reference is written as
/// `allOf` of the reference alone.
fn single_all_of(s: &Value) -> Option<&Value> {
    match s.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
        Some([one]) => Some(one),
        _ => None,
    }
}

fn is_null(s: &Value) -> bool {
    s.get("type").and_then(Value::as_str) == Some("null")
}

fn has_properties(s: &Value) -> bool {
    s.get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
}

/// The values of an enum of strings, quoted as the file writes them.
fn enum_values(s: &Value) -> Option<Vec<String>> {
    let quoted = |v: &Value| format!("`{}`", toml_value(v));
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        return Some(values.iter().map(quoted).collect());
    }
    let alts = s.get("oneOf").and_then(Value::as_array)?;
    alts.iter()
        .map(|a| {
            a.get("const")
                .or_else(|| {
                    a.get("enum")
                        .and_then(Value::as_array)
                        .and_then(|e| e.first())
                })
                .map(quoted)
        })
        .collect()
}

fn field_text(field: &Value) -> &str {
    field
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A doc comment's text without its `Default:` paragraph, and that default.
fn split_default(text: &str) -> (String, Option<String>) {
    let mut meaning = Vec::new();
    let mut default = None;
    for para in text.split("\n\n") {
        match para.trim().strip_prefix("Default:") {
            Some(d) => default = Some(d.trim().trim_end_matches('.').to_owned()),
            None => meaning.push(para),
        }
    }
    (paragraphs(&meaning.join("\n\n")), default)
}

/// A doc comment's text as one line of Markdown.
fn paragraphs(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A table cell: one line, its pipes escaped.
fn cell(text: &str) -> String {
    paragraphs(text).replace('|', "\\|")
}

/// A default as the file would write it.
fn toml_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(toml_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(o) if o.is_empty() => "{}".to_owned(),
        Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_value(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        other => other.to_string(),
    }
}
