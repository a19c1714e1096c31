use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = pier::cli::Cli::parse();
    pier::serve::init_tracing(cli.log_format);
    match pier::cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pier: {e:#}");
            ExitCode::FAILURE
        }
    }
}
