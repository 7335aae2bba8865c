//! `tidewater validate SPEC.toml [--connect]`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::build::{self, BuildError};

/// Check a spec: keys, types, the component graph and every expression;
/// with `--connect`, also open every source and sink.
#[derive(Debug, clap::Args)]
pub struct ValidateCommand {
    /// The spec.
    pub spec: PathBuf,
    /// Also open every source and sink (tables and columns exist,
    /// credentials work, the output is writable), writing no data.
    #[arg(long)]
    pub connect: bool,
}

/// Exits 0 when the spec is good, 2 with every problem otherwise.
pub async fn validate(command: ValidateCommand) -> anyhow::Result<ExitCode> {
    let spec = match super::load_spec(&command.spec) {
        Ok(spec) => spec,
        Err(code) => return Ok(code),
    };
    match build::validate(&spec, command.connect).await {
        Ok(()) => {
            println!(
                "{}: valid ({} components{})",
                command.spec.display(),
                spec.components.len(),
                if command.connect {
                    ", every source and sink opened"
                } else {
                    "; --connect also opens sources and sinks"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(BuildError::Spec(d) | BuildError::Connect(d)) => Ok(super::report(&d)),
    }
}
