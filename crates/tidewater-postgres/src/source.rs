//! `PostgresSource`: a table read in key order by keyset pagination, split
//! into key ranges that subtasks read in parallel.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use bytes::BytesMut;
use futures::TryStreamExt;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};
use tidewater_core::events::{ConnectionRetried, InternalEvent, KeyOutOfStorageOrder};
use tidewater_core::{Cursor, Error, Result, Source, Split, SplitReader, TaskContext};

use crate::connect::{Timeouts, application_name, parse_url, probe, session};
use crate::copy::COPY_TRAILER;
use crate::decode::{ColumnBuilder, decode_copy};
use crate::errors::{db_error, is_connection_error, user_error};
use crate::key::{Key, KeyKind, KeyRange, KeyValue, integer_ranges, sampled_ranges};
use crate::schema::{PgColumn, describe, has_unique_index, quote_ident, quote_table};

/// How often a read is retried after the connection dropped.
const READ_RETRIES: u32 = 5;

/// Sampled keys per split when a key space is cut by sampling.
const SAMPLE_PER_SPLIT: u64 = 100;

/// Whether rows stored with this correlation to the key's order (the
/// planner's `pg_stats.correlation`, from -1 to 1) are too scattered for
/// reading in key order to be cheap. PostgreSQL's own cost model weighs
/// index scans by its square: below 0.5 it prices them at least three
/// quarters of the way to one page per row.
fn is_scattered(correlation: f64) -> bool {
    correlation.abs() < 0.5
}

/// The column or columns a table is read in the order of.
///
/// ```
/// use tidewater_postgres::KeyColumns;
/// assert_eq!(KeyColumns::from("id").0, ["id"]);
/// assert_eq!(KeyColumns::from(["tenant", "created_at"]).0, ["tenant", "created_at"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumns(pub Vec<String>);

impl From<&str> for KeyColumns {
    fn from(name: &str) -> Self {
        KeyColumns(vec![name.to_string()])
    }
}

impl From<String> for KeyColumns {
    fn from(name: String) -> Self {
        KeyColumns(vec![name])
    }
}

impl From<Vec<String>> for KeyColumns {
    fn from(names: Vec<String>) -> Self {
        KeyColumns(names)
    }
}

impl<const N: usize> From<[&str; N]> for KeyColumns {
    fn from(names: [&str; N]) -> Self {
        KeyColumns(names.iter().map(|n| n.to_string()).collect())
    }
}

impl From<Vec<&str>> for KeyColumns {
    fn from(names: Vec<&str>) -> Self {
        KeyColumns(names.into_iter().map(str::to_string).collect())
    }
}

impl From<&[&str]> for KeyColumns {
    fn from(names: &[&str]) -> Self {
        KeyColumns(names.iter().map(|n| n.to_string()).collect())
    }
}

/// Reads a table (or a projection and filter over it) in the order of a
/// unique key of one or more columns, `batch_rows` rows per query, each query
/// a binary COPY:
///
/// ```sql
/// COPY (SELECT cols FROM t WHERE (a, b) > (cursor) AND (a, b) < (split end)
///       [AND (filter)] ORDER BY a, b LIMIT batch) TO STDOUT (FORMAT binary)
/// ```
///
/// A key is integers, `numeric(p, s)`, uuid, text, varchar, date, timestamp
/// or timestamptz, NOT NULL, and covered by a unique index. One integer key's
/// range `[min, max]` at the first run is cut arithmetically into `splits`
/// ranges; any other key is cut at keys sampled from the table
/// (`TABLESAMPLE`) and sorted by the server, so the splits follow the
/// server's order (and the columns' collations). Each split's cursor is the
/// last key tuple it emitted, checkpointed exactly. A resumed run reuses the
/// checkpointed ranges, so rows inserted past the original end are not read.
///
/// Each reading subtask has its own connection, named
/// `tidewater/{job}/{uid}/{subtask}` in `pg_stat_activity`, whose every
/// batch is a read-only, repeatable-read transaction under the [`Timeouts`].
#[derive(Debug, Clone)]
pub struct PostgresSource {
    pool: PgPool,
    /// Boxed: the options are large, and every reader clones the source.
    options: Arc<PgConnectOptions>,
    timeouts: Timeouts,
    table: String,
    key: Key,
    columns: Vec<PgColumn>,
    /// Where each key column is in `columns`.
    key_indexes: Vec<usize>,
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
    key: Vec<String>,
    columns: Option<Vec<String>>,
    filter: Option<String>,
    splits: u64,
    batch_rows: i64,
    connections: u32,
    timeouts: Timeouts,
    /// Settings that cannot mean anything, refused by `build`.
    refused: Vec<&'static str>,
}

