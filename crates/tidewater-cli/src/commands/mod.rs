//! The `tidewater` subcommands.

pub mod checkpoints;
pub mod jobs;
pub mod run;
pub mod serve;
pub mod validate;

use std::path::Path;
use std::process::ExitCode;

use crate::spec::{Diagnostics, Spec};

/// Exit code for a spec or usage error.
pub const USAGE: u8 = 2;

/// Reads and parses the spec at `path` against the process environment;
/// every problem is printed and `Err` holds the exit code.
pub fn load_spec(path: &Path) -> Result<Spec, ExitCode> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!(
                "error: cannot read the spec {}: {e}; pass the path of a TOML spec (see docs/cli.md)",
                path.display()
            );
            return Err(ExitCode::from(USAGE));
        }
    };
    read_spec(&path.display().to_string(), &text).map_err(|d| report(&d))
}

/// Reads the spec text of `file` against the process environment, with
/// every problem found (also those of the expressions of what could be read,
/// so that one attempt reports everything).
pub fn read_spec(file: &str, text: &str) -> Result<Spec, Diagnostics> {
    let (spec, mut diags) = Spec::read(file, text, &|name| std::env::var(name).ok());
    if diags.is_empty() {
        return Ok(spec);
    }
    if let Err(more) = crate::build::check::check(&spec, &crate::build::offline_schemas(&spec)) {
        diags.items.extend(more.items);
    }
    Err(diags)
}

/// Prints the problems; the exit code for them.
pub fn report(diagnostics: &Diagnostics) -> ExitCode {
    eprintln!("{diagnostics}");
    ExitCode::from(USAGE)
}
