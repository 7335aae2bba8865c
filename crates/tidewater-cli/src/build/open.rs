//! Opening a spec's connectors: the only part of building that does I/O.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use tidewater_core::{GeneratorSource, Pipeline, RateLimit, Stream};
use tidewater_kafka::{ClientConfig, Format, KafkaSink, KafkaSource};
use tidewater_parquet::{OnCorruptFile, ParquetSink, ParquetSinkOptions, ParquetSource};
use tidewater_postgres::{
    LagSource, PostgresSink, PostgresSource, ReplicaLagThrottle, SinkMode, Timeouts,
};

use crate::spec::{Component, KafkaFormat, Kind, Spec, SqlSpec, ThrottleSpec};

/// A source, ready to add to a pipeline.
pub enum OpenedSource {
    /// `type = "generator"`.
    Generator(GeneratorSource),
    /// `type = "parquet"`.
    Parquet(ParquetSource),
    /// `type = "postgres"`.
    Postgres(PostgresSource),
    /// `type = "kafka"`.
    Kafka(KafkaSource),
}

impl OpenedSource {
    /// What the source emits.
    pub fn schema(&self) -> SchemaRef {
        use tidewater_core::Source;
        match self {
            OpenedSource::Generator(s) => s.schema(),
            OpenedSource::Parquet(s) => s.schema(),
            OpenedSource::Postgres(s) => s.schema(),
            OpenedSource::Kafka(s) => s.schema(),
        }
    }

    /// Adds it to `pipeline` as `uid`.
    pub fn add_to(self, pipeline: &Pipeline, uid: &str) -> Stream {
        match self {
            OpenedSource::Generator(s) => pipeline.source(uid, s),
            OpenedSource::Parquet(s) => pipeline.source(uid, s),
            OpenedSource::Postgres(s) => pipeline.source(uid, s),
            OpenedSource::Kafka(s) => pipeline.source(uid, s),
        }
    }
}

/// A sink, ready to add to a pipeline.
pub enum OpenedSink {
    /// `type = "parquet"`.
    Parquet(ParquetSink),
    /// `type = "postgres"`.
    Postgres(PostgresSink),
    /// `type = "kafka"`.
    Kafka(KafkaSink),
}

/// What could be opened, by component id.
#[derive(Default)]
pub struct Opened {
    /// Sources.
    pub sources: HashMap<String, OpenedSource>,
    /// Sinks.
    pub sinks: HashMap<String, OpenedSink>,
    /// The dead-letter outputs of SQL transforms, by transform id.
    pub dead_letters: HashMap<String, ParquetSink>,
}

/// How long a dead-letter file stays open: dead letters are few, and a
/// user watching a long run wants to see them soon.
const DEAD_LETTER_FILE_AGE: Duration = Duration::from_secs(60);

/// The generator's source for a component (no I/O).
pub fn generator(kind: &Kind) -> Option<GeneratorSource> {
    let Kind::Generator {
        rows,
        keys,
        splits,
        batch_rows,
        ..
    } = kind
    else {
        return None;
    };
    let mut source = GeneratorSource::new(*rows, *keys);
    if let Some(splits) = splits {
        source = source.with_splits(*splits);
    }
    if let Some(rows) = batch_rows {
        source = source.with_batch_rows(*rows);
    }
    Some(source)
}

/// Opens every connector; with `connect` false only those that need no
/// I/O (the generator). Each failure names the component.
pub async fn open(spec: &Spec, connect: bool) -> Result<Opened, Vec<(String, anyhow::Error)>> {
    let mut opened = Opened::default();
    let mut failures = Vec::new();
    for c in &spec.components {
        let id = c.id.value.clone();
        if let Some(source) = generator(&c.kind) {
            opened.sources.insert(id, OpenedSource::Generator(source));
            continue;
        }
        if !connect {
            continue;
        }
        if let Kind::Sql(SqlSpec {
            dead_letter: Some(at),
            ..
        }) = &c.kind
        {
            let options = ParquetSinkOptions {
                max_file_age: Some(DEAD_LETTER_FILE_AGE),
                ..ParquetSinkOptions::default()
            };
            match ParquetSink::open(&at.value) {
                Ok(sink) => {
                    opened.dead_letters.insert(id, sink.with_options(options));
                }
                Err(e) => failures.push((
                    id,
                    anyhow::Error::new(e)
                        .context(format!("opening the dead-letter output at {}", at.value)),
                )),
            }
            continue;
        }
        let parallelism = c.parallelism.unwrap_or(spec.job.parallelism);
        match open_one(c, &spec.job.state, parallelism).await {
            Ok(Some(Either::Source(s))) => {
                opened.sources.insert(id, s);
            }
            Ok(Some(Either::Sink(s))) => {
                opened.sinks.insert(id, s);
            }
            Ok(None) => {}
            Err(e) => failures.push((id, e)),
        }
    }
    if failures.is_empty() {
        Ok(opened)
    } else {
        Err(failures)
    }
}