impl PostgresSource {
    /// Reads `table` (optionally `schema.table`) from `url` in the order of
    /// `key`: a column name, or a list of them for a composite key.
    pub fn builder(url: &str, table: &str, key: impl Into<KeyColumns>) -> PostgresSourceBuilder {
        let key = key.into().0;
        let mut refused = Vec::new();
        if key.is_empty() {
            refused
                .push("the key has no columns: name the column (or columns) to read in order of");
        }
        PostgresSourceBuilder {
            url: url.to_string(),
            table: table.to_string(),
            key,
            columns: None,
            filter: None,
            splits: 16,
            batch_rows: 50_000,
            connections: 8,
            timeouts: Timeouts::default(),
            refused,
        }
    }

    fn prefix(&self) -> String {
        format!("{}:{}:", self.table, self.key.names.join(","))
    }

    fn split(&self, range: &KeyRange, estimate: u64) -> Split {
        Split {
            id: format!("{}{}", self.prefix(), self.key.range_id(range)),
            estimated_rows: Some(estimate),
        }
    }

    fn range_of(&self, id: &str) -> Option<KeyRange> {
        self.key.parse_range_id(id.strip_prefix(&self.prefix())?)
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

    /// Warns when one key column's order has little to do with how the rows
    /// are stored (a random uuid, say), by the planner's statistics: keyset
    /// reading then fetches a heap page per row. Statistics that are missing
    /// (never analysed) or unreadable say nothing. A composite key is not
    /// judged: its first column's statistic misses the order within it.
    async fn warn_if_scattered(&self) {
        let [key] = self.key.names.as_slice() else {
            return;
        };
        let correlation: Option<Option<f64>> = sqlx::query_scalar(
            "SELECT s.correlation::float8 FROM pg_stats s \
             JOIN pg_class c ON c.relname = s.tablename \
             JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname \
             WHERE c.oid = $1::text::regclass AND s.attname = $2",
        )
        .bind(&self.table)
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .ok()
        .flatten();
        if let Some(Some(correlation)) = correlation
            && is_scattered(correlation)
        {
            KeyOutOfStorageOrder {
                table: &self.table,
                key,
                correlation,
            }
            .emit();
        }
    }

    /// One integer key: `[min, max]` cut arithmetically.
    async fn integer_splits(&self) -> Result<Vec<KeyRange>> {
        let sql = format!(
            "SELECT min({key})::int8, max({key})::int8 FROM {table} WHERE true{filter}",
            key = quote_ident(&self.key.names[0]),
            table = quote_table(&self.table),
            filter = self.where_filter()
        );
        let (min, max): (Option<i64>, Option<i64>) = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error("reading the key range", e))?;
        Ok(match (min, max) {
            (Some(min), Some(max)) => integer_ranges(min, max, self.splits),
            _ => Vec::new(),
        })
    }

