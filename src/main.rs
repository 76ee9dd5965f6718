//! The vramdoc binary: parse arguments, run the command, map errors to exit codes.

use clap::Parser;

fn main() {
    let cli = match vramdoc::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // `vramdoc run`'s own usage errors exit 125, never a status the command could have.
            let code = if !e.use_stderr() {
                0
            } else if vramdoc::commands::run::is_run_invocation(std::env::args()) {
                vramdoc::exit::RUN_FAILED
            } else {
                vramdoc::exit::USAGE
            };
            std::process::exit(code);
        }
    };
    let code = match vramdoc::commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            vramdoc::exit::code_for(&err)
        }
    };
    std::process::exit(code);
}

/// `{err:#}` on one line: causes joined by ": ", newlines folded.
fn one_line(err: &anyhow::Error) -> String {
    format!("{err:#}").replace('\n', " ")
}
