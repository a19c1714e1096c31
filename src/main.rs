use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pier::cli::Cli::parse();
    pier::runtime::init_tracing(cli.log_format);
    // One thread means one event loop, as nginx's worker: no work stealing, and no
    // scheduling shortcut that lets a busy connection starve the others.
    let threads = pier::cli::threads(&cli);
    let mut runtime = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    runtime.enable_all();
    if let Some(n) = threads.filter(|n| *n > 1) {
        runtime.worker_threads(n);
    }
    let runtime = match runtime.build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pier: start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(pier::cli::run(cli))
}
