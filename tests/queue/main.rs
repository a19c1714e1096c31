//! The queue's rules: a delivery is stored once and queues at most one deployment per app,
//! deployments of one app never overlap, a dead holder is taken over, old rows are pruned,
//! and an idle Pier sends nothing. `store` holds the same rules against Postgres alone (no
//! engine, no registry, no `pier` process); the others run a real Pier.
//!
//! `idle` and `idle_while_waiting` count the statements of their own Pier through their
//! own relay (`PgProxy`), so the tests beside them in this process do not disturb them.

#[path = "../support/mod.rs"]
mod support;

mod batch_enqueue;
mod group_commit;
mod idle;
mod idle_while_waiting;
mod retention;
mod rolling_restart;
mod rules;
mod schema;
mod store;
mod takeover;
