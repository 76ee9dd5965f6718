//! The vramdoc binary: parse arguments, run the command, map errors to exit codes.

use clap::Parser;

fn main() {
    let cli = match vramdoc::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version go to standard output through the one writer, so a full
        // disk is an error (exit 3) there too.
        Err(e) if !e.use_stderr() => {
            let text = e.render().to_string();
            let code = match vramdoc::term::write_stdout(text.as_bytes()) {
                Ok(()) => vramdoc::exit::OK,
                Err(err) => {
                    vramdoc::term::eprint_line(&format!("error: {err}"));
                    vramdoc::exit::ENVIRONMENT
                }
            };
            std::process::exit(code);
        }
        // Usage errors go to stderr (exit 2); `vramdoc run`'s own exit 125, never a status
        // the command could have.
        Err(e) => {
            let _ = e.print();
            std::process::exit(vramdoc::commands::run::usage_error_status(
                std::env::args_os(),
            ));
        }
    };
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
