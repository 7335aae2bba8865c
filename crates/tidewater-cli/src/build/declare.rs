//! Declaring the pipeline a checked spec describes.

use std::collections::HashMap;
use std::sync::Arc;

use tidewater_core::{Pipeline, Stream};
use tidewater_sql::{
    DeadLetterLayout, DeadLetterRows, ErrorBudget, Part, PassedRows, SqlOperator,
    dead_letter_schema,
};

use super::check::Checked;
use super::open::{Opened, OpenedSink, throttle};
use crate::spec::model::DEFAULT_MAX_BAD_ROWS;
use crate::spec::{Kind, Spec, SqlSpec, graph};

/// The pipeline for `spec`, each component's id its uid.
pub fn declare(spec: &Spec, mut opened: Opened, checked: &Checked, parallelism: usize) -> Pipeline {
    let pipeline = Pipeline::new(spec.job.name.clone()).with_parallelism(parallelism);
    let mut streams: HashMap<String, Stream> = HashMap::new();
    for i in graph::order(&spec.components) {
        let c = &spec.components[i];
        let id = c.id.value.as_str();
        let input = || {
            let mut inputs = c.inputs.iter().map(|i| streams[&i.value].clone());
            let first = inputs
                .next()
                .expect("checked: transforms and sinks have inputs");
            first.union(inputs)
        };
        let stream = match &c.kind {
            Kind::Generator { throttle: t, .. }
            | Kind::ParquetSource { throttle: t, .. }
            | Kind::PostgresSource { throttle: t, .. }
            | Kind::KafkaSource { throttle: t, .. } => {
                let source = opened.sources.remove(id).expect("every source was opened");
                Some(throttle(source.add_to(&pipeline, id), t))
            }
            Kind::Sql(sql) => {
                let transform = checked.sql[id].clone();
                let describe = describer(id, sql);
                match opened.dead_letters.remove(id) {
                    Some(sink) => Some(setting_aside(id, sql, input(), transform, describe, sink)),
                    None => {
                        let schema = transform.output_schema();
                        Some(input().transform_to(id, schema, move |_| {
                            Ok(SqlOperator::new(transform.clone(), describe.clone()))
                        }))
                    }
                }
            }
            Kind::Aggregate { key_by, .. } => {
                let keys: Vec<String> = key_by.iter().map(|k| k.value.clone()).collect();
                Some(
                    input()
                        .key_by(keys)
                        .aggregate(id, checked.aggregates[id].clone()),
                )
            }
            Kind::ParquetSink { .. } | Kind::PostgresSink { .. } | Kind::KafkaSink { .. } => {
                let sink = opened.sinks.remove(id).expect("every sink was opened");
                let sink_ref = match sink {
                    OpenedSink::Parquet(s) => input().sink(id, s),
                    OpenedSink::Postgres(s) => input().sink(id, s),
                    OpenedSink::Kafka(s) => input().sink(id, s),
                };
                if let Some(p) = c.parallelism {
                    sink_ref.parallelism(p);
                }
                None
            }
        };
        if let Some(mut stream) = stream {
            if let Some(p) = c.parallelism {
                stream = stream.parallelism(p);
            }
            streams.insert(id.to_string(), stream);
        }
    }
    pipeline
}

/// A SQL transform whose failing rows go to `sink` as dead letters: the
/// transform (uid `id`) emits both kinds of row, `id.rows` keeps those that
/// passed (the stream returned), and on a branch at parallelism 1
/// `id.dead_letters` takes the rest, `id.error_budget` counts them and
/// `id.dead_letter` writes them, committed with each checkpoint.
fn setting_aside(
    id: &str,
    sql: &SqlSpec,
    input: Stream,
    transform: Arc<tidewater_sql::SqlTransform>,
    describe: Arc<dyn Fn(Part) -> String + Send + Sync>,
    sink: tidewater_parquet::ParquetSink,
) -> Stream {
    let output = transform.output_schema();
    let layout = Arc::new(DeadLetterLayout::new(id, output.clone()));
    let both = {
        let layout = layout.clone();
        input.transform_to(id, layout.combined_schema(), move |_| {
            Ok(SqlOperator::setting_aside(
                transform.clone(),
                describe.clone(),
                layout.clone(),
            ))
        })
    };
    let passed = {
        let layout = layout.clone();
        both.clone()
            .transform_to(format!("{id}.rows"), output, move |_| {
                Ok(PassedRows(layout.clone()))
            })
    };
    let (max, at) = (
        sql.max_bad_rows.unwrap_or(DEFAULT_MAX_BAD_ROWS),
        sql.dead_letter
            .as_ref()
            .map_or("", |d| d.value.as_str())
            .to_string(),
    );
    let budget_id = id.to_string();
    both.transform_to(
        format!("{id}.dead_letters"),
        dead_letter_schema(),
        move |_| Ok(DeadLetterRows(layout.clone())),
    )
    .rebalance()
    .transform_to(
        format!("{id}.error_budget"),
        dead_letter_schema(),
        move |ctx| Ok(ErrorBudget::new(&ctx.job, &budget_id, max, &at)),
    )
    .parallelism(1)
    .sink(format!("{id}.dead_letter"), sink)
    .parallelism(1);
    passed
}

/// Names a part of a SQL transform in run-time errors, as the checks do.
fn describer(id: &str, sql: &SqlSpec) -> Arc<dyn Fn(Part) -> String + Send + Sync> {
    let (id, sql) = (id.to_string(), sql.clone());
    Arc::new(move |part| super::check::label(&id, &sql, part))
}
