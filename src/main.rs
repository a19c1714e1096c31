use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pier::cli::Cli::parse();
    pier::serve::init_tracing(cli.log_format);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = pier::cli::threads(&cli) {
        runtime.worker_threads(n);
    }
    let runtime = match runtime.build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pier: start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(pier::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pier: {e:#}");
            ExitCode::FAILURE
        }
    }
}
