//! The vramdoc binary: parse arguments, run the command, map errors to exit codes.

use clap::Parser;

fn main() {
    let cli = vramdoc::cli::Cli::parse();
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
