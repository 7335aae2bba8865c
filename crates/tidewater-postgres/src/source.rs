//! `PostgresSource`: a table read in key order by keyset pagination, split
//! into key ranges that subtasks read in parallel.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use async_trait::async_trait;
use bytes::BytesMut;
use futures::TryStreamExt;
use serde_json::json;
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tidewater_core::events::{ConnectionRetried, InternalEvent};
use tidewater_core::{Cursor, Error, Result, Source, Split, SplitReader};

use crate::copy::COPY_TRAILER;
use crate::decode::{ColumnBuilder, decode_copy};
use crate::errors::{db_error, is_connection_error, probe, user_error};
use crate::schema::{PgColumn, describe, quote_ident, quote_table};

/// How often a read is retried after the connection dropped.
const READ_RETRIES: u32 = 5;

/// Reads a table (or a projection and filter over it) in the order of a
/// unique integer key, `batch_rows` rows per query, each query a binary COPY:
///
/// ```sql
/// COPY (SELECT cols FROM t WHERE key > cursor AND key <= split_end [AND (filter)]
///       ORDER BY key LIMIT batch) TO STDOUT (FORMAT binary)
/// ```
///
/// The key range `[min, max]` at the first run is cut into `splits` ranges;
/// each split's cursor is the last key it emitted. A resumed run reuses the
/// checkpointed ranges, so rows inserted past the original `max` are not read.
#[derive(Debug, Clone)]
pub struct PostgresSource {
    pool: PgPool,
    table: String,
    key: String,
    columns: Vec<PgColumn>,
    key_index: usize,
    filter: Option<String>,
    splits: u64,
    batch_rows: i64,
    schema: SchemaRef,
}

/// Configures a [`PostgresSource`].
#[derive(Debug, Clone)]
pub struct PostgresSourceBuilder {
    url: String,
    table: String,
    key: String,
    columns: Option<Vec<String>>,
    filter: Option<String>,
    splits: u64,
    batch_rows: i64,
    connections: u32,
    /// Settings that cannot mean anything, refused by `build`.
    refused: Vec<&'static str>,
}

impl PostgresSource {
    /// Reads `table` (optionally `schema.table`) from `url` in the order of `key`.
    pub fn builder(url: &str, table: &str, key: &str) -> PostgresSourceBuilder {
        PostgresSourceBuilder {
            url: url.to_string(),
            table: table.to_string(),
            key: key.to_string(),
            columns: None,
            filter: None,
            splits: 16,
            batch_rows: 50_000,
            connections: 8,
            refused: Vec::new(),
        }
    }

    fn prefix(&self) -> String {
        format!("{}:{}:", self.table, self.key)
    }

    fn split(&self, lo: i64, hi: i64, estimate: u64) -> Split {
        Split {
            id: format!("{}{lo}..={hi}", self.prefix()),
            estimated_rows: Some(estimate),
        }
    }

    async fn estimated_rows(&self) -> Result<u64> {
        let (estimate,): (i64,) = sqlx::query_as(
            "SELECT GREATEST(reltuples, 0)::int8 FROM pg_class WHERE oid = $1::text::regclass",
        )
        .bind(&self.table)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| db_error("estimating the row count", e))?;
        if estimate > 0 {
            return Ok(estimate as u64);
        }
        // Never analysed: count (slow on a huge table, but only then).
        let sql = format!("SELECT count(*) FROM {}", quote_table(&self.table));
        let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error("counting rows", e))?;
        Ok(count as u64)
    }

    fn where_filter(&self) -> String {
        self.filter
            .as_ref()
            .map(|f| format!(" AND ({f})"))
            .unwrap_or_default()
    }
}

impl PostgresSourceBuilder {
    /// Reads only these columns (the key is always read). Default: all.
    pub fn columns<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    /// Reads only rows matching this SQL condition (e.g. `created_at < '2024-01-01'`).
    pub fn filter(mut self, condition: &str) -> Self {
        self.filter = Some(condition.to_string());
        self
    }

    /// Key ranges to cut the table into (default 16).
    pub fn splits(mut self, splits: u64) -> Self {
        if splits == 0 {
            self.refused
                .push("splits is 0: the table needs at least one key range");
        }
        self.splits = splits.max(1);
        self
    }

    /// Rows per query and per batch (default 50 000).
    pub fn batch_rows(mut self, rows: usize) -> Self {
        if rows == 0 {
            self.refused
                .push("batch_rows is 0: a query must read at least one row");
        }
        self.batch_rows = rows.clamp(1, i64::MAX as usize) as i64;
        self
    }

