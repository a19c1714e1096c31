//! Contained apps: hardening, per-app and shared networks, owned volumes, secrets (as env
//! and as files, age-encrypted ones), services beside an app, host-path policy and image
//! import, each also killed at its step boundaries. Real engine, registry and Postgres.

#[path = "../support/mod.rs"]
mod support;

mod apps;
mod crash;
mod import;
mod incarnations;
mod networks;
mod policy;
mod secret_files;
mod services;
mod volumes;
