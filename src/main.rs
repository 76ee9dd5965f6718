//! The vramdoc binary: parse arguments, run the command, map errors to exit codes.

use clap::Parser;

fn main() {
    let cli = vramdoc::cli::Cli::parse();
    let code = match vramdoc::commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            vramdoc::term::eprint_line(&format!("error: {}", one_line(&err)));
            vramdoc::exit::code_for(&err)
        }
    };
    std::process::exit(code);
}

/// The error and its causes on one line, joined by ": ", newlines folded. A cause whose text
/// its parent already shows (an OS error quoted by the message that wraps it) is printed once.
fn one_line(err: &anyhow::Error) -> String {
    let mut s = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if s.contains(&text) {
            continue;
        }
        if !s.is_empty() {
            s.push_str(": ");
        }
        s.push_str(&text);
    }
    s.replace('\n', " ")
}
