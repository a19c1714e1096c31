//! `pier.toml`'s JSON Schema, made from the structs the file is read into: each field's
//! doc comment is its description, each serde default its default. The configuration
//! reference (`reference.rs`) and the schema editors read are both made from it, so a
//! field is documented once, beside the field.

/// The schema of `pier.toml`, as editors read it: JSON Schema draft 07, which Taplo (and
/// so VS Code's Even Better TOML) reads. Defaults that are "unset" (an absent optional
/// value) are left out rather than written as `null`.
pub fn json_schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let root = generator.into_root_schema_for::<super::raw::Config>();
    let mut schema = serde_json::to_value(root).expect("a schema is JSON");
    drop_null_defaults(&mut schema);
    if let Some(o) = schema.as_object_mut() {
        o.insert("title".into(), "pier.toml".into());
    }
    schema
}

/// The schema as the file `docs/src/reference/pier.schema.json` holds it.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("a schema prints");
    text.push('\n');
    text
}

fn drop_null_defaults(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            if o.get("default").is_some_and(|d| d.is_null()) {
                o.remove("default");
            }
            o.values_mut().for_each(drop_null_defaults);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_null_defaults),
        _ => {}
    }
}
