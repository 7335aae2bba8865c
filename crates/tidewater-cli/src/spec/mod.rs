//! Backfills declared in TOML: parsing a spec into a [`Spec`], with every
//! problem reported at its line and column in one run.
//!
//! ```
//! use tidewater_cli::spec::Spec;
//!
//! let text = r#"
//! [job]
//! name = "backfill"
//!
//! [sources.gen]
//! type = "generator"
//! rows = 1000
//! keys = 10
//!
//! [sinks.out]
//! type = "parquet"
//! inputs = ["gen"]
//! path = "./out"
//! "#;
//! let spec = Spec::parse("backfill.toml", text, &|_| None).unwrap();
//! assert_eq!(spec.job.name, "backfill");
//! assert_eq!(spec.components.len(), 2);
//! ```

pub mod diagnostic;
pub mod graph;
mod kafka;
pub mod model;
pub mod reader;

use std::cell::RefCell;

use tidewater_core::checkpoint::incremental::DEFAULT_FULL_EVERY;
use tidewater_core::partition::{DEFAULT_KEY_GROUPS, MAX_KEY_GROUPS};
use toml::de::{DeTable, DeValue};

pub use diagnostic::{Diagnostic, Diagnostics, SourceText};
pub use model::{
    Component, JobSpec, KafkaFormat, Kind, ReplicaLagSpec, Role, SqlSpec, ThrottleSpec,
};
use reader::{Fields, Located};

/// A spec that was read without problems.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The file, for messages about it later (SQL errors, connection checks).
    pub source: SourceText,
    /// `[job]`.
    pub job: JobSpec,
    /// Every component, sources first, each table in file order.
    pub components: Vec<Component>,
}

impl Spec {
    /// Reads a spec. `env` looks up `${env:NAME}` (pass
    /// `&|name| std::env::var(name).ok()` for the process environment).
    pub fn parse(
        file: &str,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Spec, Diagnostics> {
        let (spec, diags) = Spec::read(file, text, env);
        if diags.is_empty() {
            Ok(spec)
        } else {
            Err(diags)
        }
    }

    /// Reads as much of a spec as can be read, with every problem found:
    /// the components that could be read (and `[job]` defaults where it
    /// could not), so that their expressions can be checked too.
    pub fn read(
        file: &str,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Spec, Diagnostics) {
        let source = SourceText::new(file, text);
        let diags = RefCell::new(Diagnostics::new(source.clone()));
        let (root, errors) = DeTable::parse_recoverable(text);
        let mut spec = Spec {
            source: source.clone(),
            job: JobSpec {
                name: String::new(),
                state: DEFAULT_STATE.to_string(),
                checkpoint_interval: Some(std::time::Duration::from_secs(1)),
                parallelism: 2,
                retain: 3,
                key_groups: DEFAULT_KEY_GROUPS,
                incremental_checkpoints: false,
                full_checkpoint_every: DEFAULT_FULL_EVERY,
            },
            components: Vec::new(),
        };
        for e in &errors {
            diags.borrow_mut().push(Diagnostic::at(
                e.span().unwrap_or(0..0),
                format!("this is not valid TOML: {}", e.message()),
            ));
        }
        if !errors.is_empty() {
            return (spec, diags.into_inner());
        }
        let top = Fields::new("the spec".to_string(), root.get_ref(), 0..0, &diags, env);
        match top.table("job") {
            Some(fields) => {
                if let Some(job) = read_job(&fields) {
                    spec.job = job;
                }
            }
            None => top.report(
                Diagnostic::whole_file("the spec has no [job] table")
                    .help("add [job] with at least name = \"...\""),
            ),
        }
        let mut nodes = Vec::new();
        for role in [Role::Source, Role::Transform, Role::Sink] {
            let Some(section) = top.table(role.table()) else {
                continue;
            };
            for (id, value) in section_entries(&section) {
                let DeValue::Table(table) = value.get_ref() else {
                    section.report(Diagnostic::at(
                        value.span(),
                        format!(
                            "[{}.{}] must be a table of settings",
                            role.table(),
                            id.value
                        ),
                    ));
                    continue;
                };
                if let Some(problem) = id_problem(&id.value) {
                    section.report(
                        Diagnostic::at(
                            id.span.clone(),
                            format!("[{}.{}]: {problem}", role.table(), id.value),
                        )
                        .help("use letters, digits, '-' and '_', like \"orders_2024\""),
                    );
                }
                let fields = Fields::new(
                    format!("[{}.{}]", role.table(), id.value),
                    table,
                    id.span.clone(),
                    &diags,
                    env,
                );
                let inputs = read_inputs(role, &fields);
                nodes.push(graph::Node {
                    id: id.clone(),
                    role,
                    inputs: inputs.clone(),
                });
                if let Some(c) = read_component(id, role, inputs, &fields) {
                    spec.components.push(c);
                }
                fields.finish();
            }
        }
        top.finish();
        let mut diags = diags.into_inner();
        for d in graph::check(&nodes) {
            diags.push(d);
        }
        (spec, diags)
    }

    /// The component called `id`.
    pub fn component(&self, id: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.id.value == id)
    }
}

