//! What each component will see and emit, and whether its expressions fit:
//! pure, given the schemas of the sources that could be opened. A source
//! that was not opened (`validate` without `--connect`) has an unknown
//! schema; what reads it gets a syntax check only.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use tidewater_core::AggregateSpec;
use tidewater_sql::{Part, SqlTransform, SqlTransformSpec};

use crate::spec::graph;
use crate::spec::reader::Located;
use crate::spec::{Diagnostic, Diagnostics, Kind, Spec, SqlSpec};

/// The checked plan: schemas and compiled expressions, by component id.
#[derive(Default)]
pub struct Checked {
    /// Each component's output schema, where known.
    pub schemas: HashMap<String, Option<SchemaRef>>,
    /// SQL transforms planned against their input.
    pub sql: HashMap<String, Arc<SqlTransform>>,
    /// Aggregations.
    pub aggregates: HashMap<String, AggregateSpec>,
}

/// Checks every transform against what it reads.
pub fn check(spec: &Spec, sources: &HashMap<String, SchemaRef>) -> Result<Checked, Diagnostics> {
    let mut diags = Diagnostics::new(spec.source.clone());
    let mut checked = Checked::default();
    for i in graph::order(&spec.components) {
        let c = &spec.components[i];
        let id = c.id.value.clone();
        let input = input_schema(c, &checked.schemas, &mut diags);
        let output = match &c.kind {
            Kind::Generator { .. }
            | Kind::ParquetSource { .. }
            | Kind::PostgresSource { .. }
            | Kind::KafkaSource { .. } => sources.get(&id).cloned(),
            Kind::Sql(sql) => check_sql(&id, sql, input.as_ref(), &mut diags).map(|t| {
                let schema = t.output_schema();
                checked.sql.insert(id.clone(), Arc::new(t));
                schema
            }),
            Kind::Aggregate { key_by, aggregates } => {
                let mut agg = AggregateSpec::new();
                for (output, call) in aggregates {
                    match tidewater_sql::add_aggregate(agg.clone(), output, &call.value) {
                        Ok(next) => agg = next,
                        Err(e) => diags.push(Diagnostic::at(
                            call.span.clone(),
                            format!(
                                "[transforms.{id}] aggregates.{output} = \"{}\": {e}",
                                call.value
                            ),
                        )),
                    }
                }
                let keys: Vec<String> = key_by.iter().map(|k| k.value.clone()).collect();
                let output = input.as_ref().and_then(|schema| {
                    for key in key_by {
                        if schema.field_with_name(&key.value).is_err() {
                            diags.push(Diagnostic::at(
                                key.span.clone(),
                                format!(
                                    "[transforms.{id}] keys by '{}', which its input does not have; \
                                     the columns are {}",
                                    key.value,
                                    tidewater_core::field_list(schema)
                                ),
                            ));
                        }
                    }
                    match agg.output_schema(&keys, schema) {
                        Ok(out) => Some(out),
                        Err(e) => {
                            diags.push(Diagnostic::at(
                                c.id.span.clone(),
                                format!("[transforms.{id}]: {}", bare(&e)),
                            ));
                            None
                        }
                    }
                });
                checked.aggregates.insert(id.clone(), agg);
                output
            }
            Kind::ParquetSink { .. } | Kind::PostgresSink { .. } | Kind::KafkaSink { .. } => None,
        };
        checked.schemas.insert(id, output);
    }
    if diags.is_empty() {
        Ok(checked)
    } else {
        Err(diags)
    }
}

/// The schema a component reads: its input's, or the union's when all agree.
fn input_schema(
    c: &crate::spec::Component,
    schemas: &HashMap<String, Option<SchemaRef>>,
    diags: &mut Diagnostics,
) -> Option<SchemaRef> {
    let known: Vec<(&Located<String>, SchemaRef)> = c
        .inputs
        .iter()
        .map(|i| Some((i, schemas.get(&i.value)?.clone()?)))
        .collect::<Option<Vec<_>>>()?;
    let (first_input, first) = known.first()?;
    for (input, schema) in &known[1..] {
        if schema.fields() != first.fields() {
            diags.push(
                Diagnostic::at(
                    input.span.clone(),
                    format!(
                        "'{}' reads '{}' and '{}', whose columns differ: ({}) and ({})",
                        c.id.value,
                        first_input.value,
                        input.value,
                        tidewater_core::field_list(first),
                        tidewater_core::field_list(schema)
                    ),
                )
                .help("every input of a component must have the same columns and types"),
            );
            return None;
        }
    }
    Some(first.clone())
}

/// Plans a SQL transform, or checks its syntax when the input is unknown.
fn check_sql(
    id: &str,
    sql: &SqlSpec,
    input: Option<&SchemaRef>,
    diags: &mut Diagnostics,
) -> Option<SqlTransform> {
    let at = |part: Part| located_part(sql, part);
    let Some(input) = input else {
        let parts = sql
            .filter
            .iter()
            .map(|_| Part::Filter)
            .chain((0..sql.columns.len()).map(Part::Column));
        for part in parts {
            let text = at(part).1;
            if let Err(e) = tidewater_sql::check_syntax(&text.value) {
                diags.push(Diagnostic::at(
                    text.span.clone(),
                    format!("{}: {e}", label(id, sql, part)),
                ));
            }
        }
        return None;
    };
    let spec = SqlTransformSpec {
        filter: sql.filter.as_ref().map(|f| f.value.clone()),
        columns: sql
            .columns
            .iter()
            .map(|(name, text)| (name.clone(), text.value.clone()))
            .collect(),
        select: sql
            .select
            .as_ref()
            .map(|s| s.iter().map(|c| c.value.clone()).collect()),
    };
    match SqlTransform::new(&spec, input) {
        Ok(t) => Some(t),
        Err(problems) => {
            for (part, e) in problems {
                diags.push(Diagnostic::at(
                    at(part).1.span.clone(),
                    format!("{}: {e}", label(id, sql, part)),
                ));
            }
            None
        }
    }
}

/// The part of a SQL transform a problem is in: its key and its text.
fn located_part(sql: &SqlSpec, part: Part) -> (String, &Located<String>) {
    match part {
        Part::Filter => (
            "filter".to_string(),
            sql.filter.as_ref().expect("a filter failed"),
        ),
        Part::Column(i) => (format!("columns.{}", sql.columns[i].0), &sql.columns[i].1),
        Part::Select(i) => {
            let select = sql.select.as_ref().expect("a selection failed");
            (format!("select[{i}]"), &select[i])
        }
    }
}

/// How messages name a part of a SQL transform, before the job starts and
/// while it runs: `[transforms.keep] columns.w = "v / d"`.
pub fn label(id: &str, sql: &SqlSpec, part: Part) -> String {
    let (name, text) = located_part(sql, part);
    format!("[transforms.{id}] {name} = \"{}\"", text.value)
}

/// An engine error's own words, without its kind's prefix.
pub fn bare(error: &tidewater_core::Error) -> String {
    match error {
        tidewater_core::Error::InvalidPipeline(m)
        | tidewater_core::Error::InvalidConfig(m)
        | tidewater_core::Error::BadInput(m) => m.clone(),
        other => other.to_string(),
    }
}
