//! The status pages and the JSON API: signing in, live pages, the deliveries page, the
//! headers every answer carries, the OpenAPI schema, and a real browser.

#[path = "../support/mod.rs"]
mod support;

mod api_schema;
mod browser;
mod deliveries_page;
mod headers;
mod live_pages;
mod sign_in;
