//! From a checked spec to a runnable job, in three steps: [`open`] the
//! connectors (the only I/O), [`check`] every transform against the
//! schema it will read (pure), [`declare`] the pipeline.

pub mod check;
pub mod declare;
pub mod open;

use std::collections::HashMap;
use std::fmt;

use tidewater_core::Job;

use crate::runner::describe_error;
use crate::spec::{Diagnostic, Diagnostics, Spec};

/// Why a spec could not become a job.
#[derive(Debug)]
pub enum BuildError {
    /// The spec is wrong: fix the file (exit code 2).
    Spec(Diagnostics),
    /// A connector could not be opened (a server down, credentials, a
    /// missing table): exit code 1 for `run`, which may work later.
    Connect(Diagnostics),
}

impl BuildError {
    /// The problems, located in the spec.
    pub fn diagnostics(&self) -> &Diagnostics {
        match self {
            BuildError::Spec(d) | BuildError::Connect(d) => d,
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.diagnostics().fmt(f)
    }
}

impl std::error::Error for BuildError {}

/// Opens (when `connect`) and checks everything; what `validate` runs.
pub async fn validate(spec: &Spec, connect: bool) -> Result<(), BuildError> {
    let (opened, checked) = open_and_check(spec, connect).await?;
    if connect {
        let failures = open::probe_outputs(spec).await;
        if !failures.is_empty() {
            return Err(BuildError::Connect(located(spec, failures)));
        }
        into_job(spec, opened, &checked, spec.job.parallelism)?;
    }
    Ok(())
}

/// The job `spec` describes, at `parallelism`.
pub async fn build(spec: &Spec, parallelism: usize) -> Result<Job, BuildError> {
    let (opened, checked) = open_and_check(spec, true).await?;
    into_job(spec, opened, &checked, parallelism)
}

async fn open_and_check(
    spec: &Spec,
    connect: bool,
) -> Result<(open::Opened, check::Checked), BuildError> {
    let opened = opened(spec, connect).await?;
    let schemas = opened
        .sources
        .iter()
        .map(|(id, s)| (id.clone(), s.schema()))
        .collect::<HashMap<_, _>>();
    let checked = check::check(spec, &schemas).map_err(BuildError::Spec)?;
    Ok((opened, checked))
}

/// The schemas known without I/O: the generators'.
pub fn offline_schemas(spec: &Spec) -> HashMap<String, arrow::datatypes::SchemaRef> {
    spec.components
        .iter()
        .filter_map(|c| Some((c.id.value.clone(), open::generator(&c.kind)?.schema_ref())))
        .collect()
}

async fn opened(spec: &Spec, connect: bool) -> Result<open::Opened, BuildError> {
    open::open(spec, connect)
        .await
        .map_err(|failures| BuildError::Connect(located(spec, failures)))
}

/// Connector failures as problems at their components.
fn located(spec: &Spec, failures: Vec<(String, anyhow::Error)>) -> Diagnostics {
    let mut diags = Diagnostics::new(spec.source.clone());
    for (id, error) in failures {
        let c = spec.component(&id).expect("failures name components");
        diags.push(Diagnostic::at(
            c.id.span.clone(),
            format!(
                "[{}.{id}] could not be opened: {}",
                c.role.table(),
                describe_error(&error)
            ),
        ));
    }
    diags
}

fn into_job(
    spec: &Spec,
    opened: open::Opened,
    checked: &check::Checked,
    parallelism: usize,
) -> Result<Job, BuildError> {
    declare::declare(spec, opened, checked, parallelism)
        .build()
        .map_err(|e| {
            let mut diags = Diagnostics::new(spec.source.clone());
            for line in check::bare(&e).lines() {
                diags.push(Diagnostic::whole_file(
                    line.trim_start_matches("- ").to_string(),
                ));
            }
            BuildError::Spec(diags)
        })
}
