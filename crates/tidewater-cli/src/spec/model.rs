//! What a spec says, once read: the job's settings and its components.

use std::time::Duration;

use super::reader::Located;

/// The `[job]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The job's identity in the state store.
    pub name: String,
    /// Folder or URL for checkpoints (default `./tidewater-state`).
    pub state: String,
    /// Time between checkpoints (default 1 s); `None` is `"off"`.
    pub checkpoint_interval: Option<Duration>,
    /// Subtasks per operator (default 2).
    pub parallelism: usize,
    /// Completed checkpoints to keep (default 3).
    pub retain: usize,
    /// Key groups keyed state is split into (default 4096): fixed when the
    /// job first starts, and the highest parallelism a keyed operator can
    /// later be rescaled to.
    pub key_groups: u32,
    /// Incremental checkpoints (default off).
    pub incremental_checkpoints: bool,
    /// With them, a full checkpoint at least every this many (default 100).
    pub full_checkpoint_every: u32,
}

/// Whether a component produces, transforms or consumes rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `[sources.ID]`.
    Source,
    /// `[transforms.ID]`.
    Transform,
    /// `[sinks.ID]`.
    Sink,
}

impl Role {
    /// The table the component sits in.
    pub fn table(self) -> &'static str {
        match self {
            Role::Source => "sources",
            Role::Transform => "transforms",
            Role::Sink => "sinks",
        }
    }
}

/// One `[sources.ID]`, `[transforms.ID]` or `[sinks.ID]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    /// Its id: the operator uid in checkpoints.
    pub id: Located<String>,
    /// Source, transform or sink.
    pub role: Role,
    /// The components it reads (empty for sources).
    pub inputs: Vec<Located<String>>,
    /// Subtasks for this component, overriding the job's.
    pub parallelism: Option<usize>,
    /// What it does.
    pub kind: Kind,
}

/// The `type` of a component and its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `type = "generator"`: deterministic rows (id, k, v, s).
    Generator {
        /// Rows to generate.
        rows: u64,
        /// Distinct keys.
        keys: u64,
        /// Splits (default: one per subtask).
        splits: Option<u64>,
        /// Rows per batch.
        batch_rows: Option<usize>,
        /// Throttles on the source.
        throttle: ThrottleSpec,
    },
    /// `type = "parquet"` source.
    ParquetSource {
        /// Folder, file or URL.
        path: String,
        /// Only matching files.
        glob: Option<String>,
        /// Projection, in order.
        columns: Option<Vec<String>>,
        /// Rows per batch.
        batch_rows: Option<usize>,
        /// Where unreadable files are recorded instead of failing the job.
        dead_letter: Option<String>,
        /// Throttles on the source.
        throttle: ThrottleSpec,
    },
    /// `type = "postgres"` source.
    PostgresSource {
        /// Connection URL.
        url: String,
        /// Table (optionally `schema.table`).
        table: String,
        /// The key the reads are split and ordered by: one column or several.
        key: Vec<String>,
        /// Projection.
        columns: Option<Vec<String>>,
        /// SQL condition added to every read.
        filter: Option<String>,
        /// Key ranges.
        splits: Option<u64>,
        /// Rows per batch.
        batch_rows: Option<usize>,
        /// Connections in the pool.
        connections: Option<u32>,
        /// `statement_timeout` of every read.
        statement_timeout: Option<Duration>,
        /// `lock_timeout` of every read.
        lock_timeout: Option<Duration>,
        /// Throttles on the source.
        throttle: ThrottleSpec,
    },
    /// `type = "kafka"` source.
    KafkaSource {
        /// `host:port[,host:port]`.
        brokers: String,
        /// The topic.
        topic: String,
        /// How values are decoded.
        format: KafkaFormat,
        /// `mode = "unbounded"`: read until cancelled.
        unbounded: bool,
        /// Records per batch.
        batch_rows: Option<usize>,
        /// Where records that do not decode go instead of failing the job.
        dead_letter: Option<String>,
        /// How many a partition may have (with `dead_letter`).
        max_bad_rows: Option<u64>,
        /// librdkafka settings (TLS, SASL, ...).
        properties: Vec<(String, String)>,
        /// Throttles on the source.
        throttle: ThrottleSpec,
    },
    /// `type = "sql"`: filter, computed columns, projection.
    Sql(SqlSpec),
    /// `type = "aggregate"`: per-key aggregates.
    Aggregate {
        /// Key columns.
        key_by: Vec<Located<String>>,
        /// Output name and SQL aggregate call, in file order.
        aggregates: Vec<(String, Located<String>)>,
    },
    /// `type = "parquet"` sink.
    ParquetSink {
        /// Folder or URL.
        path: String,
        /// Files are finished at this size.
        target_file_size: Option<u64>,
        /// Files are also finished at the first checkpoint after this age.
        max_file_age: Option<Duration>,
        /// Rows per row group.
        row_group_rows: Option<usize>,
        /// Bytes per uploaded part.
        part_size: Option<u64>,
    },
    /// `type = "postgres"` sink.
    PostgresSink {
        /// Connection URL.
        url: String,
        /// Table.
        table: String,
        /// `upsert` or `exactly-once`.
        exactly_once: bool,
        /// Statement run first (e.g. `CREATE TABLE IF NOT EXISTS ...`), in
        /// the transaction that creates the sink's bookkeeping tables.
        create: Option<String>,
        /// Rows that may go to `tidewater_dead_letters` before the job fails.
        max_bad_rows: Option<u64>,
        /// Conflict columns for upsert (default: the primary key).
        key: Option<Vec<String>>,
        /// `statement_timeout` of every write.
        statement_timeout: Option<Duration>,
        /// `lock_timeout` of every write.
        lock_timeout: Option<Duration>,
    },
    /// `type = "kafka"` sink.
    KafkaSink {
        /// `host:port[,host:port]`.
        brokers: String,
        /// The topic.
        topic: String,
        /// `exactly-once` (the default) or `at-least-once`.
        exactly_once: bool,
        /// The column whose text keys each record.
        key: Option<String>,
        /// Where exactly-once records wait for their checkpoint (default
        /// `{state}/kafka-staging`).
        staging: Option<String>,
        /// librdkafka settings.
        properties: Vec<(String, String)>,
    },
}

