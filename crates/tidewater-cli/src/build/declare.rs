//! Declaring the pipeline a checked spec describes.

use std::collections::HashMap;
use std::sync::Arc;

use tidewater_core::{Pipeline, Stream};
use tidewater_sql::{Part, SqlOperator};

use super::check::Checked;
use super::open::{Opened, OpenedSink, throttle};
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
            | Kind::PostgresSource { throttle: t, .. } => {
                let source = opened.sources.remove(id).expect("every source was opened");
                Some(throttle(source.add_to(&pipeline, id), t))
            }
            Kind::Sql(sql) => {
                let transform = checked.sql[id].clone();
                let schema = transform.output_schema();
                let describe = describer(id, sql);
                Some(input().transform_to(id, schema, move |_| {
                    Ok(SqlOperator::new(transform.clone(), describe.clone()))
                }))
            }
            Kind::Aggregate { key_by, .. } => {
                let keys: Vec<String> = key_by.iter().map(|k| k.value.clone()).collect();
                Some(
                    input()
                        .key_by(keys)
                        .aggregate(id, checked.aggregates[id].clone()),
                )
            }
            Kind::ParquetSink { .. } | Kind::PostgresSink { .. } => {
                let sink = opened.sinks.remove(id).expect("every sink was opened");
                let sink_ref = match sink {
                    OpenedSink::Parquet(s) => input().sink(id, s),
                    OpenedSink::Postgres(s) => input().sink(id, s),
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

/// Names a part of a SQL transform in run-time errors, as the checks do.
fn describer(id: &str, sql: &SqlSpec) -> Arc<dyn Fn(Part) -> String + Send + Sync> {
    let (id, sql) = (id.to_string(), sql.clone());
    Arc::new(move |part| super::check::label(&id, &sql, part))
}