enum Either {
    Source(OpenedSource),
    Sink(OpenedSink),
}

/// Where a Kafka sink stages exactly-once records when the spec does not say.
fn kafka_staging(state: &str) -> String {
    format!("{}/kafka-staging", state.trim_end_matches('/'))
}

fn kafka_client(brokers: &str, properties: &[(String, String)]) -> ClientConfig {
    properties
        .iter()
        .fold(ClientConfig::new(brokers), |c, (k, v)| c.set(k, v))
}

async fn open_one(
    c: &Component,
    state: &str,
    parallelism: usize,
) -> anyhow::Result<Option<Either>> {
    Ok(Some(match &c.kind {
        Kind::ParquetSource {
            path,
            glob,
            columns,
            batch_rows,
            dead_letter,
            ..
        } => {
            let mut builder = ParquetSource::builder(path.clone());
            if let Some(glob) = glob {
                builder = builder.glob(glob.clone());
            }
            if let Some(columns) = columns {
                builder = builder.columns(columns.clone());
            }
            if let Some(rows) = batch_rows {
                builder = builder.batch_rows(*rows);
            }
            if let Some(at) = dead_letter {
                builder = builder.on_corrupt_file(OnCorruptFile::DeadLetter(at.clone()));
            }
            let source = builder
                .build()
                .await
                .with_context(|| format!("opening the Parquet files at {path}"))?;
            Either::Source(OpenedSource::Parquet(source))
        }
        Kind::PostgresSource {
            url,
            table,
            key,
            columns,
            filter,
            splits,
            batch_rows,
            connections,
            statement_timeout,
            lock_timeout,
            ..
        } => {
            let mut builder = PostgresSource::builder(url, table, key.clone())
                .timeouts(timeouts(*statement_timeout, *lock_timeout));
            if let Some(columns) = columns {
                builder = builder.columns(columns.clone());
            }
            if let Some(filter) = filter {
                builder = builder.filter(filter);
            }
            if let Some(splits) = splits {
                builder = builder.splits(*splits);
            }
            if let Some(rows) = batch_rows {
                builder = builder.batch_rows(*rows);
            }
            if let Some(n) = connections {
                builder = builder.connections(*n);
            }
            let source = builder
                .build()
                .await
                .with_context(|| format!("opening the PostgreSQL table {table}"))?;
            Either::Source(OpenedSource::Postgres(source))
        }
        Kind::ParquetSink {
            path,
            target_file_size,
            max_file_age,
            row_group_rows,
            part_size,
        } => {
            let defaults = ParquetSinkOptions::default();
            let options = ParquetSinkOptions {
                target_file_bytes: target_file_size.unwrap_or(defaults.target_file_bytes),
                max_file_age: max_file_age.or(defaults.max_file_age),
                max_row_group_rows: row_group_rows.unwrap_or(defaults.max_row_group_rows),
                part_bytes: part_size.map_or(defaults.part_bytes, |p| p as usize),
                ..defaults
            };
            let sink = ParquetSink::open(path)
                .with_context(|| format!("opening the Parquet output at {path}"))?
                .with_options(options);
            Either::Sink(OpenedSink::Parquet(sink))
        }
        Kind::PostgresSink {
            url,
            table,
            exactly_once,
            create,
            max_bad_rows,
            key,
            statement_timeout,
            lock_timeout,
        } => {
            let mode = if *exactly_once {
                SinkMode::ExactlyOnce
            } else {
                SinkMode::Upsert
            };
            let mut builder = PostgresSink::builder(url, table, mode)
                .timeouts(timeouts(*statement_timeout, *lock_timeout));
            if let Some(key) = key {
                builder = builder.key(key.clone());
            }
            if let Some(statement) = create {
                builder = builder.create_if_missing(statement);
            }
            if let Some(n) = max_bad_rows {
                builder = builder.max_bad_rows(*n);
            }
            let sink = builder
                .build()
                .await
                .with_context(|| format!("opening the PostgreSQL table {table}"))?;
            Either::Sink(OpenedSink::Postgres(sink))
        }
        Kind::KafkaSource {
            brokers,
            topic,
            format,
            unbounded,
            batch_rows,
            dead_letter,
            max_bad_rows,
            properties,
            ..
        } => {
            let format = match format {
                KafkaFormat::Raw => Format::Raw,
                KafkaFormat::Utf8 => Format::Utf8,
                KafkaFormat::Json(columns) => {
                    Format::Json(std::sync::Arc::new(arrow::datatypes::Schema::new(
                        columns
                            .iter()
                            .map(|(name, t)| arrow::datatypes::Field::new(name, t.clone(), true))
                            .collect::<Vec<_>>(),
                    )))
                }
            };
            let mut source = KafkaSource::new(kafka_client(brokers, properties), topic, format)
                .with_context(|| format!("opening the Kafka topic {topic}"))?;
            if let Some(rows) = batch_rows {
                source = source.batch_rows(*rows);
            }
            if *unbounded {
                // A reader per subtask: each subtask reads one share without end.
                source = source.unbounded(parallelism);
            }
            if let Some(at) = dead_letter {
                let budget = max_bad_rows.unwrap_or(crate::spec::model::DEFAULT_MAX_BAD_ROWS);
                source = source
                    .dead_letter(at, budget)
                    .with_context(|| format!("opening the dead-letter output at {at}"))?;
            }
            source
                .probe()
                .await
                .with_context(|| format!("opening the Kafka topic {topic}"))?;
            Either::Source(OpenedSource::Kafka(source))
        }
        Kind::KafkaSink {
            brokers,
            topic,
            exactly_once,
            key,
            staging,
            properties,
        } => {
            let mode = if *exactly_once {
                tidewater_kafka::SinkMode::ExactlyOnce
            } else {
                tidewater_kafka::SinkMode::AtLeastOnce
            };
            let staging = staging.clone().unwrap_or_else(|| kafka_staging(state));
            let mut sink = KafkaSink::new(kafka_client(brokers, properties), topic, mode, &staging)
                .with_context(|| format!("opening the Kafka sink's staging location {staging}"))?;
            if let Some(column) = key {
                sink = sink.key_column(column);
            }
            sink.probe()
                .await
                .with_context(|| format!("opening the Kafka topic {topic}"))?;
            Either::Sink(OpenedSink::Kafka(sink))
        }
        Kind::Generator { .. } | Kind::Sql(_) | Kind::Aggregate { .. } => return Ok(None),
    }))
}