    /// Any other key: cut at keys sampled from the table, sorted by the server.
    async fn sampled_splits(&self, rows: u64) -> Result<Vec<KeyRange>> {
        let wanted = self.splits.saturating_mul(SAMPLE_PER_SPLIT);
        let percent = 100.0 * wanted as f64 / rows.max(1) as f64;
        let sample = if percent >= 100.0 {
            String::new()
        } else {
            format!(" TABLESAMPLE SYSTEM ({:.6})", percent.max(0.000_001))
        };
        let key_columns: Vec<PgColumn> = self
            .key_indexes
            .iter()
            .map(|&i| self.columns[i].clone())
            .collect();
        let statement = format!(
            "COPY (SELECT {cols} FROM {table}{sample} WHERE true{filter} ORDER BY {cols}) \
             TO STDOUT (FORMAT binary)",
            cols = self.key.order_by(),
            table = quote_table(&self.table),
            filter = self.where_filter(),
        );
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| db_error("sampling keys to split the table", e))?;
        let payload = copy_out(&mut conn, &statement)
            .await
            .map_err(|e| db_error("sampling keys to split the table", e))?;
        let mut builders = key_columns
            .iter()
            .map(|c| ColumnBuilder::new(c, 1024))
            .collect::<Result<Vec<_>>>()?;
        let n = decode_copy(&payload, &key_columns, &mut builders)?;
        let arrays: Vec<ArrayRef> = builders.iter_mut().map(ColumnBuilder::finish).collect();
        let refs: Vec<&ArrayRef> = arrays.iter().collect();
        let keys = (0..n)
            .map(|row| self.key.values_at(&refs, row))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| user_error(format!("sampling the key of '{}': {e}", self.table)))?;
        Ok(sampled_ranges(&keys, self.splits as usize))
    }

    fn reader(
        &self,
        name: &str,
        split: &Split,
        cursor: Option<&Cursor>,
    ) -> Result<Box<dyn SplitReader>> {
        let range = self.range_of(&split.id).ok_or_else(|| {
            Error::Corrupt(format!("'{}' is not a split of this source", split.id))
        })?;
        let after = match cursor.and_then(|c| c.get("after")) {
            None => None,
            Some(value) => Some(self.key.cursor_from_json(value).ok_or_else(|| {
                Error::Corrupt(format!(
                    "cursor {value} of split '{}' is not a key of ({})",
                    split.id,
                    self.key.names.join(", ")
                ))
            })?),
        };
        let columns = self
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Box::new(PostgresReader {
            source: self.clone(),
            options: session(&self.options, name, self.timeouts, true),
            connection: None,
            select_head: format!(
                "SELECT {columns} FROM {table} WHERE",
                table = quote_table(&self.table),
            ),
            select_tail: format!(
                "{filter} ORDER BY {order} LIMIT {limit}",
                filter = self.where_filter(),
                order = self.key.order_by(),
                limit = self.batch_rows,
            ),
            range,
            after,
            done: false,
        }))
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

    /// Connections in the pool that plans the reads (row estimate, key range,
    /// sample; default 8). Each reading subtask has a connection of its own.
    pub fn connections(mut self, connections: u32) -> Self {
        if connections == 0 {
            self.refused
                .push("connections is 0: reading needs at least one connection");
        }
        self.connections = connections.max(1);
        self
    }

    /// `statement_timeout` and `lock_timeout` of every query (default
    /// [`Timeouts::default`]: 10 min and 1 min).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
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
        let options = parse_url(&self.url, "the source")?;
        probe(&options, "the source").await?;
        let pool = PgPoolOptions::new()
            .max_connections(self.connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(session(&options, "tidewater/plan", self.timeouts, true))
            .await
            .map_err(|e| {
                db_error(
                    &format!("connecting to the source ({})", redact(&self.url)),
                    e,
                )
            })?;
        let all = describe(&pool, &self.table).await?;
        let mut kinds = Vec::with_capacity(self.key.len());
        let mut key_columns = Vec::with_capacity(self.key.len());
        for name in &self.key {
            let column = all.iter().find(|c| &c.name == name).ok_or_else(|| {
                user_error(format!(
                    "table '{}' has no key column '{name}' (columns: {})",
                    self.table,
                    names(&all)
                ))
            })?;
            kinds.push(KeyKind::of(column).map_err(user_error)?);
            if column.nullable {
                return Err(user_error(format!(
                    "key column '{name}' of '{}' may be NULL: reading in key order would skip \
                     rows whose key is NULL; make it NOT NULL, or key by other columns",
                    self.table
                )));
            }
            key_columns.push(column.clone());
        }
        if !has_unique_index(&pool, &self.table, &self.key, false).await? {
            return Err(user_error(format!(
                "no primary key or unique index of '{}' is on ({}) or a part of it: reading in \
                 key order needs a unique key, or rows that share a key at a batch boundary are \
                 skipped or read twice; key by the primary key, or add a unique index on these \
                 columns",
                self.table,
                self.key.join(", ")
            )));
        }
        let mut columns = match &self.columns {
            None => all.clone(),
            Some(wanted) => wanted
                .iter()
                .map(|name| {
                    all.iter()
                        .find(|c| &c.name == name)
                        .cloned()
                        .ok_or_else(|| {
                            user_error(format!(
                                "table '{}' has no column '{name}' (columns: {})",
                                self.table,
                                names(&all)
                            ))
                        })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        for (i, column) in key_columns.iter().enumerate() {
            if !columns.iter().any(|c| c.name == column.name) {
                columns.insert(i.min(columns.len()), column.clone());
            }
        }
        let mut fields = Vec::with_capacity(columns.len());
        for column in &columns {
            // Fails on an unsupported type, naming the column.
            ColumnBuilder::new(column, 0)?;
            let data_type = column.arrow.clone().unwrap_or(DataType::Null);
            fields.push(Field::new(&column.name, data_type, column.nullable));
        }
        let key_indexes = self
            .key
            .iter()
            .map(|k| {
                columns
                    .iter()
                    .position(|c| &c.name == k)
                    .expect("added above")
            })
            .collect();
        Ok(PostgresSource {
            pool,
            options: Arc::new(options),
            timeouts: self.timeouts,
            table: self.table,
            key: Key {
                names: self.key,
                kinds,
            },
            columns,
            key_indexes,
            filter: self.filter,
            splits: self.splits,
            batch_rows: self.batch_rows,
            schema: Arc::new(Schema::new(fields)),
        })
    }
}

fn names(columns: &[PgColumn]) -> String {
    columns
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
        self.warn_if_scattered().await;
        let rows = self.estimated_rows().await?;
        let ranges = if self.key.is_one_integer() {
            self.integer_splits().await?
        } else {
            self.sampled_splits(rows).await?
        };
        let estimate = rows / ranges.len().max(1) as u64;
        Ok(ranges.iter().map(|r| self.split(r, estimate)).collect())
    }

    async fn resume_splits(&self, checkpointed: &[String]) -> Result<Option<Vec<Split>>> {
        let estimate = self.estimated_rows().await? / checkpointed.len().max(1) as u64;
        let splits = checkpointed
            .iter()
            .map(|id| {
                self.range_of(id)
                    .map(|range| self.split(&range, estimate))
                    .ok_or_else(|| Error::IncompatibleState {
                        uid: self.table.clone(),
                        checkpoint: Default::default(),
                        detail: format!(
                            "checkpointed split '{id}' is not a range of {} by ({}): was the \
                             table or key changed?",
                            self.table,
                            self.key.names.join(", ")
                        ),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(splits))
    }

    async fn open(&self, split: &Split, cursor: Option<&Cursor>) -> Result<Box<dyn SplitReader>> {
        self.reader("tidewater", split, cursor)
    }

    async fn open_for(
        &self,
        task: &TaskContext,
        split: &Split,
        cursor: Option<&Cursor>,
    ) -> Result<Box<dyn SplitReader>> {
        self.reader(&application_name(task), split, cursor)
    }
}

/// Runs a `COPY ... TO STDOUT` and returns the whole payload. A connection
/// cut mid-COPY can end the stream without an error: without its trailer
/// the payload is incomplete, and reading again is safe.
async fn copy_out(
    conn: &mut PgConnection,
    statement: &str,
) -> std::result::Result<BytesMut, sqlx::Error> {
    let mut stream = conn.copy_out_raw(statement).await?;
    let mut payload = BytesMut::new();
    while let Some(chunk) = stream.try_next().await? {
        payload.extend_from_slice(&chunk);
    }
    if !payload.ends_with(&COPY_TRAILER) {
        return Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the COPY stream ended before its trailer",
        )));
    }
    Ok(payload)
}

struct PostgresReader {
    source: PostgresSource,
    /// This reader's connection settings (its name, timeouts, read-only).
    options: PgConnectOptions,
    connection: Option<PgConnection>,
    /// `SELECT cols FROM table WHERE`.
    select_head: String,
    /// After the key condition: `[AND (filter)] ORDER BY key LIMIT n`.
    select_tail: String,
    range: KeyRange,
    after: Option<Vec<KeyValue>>,
    done: bool,
}

impl PostgresReader {
    /// The next batch as one binary COPY payload. COPY takes no bind
    /// parameters: the key bounds are literals the server parses as the
    /// columns' types (see [`KeyKind::literal`]).
    async fn fetch(&mut self, statement: &str) -> std::result::Result<BytesMut, sqlx::Error> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self
                .connection
                .insert(PgConnection::connect_with(&self.options).await?),
        };
        let result = copy_out(connection, statement).await;
        if result.is_err() {
            // Whatever state the connection is in, the next read starts afresh.
            self.connection = None;
        }
        result
    }
}

