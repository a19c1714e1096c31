//! What every long-running command of Pier's (`serve`, `worker`, `proxy`) sets up the same
//! way at start: its log lines, its one TLS crypto provider, its metrics recorder, and how
//! it hears that it should stop.

use std::sync::OnceLock;

use metrics_exporter_prometheus::PrometheusHandle;

/// How log lines are written: human-readable text, or one JSON object per line for a log
/// collector. Colour codes only when the output is a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("pier=info,warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

/// Exactly one TLS crypto provider: reqwest's `rustls` feature (the registry client, probes) brings aws-lc-rs.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// The process's metrics recorder, installed once however many times Pier starts in it.
pub(crate) fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Durations are histograms with buckets (not summaries), so that they can be
            // summed across processes: a step takes milliseconds to minutes.
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &[
                        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    ],
                )
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

/// SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
