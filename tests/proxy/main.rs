//! `pier proxy`: what it does to the bytes, the framing it accepts, the connections it keeps
//! and a restart under load.

#[path = "../support/mod.rs"]
mod support;

mod connections;
mod framing;
mod protocols;
mod restart;