/// What is wrong with a component id, if anything. Ids become operator
/// uids and file names; '.' is kept for the parts tidewater adds to a
/// component (`keep.dead_letter`).
fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("a component id cannot be empty")
    } else if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Some("a component id may hold only letters, digits, '-' and '_'")
    } else {
        None
    }
}

/// The entries of `[sources]` & co., marking each as known.
fn section_entries<'a, 'i>(
    section: &Fields<'a, 'i>,
) -> Vec<(Located<String>, &'a toml::Spanned<DeValue<'i>>)> {
    section
        .entries()
        .into_iter()
        .map(|(k, v)| {
            (
                Located {
                    value: k.get_ref().to_string(),
                    span: k.span(),
                },
                v,
            )
        })
        .collect()
}

fn read_job(f: &Fields<'_, '_>) -> Option<JobSpec> {
    let name = f.required_string("name", "the job's name in the state store");
    let state = f.string("state").map(|s| s.value);
    let interval = f.duration("checkpoint_interval", true);
    let parallelism = f.integer("parallelism", 1);
    let retain = f.integer("retain", 1);
    let key_groups = f.integer("key_groups", 1);
    let incremental = f.boolean("incremental_checkpoints");
    let full_every = f.integer("full_checkpoint_every", 1);
    f.finish();
    let name = name?;
    if let Some(g) = key_groups
        .as_ref()
        .filter(|g| g.value > u64::from(MAX_KEY_GROUPS))
    {
        f.report(Diagnostic::at(
            g.span.clone(),
            format!(
                "`key_groups` in [job] must be at most {MAX_KEY_GROUPS} (the default is \
                 {DEFAULT_KEY_GROUPS}); it bounds how far keyed operators can be rescaled"
            ),
        ));
        return None;
    }
    if name.value.is_empty() || name.value.contains('/') {
        f.report(Diagnostic::at(
            name.span,
            "the job's `name` must be non-empty and contain no '/'",
        ));
        return None;
    }
    Some(JobSpec {
        name: name.value,
        state: state.unwrap_or_else(|| DEFAULT_STATE.to_string()),
        checkpoint_interval: interval.unwrap_or(Some(std::time::Duration::from_secs(1))),
        parallelism: parallelism.map_or(2, |p| p.value as usize),
        retain: retain.map_or(3, |r| r.value as usize),
        key_groups: key_groups.map_or(DEFAULT_KEY_GROUPS, |g| g.value as u32),
        incremental_checkpoints: incremental.unwrap_or(false),
        full_checkpoint_every: full_every.map_or(DEFAULT_FULL_EVERY, |n| {
            u32::try_from(n.value).unwrap_or(u32::MAX)
        }),
    })
}