/// `format` of a Kafka source.
#[derive(Debug, Clone, PartialEq)]
pub enum KafkaFormat {
    /// `"raw"`: bytes.
    Raw,
    /// `"utf8"`: text.
    Utf8,
    /// `"json"` with `schema = { column = "type", ... }`.
    Json(Vec<(String, arrow::datatypes::DataType)>),
}

/// The SQL transform's three optional steps, applied in this order.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlSpec {
    /// Rows to keep.
    pub filter: Option<Located<String>>,
    /// Computed columns, added or replaced, in order.
    pub columns: Vec<(String, Located<String>)>,
    /// Projection, in order.
    pub select: Option<Vec<Located<String>>>,
    /// `dead_letter`: where rows an expression fails on are written (a
    /// folder or URL, as Parquet) instead of failing the job.
    pub dead_letter: Option<Located<String>>,
    /// `max_bad_rows`: how many rows may go to `dead_letter` before the job
    /// fails ([`DEFAULT_MAX_BAD_ROWS`] when `dead_letter` is set).
    pub max_bad_rows: Option<u64>,
}

/// The error budget of a SQL transform with a `dead_letter` output and no
/// `max_bad_rows`: enough for a few bad rows, few enough that an expression
/// failing on every row stops the job early.
pub const DEFAULT_MAX_BAD_ROWS: u64 = 1000;

/// Throttles a source can have.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThrottleSpec {
    /// `rate_limit`: rows per second at most.
    pub rate_limit: Option<f64>,
    /// `replica_lag`: pause while a replica is behind.
    pub replica_lag: Option<ReplicaLagSpec>,
}

/// `replica_lag = { url = "...", on = "replica", high = "2s" }`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaLagSpec {
    /// Where the lag is read.
    pub url: String,
    /// `"primary"` (pg_stat_replication) or `"replica"` (replay age).
    pub on_replica: bool,
    /// Pause above this lag.
    pub high: Duration,
    /// Resume below this lag (default: half of `high`).
    pub low: Option<Duration>,
    /// How often the lag is read (default 1 s).
    pub poll: Option<Duration>,
}
