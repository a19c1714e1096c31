//! Pier's web side alone, in the test process, on an environment's database: no worker
//! runs in it, so whatever it shows was done by the environment's `pier` process, and it
//! answers while that process is paused or dead.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::TestEnv;

/// Pier's web side alone, in this test process, on the environment's database: no worker
/// runs here, so whatever it shows was done by the environment's `pier` process.
pub struct WebOnly {
    pub base: String,
    stop: CancellationToken,
}

impl Drop for WebOnly {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn web_only(env: &TestEnv) -> WebOnly {
    let config =
        pier::config::Config::parse(&env.config_toml(), std::path::Path::new(".")).expect("config");
    let config = Arc::new(config);
    let store = pier::store::Store::connect_lazy_many(&config.server.database_urls()).unwrap();
    let engine = pier::engine::Engine::connect(None).await.unwrap();
    let stop = CancellationToken::new();
    let state = pier::web::AppState {
        config: config.clone(),
        store: store.clone(),
        engine: pier::engine::EngineView::new(engine.clone()),
        targets: pier::web::engines::TargetViews::single(pier::engine::EngineView::new(engine)),
        metrics: None,
        stats: pier::background::stats::Stats::new(Duration::from_secs(10)),
        guard: Arc::new(pier::web::guard::Guard::new(1 << 20)),
        live: None,
        pages: pier::web::ui::PageState::new(store, stop.clone()),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let limits = pier::web::server::Limits {
        header_timeout: Duration::from_secs(10),
        max_connections: 256,
    };
    tokio::spawn(pier::web::server::serve(
        listener,
        pier::web::router(state),
        limits,
        stop.clone(),
    ));
    WebOnly { base, stop }
}
