//! Writes the report's JSON Schema, generated from the report model
//! (`vramdoc::report::schema`), to the file given as the one argument (`scripts/update-schema`
//! passes docs/report.schema.json). Not a test: it says what it wrote and never reports a
//! pass; `tests/it/report_schema.rs` checks the checked-in file against the model.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(path), None) = (args.next(), args.next()) else {
        eprintln!("usage: update-schema FILE   (scripts/update-schema)");
        return ExitCode::from(2);
    };
    let schema = vramdoc::report::schema::json_schema();
    let old = std::fs::read_to_string(&path).ok();
    if let Err(e) = std::fs::write(&path, &schema) {
        eprintln!(
            "update-schema: cannot write {}: {e}",
            path.to_string_lossy()
        );
        return ExitCode::FAILURE;
    }
    let what = match old {
        Some(old) if old == schema => "unchanged",
        Some(_) => "rewritten: review the diff and commit it",
        None => "written: commit it",
    };
    println!("{} {what}", path.to_string_lossy());
    ExitCode::SUCCESS
}