const SOURCE_TYPES: &[&str] = &["generator", "parquet", "postgres", "kafka"];
const TRANSFORM_TYPES: &[&str] = &["sql", "aggregate"];
const SINK_TYPES: &[&str] = &["parquet", "postgres", "kafka"];

/// Where the state goes when neither the spec nor `--state` says.
pub const DEFAULT_STATE: &str = "./tidewater-state";

fn read_inputs(role: Role, f: &Fields<'_, '_>) -> Vec<Located<String>> {
    if role == Role::Source {
        return Vec::new();
    }
    match f.string_list("inputs") {
        Some(list) if list.is_empty() => {
            f.report(Diagnostic::at(
                f.span(),
                format!(
                    "{}: `inputs` is empty; name the components it reads",
                    f.name
                ),
            ));
            Vec::new()
        }
        Some(list) => list,
        None => {
            if !f.has("inputs") {
                f.missing("inputs", "the components it reads, like [\"gen\"]");
            }
            Vec::new()
        }
    }
}

fn read_component(
    id: Located<String>,
    role: Role,
    inputs: Vec<Located<String>>,
    f: &Fields<'_, '_>,
) -> Option<Component> {
    let types = match role {
        Role::Source => SOURCE_TYPES,
        Role::Transform => TRANSFORM_TYPES,
        Role::Sink => SINK_TYPES,
    };
    let parallelism = f.integer("parallelism", 1).map(|p| p.value as usize);
    let kind_name = match f.choice("type", types) {
        Some(t) => t.value,
        None => {
            if !f.has("type") {
                f.missing("type", &format!("one of {}", reader::quoted(types)));
            }
            // Without a type the other keys cannot be judged.
            f.accept_all();
            return None;
        }
    };
    // Every key is read before any `?`, so that one missing key does not
    // hide the others' problems (nor make them look unknown).
    let kind = match (role, kind_name.as_str()) {
        (Role::Source, "generator") => {
            let rows = f.integer("rows", 0);
            if rows.is_none() && !f.has("rows") {
                f.missing("rows", "how many rows to generate");
            }
            let keys = f.integer("keys", 1).map_or(100_000, |v| v.value);
            let splits = f.integer("splits", 1).map(|v| v.value);
            let batch_rows = f.integer("batch_rows", 1).map(|v| v.value as usize);
            let throttle = read_throttle(f);
            Kind::Generator {
                rows: rows?.value,
                keys,
                splits,
                batch_rows,
                throttle,
            }
        }
        (Role::Source, "parquet") => {
            let path = f.required_string("path", "a folder, file or URL");
            let glob = f.string("glob").map(|v| v.value);
            let columns = f.string_list("columns").map(values);
            let batch_rows = f.integer("batch_rows", 1).map(|v| v.value as usize);
            let dead_letter = f.string("dead_letter").map(|v| v.value);
            let throttle = read_throttle(f);
            Kind::ParquetSource {
                path: path?.value,
                glob,
                columns,
                batch_rows,
                dead_letter,
                throttle,
            }
        }
        (Role::Source, "postgres") => {
            let url = f.required_string("url", "a postgres:// connection URL");
            let table = f.required_string("table", "the table to read");
            let key = source_key(f);
            let columns = f.string_list("columns").map(values);
            let filter = f.string("filter").map(|v| v.value);
            let splits = f.integer("splits", 1).map(|v| v.value);
            let batch_rows = f.integer("batch_rows", 1).map(|v| v.value as usize);
            let connections = f
                .integer("connections", 1)
                .map(|v| v.value.min(u64::from(u32::MAX)) as u32);
            let statement_timeout = f.duration("statement_timeout", false).flatten();
            let lock_timeout = f.duration("lock_timeout", false).flatten();
            let throttle = read_throttle(f);
            Kind::PostgresSource {
                url: url?.value,
                table: table?.value,
                key: key?,
                statement_timeout,
                lock_timeout,
                columns,
                filter,
                splits,
                batch_rows,
                connections,
                throttle,
            }
        }
        (Role::Source, "kafka") => {
            let throttle = read_throttle(f);
            kafka::source(f, throttle)?
        }
        (Role::Sink, "kafka") => kafka::sink(f)?,
        (Role::Transform, "sql") => {
            let max_bad_rows = f.integer("max_bad_rows", 0);
            let sql = SqlSpec {
                filter: f.string("filter"),
                columns: f.string_table("columns").unwrap_or_default(),
                select: f.string_list("select"),
                dead_letter: f.string("dead_letter"),
                max_bad_rows: max_bad_rows.as_ref().map(|v| v.value),
            };
            if let Some(budget) = max_bad_rows
                && sql.dead_letter.is_none()
            {
                f.report(
                    Diagnostic::at(
                        budget.span,
                        format!("{}: `max_bad_rows` needs `dead_letter`", f.name),
                    )
                    .help("add dead_letter = \"./dead-letters\": where the rows that fail go"),
                );
            }
            if sql.select.as_ref().is_some_and(Vec::is_empty) {
                f.report(Diagnostic::at(
                    f.span(),
                    format!("{}: `select` is empty; name the columns to keep", f.name),
                ));
            }
            if sql.filter.is_none() && sql.columns.is_empty() && sql.select.is_none() {
                f.report(
                    Diagnostic::at(f.span(), format!("{} does nothing", f.name))
                        .help("give it a `filter`, `columns` or `select`"),
                );
            }
            Kind::Sql(sql)
        }
        (Role::Transform, "aggregate") => {
            let key_by = f.string_list("key_by");
            let aggregates = f.string_table("aggregates");
            if key_by.is_none() && !f.has("key_by") {
                f.missing("key_by", "the key columns, like [\"k\"]");
            }
            if aggregates.is_none() && !f.has("aggregates") {
                f.missing("aggregates", "outputs like { count = \"count(*)\" }");
            }
            Kind::Aggregate {
                key_by: key_by?,
                aggregates: aggregates?,
            }
        }
        (Role::Sink, "parquet") => {
            let path = f.required_string("path", "a folder or URL");
            let target_file_size = f.size("target_file_size");
            let max_file_age = f.duration("max_file_age", false).flatten();
            let row_group_rows = f.integer("row_group_rows", 1).map(|v| v.value as usize);
            let part_size = f.size("part_size");
            Kind::ParquetSink {
                path: path?.value,
                target_file_size,
                max_file_age,
                row_group_rows,
                part_size,
            }
        }
        (Role::Sink, "postgres") => {
            let url = f.required_string("url", "a postgres:// connection URL");
            let table = f.required_string("table", "the table to write");
            let mode = f.choice("mode", &["upsert", "exactly-once"]);
            let bad_mode = mode.is_none() && f.has("mode");
            let create = f.string("create").map(|v| v.value);
            let max_bad_rows = f.integer("max_bad_rows", 0).map(|v| v.value);
            let key = f.string_or_list("key").map(values);
            let statement_timeout = f.duration("statement_timeout", false).flatten();
            let lock_timeout = f.duration("lock_timeout", false).flatten();
            if bad_mode {
                return None;
            }
            Kind::PostgresSink {
                url: url?.value,
                table: table?.value,
                exactly_once: mode.is_some_and(|m| m.value == "exactly-once"),
                create,
                max_bad_rows,
                key,
                statement_timeout,
                lock_timeout,
            }
        }
        _ => unreachable!("`type` was checked against the role's choices"),
    };
    Some(Component {
        id,
        role,
        inputs,
        parallelism,
        kind,
    })
}