/// The object `validate --connect` writes and deletes in each Parquet
/// sink's location, to learn that it takes writes. No row is written.
pub const PROBE: &str = "_tidewater_validate_probe";

/// Checks that every Parquet output (sinks and dead letters) takes a write (credentials,
/// permissions, the bucket exists): puts a small object there and deletes
/// it. Each failure names the component.
pub async fn probe_outputs(spec: &Spec) -> Vec<(String, anyhow::Error)> {
    let mut failures = Vec::new();
    for c in &spec.components {
        let path = match &c.kind {
            Kind::ParquetSink { path, .. } => path,
            Kind::Sql(SqlSpec {
                dead_letter: Some(at),
                ..
            }) => &at.value,
            Kind::KafkaSource {
                dead_letter: Some(at),
                ..
            } => at,
            _ => continue,
        };
        if let Err(e) = probe_output(path).await {
            failures.push((
                c.id.value.clone(),
                anyhow::Error::new(e).context(format!(
                    "the output {path} does not take writes; check the credentials, the \
                     permissions and that the bucket or folder exists"
                )),
            ));
        }
    }
    failures
}

async fn probe_output(path: &str) -> tidewater_core::Result<()> {
    use object_store::{ObjectStoreExt, PutPayload};
    let location = tidewater_core::open_location(path)?;
    let probe = location.prefix.clone().join(PROBE);
    location
        .store
        .put(
            &probe,
            PutPayload::from_static(b"written by tidewater validate --connect"),
        )
        .await
        .map_err(|e| tidewater_core::Error::storage("write a probe object", &probe, e))?;
    location
        .store
        .delete(&probe)
        .await
        .map_err(|e| tidewater_core::Error::storage("delete the probe object", &probe, e))
}

/// Puts a source's throttles on its stream.
pub fn throttle(stream: Stream, spec: &ThrottleSpec) -> Stream {
    let mut stream = stream;
    if let Some(rate) = spec.rate_limit {
        stream = stream.throttle(RateLimit::new(rate));
    }
    if let Some(lag) = &spec.replica_lag {
        let on = if lag.on_replica {
            LagSource::Replica
        } else {
            LagSource::Primary
        };
        let mut throttle = ReplicaLagThrottle::new(&lag.url, on, lag.high);
        if let Some(low) = lag.low {
            throttle = throttle.low_mark(low);
        }
        if let Some(poll) = lag.poll {
            throttle = throttle.poll_interval(poll);
        }
        stream = stream.throttle(throttle);
    }
    stream
}

/// A spec's `statement_timeout` and `lock_timeout`, each defaulting alone.
fn timeouts(statement: Option<Duration>, lock: Option<Duration>) -> Timeouts {
    let defaults = Timeouts::default();
    Timeouts {
        statement: statement.unwrap_or(defaults.statement),
        lock: lock.unwrap_or(defaults.lock),
    }
}