#[async_trait]
impl SplitReader for PostgresReader {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.done {
            return Ok(None);
        }
        let predicate = self
            .source
            .key
            .predicate(&self.range, self.after.as_deref())
            .map_err(|e| user_error(format!("reading '{}': {e}", self.source.table)))?;
        let statement = format!(
            "COPY ({} {predicate}{}) TO STDOUT (FORMAT binary)",
            self.select_head, self.select_tail
        );
        let mut attempt = 0;
        let payload = loop {
            match self.fetch(&statement).await {
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
        let keys: Vec<&ArrayRef> = self
            .source
            .key_indexes
            .iter()
            .map(|&i| &arrays[i])
            .collect();
        let last = self
            .source
            .key
            .values_at(&keys, rows - 1)
            .map_err(|e| user_error(format!("reading '{}': {e}", self.source.table)))?;
        if self.after.as_ref() == Some(&last) {
            // The server read the cursor's literal as something before it:
            // reading on would return this batch forever.
            return Err(Error::Internal(format!(
                "reading '{}' does not advance past key {}: the server reads its literal as an \
                 earlier key; please report this with the key's column types",
                self.source.table,
                self.source.key.cursor_json(&last)
            )));
        }
        self.after = Some(last);
        Ok(Some(RecordBatch::try_new(
            self.source.schema.clone(),
            arrays,
        )?))
    }

    fn cursor(&self) -> Cursor {
        match &self.after {
            Some(after) => json!({ "after": self.source.key.cursor_json(after) }),
            None => json!({}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_scattered;

    #[test]
    fn only_rows_stored_far_from_the_key_order_are_scattered() {
        for (correlation, scattered) in [
            (1.0, false),
            (-1.0, false),
            (0.5, false),
            (-0.5, false),
            (0.49, true),
            (-0.2, true),
            (0.0, true),
        ] {
            assert_eq!(is_scattered(correlation), scattered, "{correlation}");
        }
    }
}