/// A PostgreSQL source's `key` (a column or a list), or its older name
/// `split_column` (one column); not both.
fn source_key(f: &Fields<'_, '_>) -> Option<Vec<String>> {
    let key = f.string_or_list("key");
    let older = f.string("split_column");
    match (key, older) {
        (Some(_), Some(older)) => {
            f.report(
                Diagnostic::at(
                    older.span,
                    format!("{}: `split_column` and `key` say the same thing", f.name),
                )
                .help("keep `key` (split_column is its older name)"),
            );
            None
        }
        (Some(key), None) if key.is_empty() => {
            f.report(Diagnostic::at(
                f.span(),
                format!(
                    "{}: `key` is empty; name the key column (or columns)",
                    f.name
                ),
            ));
            None
        }
        (Some(key), None) => Some(values(key)),
        (None, Some(older)) => Some(vec![older.value]),
        (None, None) => {
            if !f.has("key") && !f.has("split_column") {
                f.missing(
                    "key",
                    "the unique key to split and order reads by: \"id\", or [\"a\", \"b\"]",
                );
            }
            None
        }
    }
}

/// A source's throttles: `rate_limit` (or `rows_per_second`), and a
/// `[replica_lag]` table (or its shorthand `max_replica_lag` + `replica_url`:
/// pause while the replica at that URL lags more than that).
fn read_throttle(f: &Fields<'_, '_>) -> ThrottleSpec {
    let rate_limit = f.positive_number("rate_limit").map(|v| v.value);
    let rows_per_second = f.positive_number("rows_per_second");
    let rate_limit = match (rate_limit, rows_per_second) {
        (Some(_), Some(also)) => {
            f.report(
                Diagnostic::at(
                    also.span,
                    format!(
                        "{}: `rows_per_second` and `rate_limit` say the same thing",
                        f.name
                    ),
                )
                .help("keep one of them"),
            );
            None
        }
        (one, other) => one.or(other.map(|v| v.value)),
    };
    let shorthand = read_replica_shorthand(f);
    let replica_lag = f.table("replica_lag").and_then(|t| {
        let url = t.required_string("url", "a postgres:// URL where the lag is read");
        let on = t.choice("on", &["primary", "replica"]);
        let high = t.duration("high", false).flatten();
        if high.is_none() && !t.has("high") {
            t.missing("high", "the lag that pauses reads, like \"2s\"");
        }
        let low = t.duration("low", false).flatten();
        let poll = t.duration("poll", false).flatten();
        t.finish();
        Some(ReplicaLagSpec {
            url: url?.value,
            on_replica: on.is_none_or(|o| o.value == "replica"),
            high: high?,
            low,
            poll,
        })
    });
    let replica_lag = match (replica_lag, shorthand) {
        (Some(_), Some(_)) => {
            f.report(
                Diagnostic::at(
                    f.span(),
                    format!(
                        "{}: `max_replica_lag` and a [replica_lag] table say the same thing",
                        f.name
                    ),
                )
                .help("keep one of them"),
            );
            None
        }
        (one, other) => one.or(other),
    };
    ThrottleSpec {
        rate_limit,
        replica_lag,
    }
}

/// `max_replica_lag = "2s"` with `replica_url = "postgres://..."`.
fn read_replica_shorthand(f: &Fields<'_, '_>) -> Option<ReplicaLagSpec> {
    let high = f.duration("max_replica_lag", false).flatten();
    let url = f.string("replica_url");
    match (high, url) {
        (Some(high), Some(url)) => Some(ReplicaLagSpec {
            url: url.value,
            on_replica: true,
            high,
            low: None,
            poll: None,
        }),
        (Some(_), None) => {
            f.missing(
                "replica_url",
                "the postgres:// URL of the replica whose lag is read",
            );
            None
        }
        (None, Some(url)) => {
            f.report(
                Diagnostic::at(
                    url.span,
                    format!("{}: `replica_url` needs `max_replica_lag`", f.name),
                )
                .help("add max_replica_lag = \"2s\": the lag that pauses reads"),
            );
            None
        }
        (None, None) => None,
    }
}

fn values(list: Vec<Located<String>>) -> Vec<String> {
    list.into_iter().map(|l| l.value).collect()
}

#[cfg(test)]
mod tests;
