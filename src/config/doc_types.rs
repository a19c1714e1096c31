//! How the file's plain strings are described in its schema: a duration, a size and a
//! secret are strings to TOML, and each field that holds one names its type here
//! (`#[schemars(with = "...")]`), so that the reference and editors say what it takes.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A duration as written in the file.
pub(super) struct DurationText;

impl JsonSchema for DurationText {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration: a number and a unit, `\"30s\"`, `\"2m\"`, `\"1h 30m\"`, `\"12h\"`, `\"30d\"` (units `ms`, `s`, `m`, `h`, `d`).",
            "examples": ["30s", "1h 30m"]
        })
    }
}

/// A size in bytes as written in the file.
pub(super) struct SizeText;

impl JsonSchema for SizeText {
    fn schema_name() -> Cow<'static, str> {
        "Size".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A size: `\"512m\"`, `\"1g\"`, `\"64k\"` (powers of 1024) or a number of bytes.",
            "examples": ["512m", "1g"]
        })
    }
}

/// A secret, or a reference to one.
pub(super) struct SecretText;

impl JsonSchema for SecretText {
    fn schema_name() -> Cow<'static, str> {
        "Secret".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A secret: `\"env:NAME\"` (the environment variable `NAME`; Pier refuses to start if it is unset), `\"file:PATH\"` (the file's contents, one trailing newline dropped; a relative `PATH` is relative to the config file's folder), or anything else, taken as the value itself. Pier never prints a secret's value.",
            "examples": ["env:PIER_ADMIN_TOKEN", "file:/run/secrets/pier_db_url"]
        })
    }
}
