//! Webhooks in: who may deliver (each sender's authentication and parser), what a hostile
//! or slow client can do to the webhook listener, which tag an app follows, and the poller
//! that finds pushes when the registry sends no notification.

#[path = "../support/mod.rs"]
mod support;

mod hostile_clients;
mod hostile_input;
mod poller;
mod senders;
mod tag_rules;
mod webhooks;