    /// Connections in the source's pool (default 8; one per reading subtask is enough).
    pub fn connections(mut self, connections: u32) -> Self {
        if connections == 0 {
            self.refused
                .push("connections is 0: reading needs at least one connection");
        }
        self.connections = connections.max(1);
        self
    }

    /// Connects, reads the table's columns and checks the configuration.
    pub async fn build(self) -> Result<PostgresSource> {
        if let Some(why) = self.refused.first() {
            return Err(Error::InvalidPipeline(format!(
                "postgres source on '{}': {why}",
                self.table
            )));
        }
        probe(&self.url, "the source").await?;
        let pool = PgPoolOptions::new()
            .max_connections(self.connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&self.url)
            .await
            .map_err(|e| {
                db_error(
                    &format!("connecting to the source ({})", redact(&self.url)),
                    e,
                )
            })?;
        let all = describe(&pool, &self.table).await?;
        let key_column = all.iter().find(|c| c.name == self.key).ok_or_else(|| {
            user_error(format!(
                "table '{}' has no key column '{}'",
                self.table, self.key
            ))
        })?;
        if !matches!(key_column.udt.as_str(), "int2" | "int4" | "int8") {
            return Err(user_error(format!(
                "key column '{}' has type {}: the key must be an integer column (int2, int4, int8) \
                 that is unique and indexed",
                self.key, key_column.sql_type
            )));
        }
        let mut columns = match &self.columns {
            None => all.clone(),
            Some(names) => names
                .iter()
                .map(|name| {
                    all.iter()
                        .find(|c| &c.name == name)
                        .cloned()
                        .ok_or_else(|| {
                            user_error(format!(
                                "table '{}' has no column '{name}' (columns: {})",
                                self.table,
                                all.iter()
                                    .map(|c| c.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ))
                        })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        if !columns.iter().any(|c| c.name == self.key) {
            columns.insert(0, key_column.clone());
        }
        let mut fields = Vec::with_capacity(columns.len());
        for column in &columns {
            // Fails on an unsupported type, naming the column.
            ColumnBuilder::new(column, 0)?;
            let data_type = column.arrow.clone().unwrap_or(DataType::Null);
            fields.push(Field::new(&column.name, data_type, column.nullable));
        }
        let key_index = columns
            .iter()
            .position(|c| c.name == self.key)
            .expect("added above");
        Ok(PostgresSource {
            pool,
            table: self.table,
            key: self.key,
            columns,
            key_index,
            filter: self.filter,
            splits: self.splits,
            batch_rows: self.batch_rows,
            schema: Arc::new(Schema::new(fields)),
        })
    }
}

pub(crate) use tidewater_core::redact_url as redact;

#[async_trait]
impl Source for PostgresSource {
    fn kind(&self) -> &str {
        "postgres"
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn splits(&self) -> Result<Vec<Split>> {
        let sql = format!(
            "SELECT min({key})::int8, max({key})::int8 FROM {table} WHERE true{filter}",
            key = quote_ident(&self.key),
            table = quote_table(&self.table),
            filter = self.where_filter()
        );
        let (min, max): (Option<i64>, Option<i64>) = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error("reading the key range", e))?;
        let (Some(min), Some(max)) = (min, max) else {
            return Ok(Vec::new());
        };
        let span = (max as i128 - min as i128 + 1) as u128;
        let count = u128::from(self.splits).min(span);
        let estimate = self.estimated_rows().await? / count as u64;
        Ok((0..count)
            .map(|i| {
                let lo = min as i128 + (span * i / count) as i128;
                let hi = min as i128 + (span * (i + 1) / count) as i128 - 1;
                self.split(lo as i64, hi as i64, estimate)
            })
            .collect())
    }

    async fn resume_splits(&self, checkpointed: &[String]) -> Result<Option<Vec<Split>>> {
        let estimate = self.estimated_rows().await? / checkpointed.len().max(1) as u64;
        let prefix = self.prefix();
        let splits = checkpointed
            .iter()
            .map(|id| {
                parse_range(id, &prefix).map(|(lo, hi)| self.split(lo, hi, estimate)).ok_or_else(|| {
                    Error::IncompatibleState {
                        uid: self.table.clone(),
                        checkpoint: Default::default(),
                        detail: format!(
                            "checkpointed split '{id}' is not a range of {}.{}: was the table or key changed?",
                            self.table, self.key
                        ),
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(splits))
    }

    async fn open(&self, split: &Split, cursor: Option<&Cursor>) -> Result<Box<dyn SplitReader>> {
        let (lo, hi) = parse_range(&split.id, &self.prefix()).ok_or_else(|| {
            Error::Corrupt(format!("'{}' is not a split of this source", split.id))
        })?;
        let after = match cursor.and_then(|c| c.get("after")) {
            None => None,
            Some(value) => Some(value.as_i64().ok_or_else(|| {
                Error::Corrupt(format!(
                    "cursor {value} of split '{}' is not an integer",
                    split.id
                ))
            })?),
        };
        let columns = self
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let key = quote_ident(&self.key);
        Ok(Box::new(PostgresReader {
            source: self.clone(),
            select_head: format!(
                "SELECT {columns} FROM {table} WHERE {key}",
                table = quote_table(&self.table),
            ),
            select_tail: format!(
                "AND {key} <= {hi}{filter} ORDER BY {key} LIMIT {limit}",
                filter = self.where_filter(),
                limit = self.batch_rows,
            ),
            lo,
            after,
            done: false,
        }))
    }
}

fn parse_range(id: &str, prefix: &str) -> Option<(i64, i64)> {
    let (lo, hi) = id.strip_prefix(prefix)?.split_once("..=")?;
    Some((lo.parse().ok()?, hi.parse().ok()?))
}

struct PostgresReader {
    source: PostgresSource,
    /// The batch query up to its lower bound: `SELECT ... WHERE key`.
    select_head: String,
    /// The batch query after its lower bound: `AND key <= hi ... LIMIT n`.
    select_tail: String,
    lo: i64,
    after: Option<i64>,
    done: bool,
}

impl PostgresReader {
    /// The next batch as one binary COPY payload. COPY takes no bind
    /// parameters; the bounds are integers, formatted into the statement.
    async fn fetch(&self) -> std::result::Result<BytesMut, sqlx::Error> {
        let (op, from) = match self.after {
            None => (">=", self.lo),
            Some(after) => (">", after),
        };
        let statement = format!(
            "COPY ({} {op} {from} {}) TO STDOUT (FORMAT binary)",
            self.select_head, self.select_tail
        );
        let mut conn = self.source.pool.acquire().await?;
        let mut stream = conn.copy_out_raw(&statement).await?;
        let mut payload = BytesMut::new();
        while let Some(chunk) = stream.try_next().await? {
            payload.extend_from_slice(&chunk);
        }
        // A connection cut mid-COPY can end the stream without an error:
        // without its trailer the payload is incomplete, and reading again is safe.
        if !payload.ends_with(&COPY_TRAILER) {
            return Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the COPY stream ended before its trailer",
            )));
        }
        Ok(payload)
    }
}

#[async_trait]
impl SplitReader for PostgresReader {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.done {
            return Ok(None);
        }
        let mut attempt = 0;
        let payload = loop {
            match self.fetch().await {
                Ok(payload) => break payload,
                // Reads are idempotent: on a dropped connection, read again.
                Err(e) if is_connection_error(&e) && attempt < READ_RETRIES => {
                    attempt += 1;
                    let backoff = Duration::from_millis(100 * 2u64.pow(attempt));
                    ConnectionRetried {
                        what: "postgres source",
                        target: &self.source.table,
                        attempt,
                        of: READ_RETRIES,
                        backoff,
                        error: &e.to_string(),
                    }
                    .emit();
                    tokio::time::sleep(backoff).await;
                }
                Err(e) => return Err(db_error(&format!("reading '{}'", self.source.table), e)),
            }
        };
        let columns = &self.source.columns;
        let mut builders = columns
            .iter()
            .map(|c| ColumnBuilder::new(c, self.source.batch_rows.min(65_536) as usize))
            .collect::<Result<Vec<_>>>()?;
        let rows = decode_copy(&payload, columns, &mut builders)?;
        if (rows as i64) < self.source.batch_rows {
            self.done = true;
        }
        if rows == 0 {
            return Ok(None);
        }
        let arrays: Vec<ArrayRef> = builders.iter_mut().map(ColumnBuilder::finish).collect();
        let key = cast(&arrays[self.source.key_index], &DataType::Int64)?;
        self.after = Some(key.as_primitive::<Int64Type>().value(rows - 1));
        Ok(Some(RecordBatch::try_new(
            self.source.schema.clone(),
            arrays,
        )?))
    }

    fn cursor(&self) -> Cursor {
        match self.after {
            Some(after) => json!({ "after": after }),
            None => json!({}),
        }
    }
}
