//! `PostgresSink`: idempotent upserts, or exactly-once writes committed with
//! the checkpoint through prepared transactions.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};
use tidewater_core::events::{
    ConnectionRetried, InternalEvent, PreparedCommitted, PreparedRolledBack, RowDeadLettered,
};
use tidewater_core::{
    CheckpointId, CommitHandle, Epoch, Error, Result, Sink, SinkWriter, TaskContext, row_json,
};

use crate::connect::{Timeouts, application_name, parse_url, probe, session};
use crate::errors::{
    constraint_of, db_error, is_connection_error, is_row_error, is_undefined_object, user_error,
};
use crate::schema::{PgColumn, describe, has_unique_index, primary_key, quote_ident, quote_table};
use crate::source::redact;
use crate::{copy, encode};

/// How the sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// `INSERT ... ON CONFLICT (primary key) DO UPDATE`, committed per batch.
    /// Replays after a restore rewrite identical rows: the result is exact
    /// for deterministic pipelines. Needs a primary key.
    Upsert,
    /// All rows of a checkpoint interval in one transaction, prepared on the
    /// barrier (`PREPARE TRANSACTION`) and committed when the checkpoint
    /// completes, with a row in `tidewater_commits`. Needs
    /// `max_prepared_transactions > 0` on the server.
    ExactlyOnce,
}

/// Bookkeeping tables, created when missing.
const BOOKKEEPING: &str = "
CREATE TABLE IF NOT EXISTS tidewater_commits (
    job text NOT NULL, sink text NOT NULL, subtask int NOT NULL, checkpoint bigint NOT NULL,
    epoch bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, sink, subtask, checkpoint));
CREATE TABLE IF NOT EXISTS tidewater_dead_letters (
    job text NOT NULL, sink text NOT NULL, subtask int NOT NULL, target text NOT NULL,
    row jsonb NOT NULL, error text NOT NULL, at timestamptz NOT NULL DEFAULT now())";

/// The advisory lock under which sinks create their tables.
const CREATE_LOCK: i64 = 0x7469_6465_7369_6e6b; // "tidesink"

/// How long a process creating tables may sit idle inside its transaction
/// before the server ends it, releasing the lock.
const CREATE_IDLE_LIMIT: &str = "15s";

/// How often the creation is tried when the server ends its session
/// (a process that woke after the idle limit finds its session gone).
const CREATE_ATTEMPTS: u32 = 3;

/// Runs the sink's own `create` statement, if any, then creates the
/// bookkeeping tables when missing: in one transaction, one process at a
/// time. `CREATE TABLE IF NOT EXISTS` is not safe against itself: two
/// sessions can both find the table missing, and the second fails on the
/// catalog's unique index (so jobs started together on a new database
/// failed). The lock is transaction-scoped so that a process paused here
/// (SIGSTOP, a frozen VM) is ended by the server after
/// [`CREATE_IDLE_LIMIT`] instead of holding every other sink's open until
/// it wakes; once woken, it creates them again on a new connection.
async fn create_tables(pool: &PgPool, create: Option<&str>) -> Result<()> {
    let mut attempt = 1;
    loop {
        match create_tables_once(pool, create).await {
            // Ended by the server (this process paused past the idle limit,
            // say): nothing was created, so it is done again on a new
            // connection.
            Err((_, e)) if attempt < CREATE_ATTEMPTS && is_connection_error(&e) => attempt += 1,
            result => return result.map_err(|(what, e)| db_error(what, e)),
        }
    }
}

/// One attempt of [`create_tables`]; a failure names its step.
async fn create_tables_once(
    pool: &PgPool,
    create: Option<&str>,
) -> std::result::Result<(), (&'static str, sqlx::Error)> {
    let locking = |e| ("locking out other sinks while creating tables", e);
    let mut tx = pool.begin().await.map_err(locking)?;
    let limit = format!("SET LOCAL idle_in_transaction_session_timeout = '{CREATE_IDLE_LIMIT}'");
    sqlx::query(AssertSqlSafe(limit))
        .execute(&mut *tx)
        .await
        .map_err(locking)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(CREATE_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(locking)?;
    if let Some(create) = create {
        sqlx::raw_sql(AssertSqlSafe(create.to_string()))
            .execute(&mut *tx)
            .await
            .map_err(|e| ("creating the target table", e))?;
    }
    sqlx::raw_sql(BOOKKEEPING)
        .execute(&mut *tx)
        .await
        .map_err(|e| ("creating tidewater_commits and tidewater_dead_letters", e))?;
    tx.commit()
        .await
        .map_err(|e| ("committing the created tables", e))
}

/// Writes record batches into a PostgreSQL table.
///
/// Rows the table refuses (a constraint, a bad value) fail the job with the
/// row and the constraint named, or, within a budget set by
/// [`max_bad_rows`](PostgresSinkBuilder::max_bad_rows), go to
/// `tidewater_dead_letters` with their error (in exactly-once mode, in the
/// same transaction as the checkpoint's rows).
#[derive(Debug, Clone)]
pub struct PostgresSink {
    pool: PgPool,
    /// Boxed: the options are large, and every reader clones the source.
    options: Arc<PgConnectOptions>,
    timeouts: Timeouts,
    table: String,
    mode: SinkMode,
    columns: Vec<PgColumn>,
    key: Vec<String>,
    max_bad_rows: u64,
}

/// Configures a [`PostgresSink`].
#[derive(Debug, Clone)]
pub struct PostgresSinkBuilder {
    url: String,
    table: String,
    mode: SinkMode,
    create: Option<String>,
    max_bad_rows: u64,
    key: Option<Vec<String>>,
    timeouts: Timeouts,
}

impl PostgresSink {
    /// Writes into `table` at `url`.
    pub fn builder(url: &str, table: &str, mode: SinkMode) -> PostgresSinkBuilder {
        PostgresSinkBuilder {
            url: url.to_string(),
            table: table.to_string(),
            mode,
            create: None,
            max_bad_rows: 0,
            key: None,
            timeouts: Timeouts::default(),
        }
    }

    /// The prepared transaction of a writer's checkpoint: per epoch, so
    /// that a paused worker that wakes and prepares the same checkpoint as
    /// its successor never takes its name.
    fn gid(job: &str, uid: &str, subtask: usize, checkpoint: CheckpointId, epoch: Epoch) -> String {
        format!("tw:{job}:{uid}:{subtask}:{}:e{}", checkpoint.0, epoch.0)
    }

    /// The prepared transactions of sink `uid` of `job` (of any epoch).
    async fn prepared(&self, job: &str, uid: &str) -> Result<Vec<String>> {
        let prefix = format!("tw:{job}:{uid}:");
        let gids: Vec<(String,)> = sqlx::query_as(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)",
        )
        .bind(&prefix)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("listing prepared transactions", e))?;
        Ok(gids.into_iter().map(|(gid,)| gid).collect())
    }

    /// Rolls back the prepared transactions among `gids` that `which` picks.
    async fn roll_back(&self, gids: Vec<String>, which: impl Fn(&str) -> bool) -> Result<()> {
        for gid in gids.into_iter().filter(|g| which(g)) {
            PreparedRolledBack { gid: &gid }.emit();
            let sql = format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''"));
            if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&self.pool).await {
                // Another process may have resolved it meanwhile.
                if !is_undefined_object(&e) {
                    return Err(db_error(&format!("ROLLBACK PREPARED '{gid}'"), e));
                }
            }
        }
        Ok(())
    }
}

impl PostgresSinkBuilder {
    /// Runs this statement first (e.g. `CREATE TABLE IF NOT EXISTS ...`),
    /// inside a transaction that sinks opening at the same time take in
    /// turn, so several jobs may create the same table. A statement
    /// PostgreSQL refuses inside a transaction block (`CREATE INDEX
    /// CONCURRENTLY`) must be run before the job instead.
    pub fn create_if_missing(mut self, statement: &str) -> Self {
        self.create = Some(statement.to_string());
        self
    }

    /// Rows that may go to the dead-letter table before the job fails (default 0).
    pub fn max_bad_rows(mut self, rows: u64) -> Self {
        self.max_bad_rows = rows;
        self
    }

    /// The columns that say which rows are the same in upsert mode (`ON
    /// CONFLICT (key)`). Default: the primary key. A unique index must be on
    /// exactly these columns.
    pub fn key<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    /// `statement_timeout` and `lock_timeout` of every write (default
    /// [`Timeouts::default`]: 10 min and 1 min).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Connects, creates what is missing, and reads the table's columns and key.
    pub async fn build(self) -> Result<PostgresSink> {
        let options = parse_url(&self.url, "the sink")?;
        probe(&options, "the sink").await?;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(session(&options, "tidewater/plan", self.timeouts, false))
            .await
            .map_err(|e| {
                db_error(
                    &format!("connecting to the sink ({})", redact(&self.url)),
                    e,
                )
            })?;
        create_tables(&pool, self.create.as_deref()).await?;
        let columns = describe(&pool, &self.table).await?;
        let key = match self.key {
            None => primary_key(&pool, &self.table).await?,
            Some(key) => {
                if let Some(missing) = key.iter().find(|k| !columns.iter().any(|c| &&c.name == k)) {
                    return Err(user_error(format!(
                        "the sink's key column '{missing}' is not a column of '{}'",
                        self.table
                    )));
                }
                if !has_unique_index(&pool, &self.table, &key, true).await? {
                    return Err(user_error(format!(
                        "no primary key or unique index of '{}' is on exactly ({}): upsert \
                         mode's ON CONFLICT needs one; add a unique index on these columns, \
                         or leave `key` out to use the primary key",
                        self.table,
                        key.join(", ")
                    )));
                }
                key
            }
        };
        if self.mode == SinkMode::Upsert && key.is_empty() {
            return Err(user_error(format!(
                "upsert mode needs a primary key on '{}' to know which rows are the same; \
                 add one, or use exactly-once mode",
                self.table
            )));
        }
        if self.mode == SinkMode::ExactlyOnce {
            let (max,): (String,) = sqlx::query_as("SHOW max_prepared_transactions")
                .fetch_one(&pool)
                .await
                .map_err(|e| db_error("reading max_prepared_transactions", e))?;
            if max.trim() == "0" {
                return Err(user_error(
                    "exactly-once mode uses PREPARE TRANSACTION, which this server disables \
                     (max_prepared_transactions = 0): set it above the sink's parallelism and \
                     restart the server, or use upsert mode"
                        .into(),
                ));
            }
        }
        Ok(PostgresSink {
            pool,
            options: Arc::new(options),
            timeouts: self.timeouts,
            table: self.table,
            mode: self.mode,
            columns,
            key,
            max_bad_rows: self.max_bad_rows,
        })
    }
}

#[async_trait]
impl Sink for PostgresSink {
    fn kind(&self) -> &str {
        match self.mode {
            SinkMode::Upsert => "postgres-upsert",
            SinkMode::ExactlyOnce => "postgres-exactly-once",
        }
    }

    async fn open_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(PostgresWriter {
            sink: self.clone(),
            ctx: ctx.clone(),
            insert: None,
            copy: None,
            connection: None,
            in_transaction: false,
            bad_rows: 0,
            pending: Vec::new(),
            pending_rows: 0,
        }))
    }

    async fn commit(&self, handle: &CommitHandle) -> Result<()> {
        let Some(gid) = handle.payload.get("gid").and_then(Value::as_str) else {
            return Ok(()); // upsert mode: nothing to commit
        };
        let sql = format!("COMMIT PREPARED '{}'", gid.replace('\'', "''"));
        match sqlx::raw_sql(AssertSqlSafe(sql)).execute(&self.pool).await {
            Ok(_) => {
                PreparedCommitted { gid }.emit();
                Ok(())
            }
            Err(e) if is_undefined_object(&e) => {
                // No such prepared transaction: committed before, or lost.
                let job = handle
                    .payload
                    .get("job")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let (done,): (bool,) = sqlx::query_as(
                    "SELECT EXISTS (SELECT 1 FROM tidewater_commits \
                     WHERE job = $1 AND sink = $2 AND subtask = $3 AND checkpoint = $4)",
                )
                .bind(job)
                .bind(&handle.uid)
                .bind(handle.subtask as i32)
                .bind(handle.checkpoint.0 as i64)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| db_error("checking tidewater_commits", e))?;
                if done {
                    Ok(())
                } else {
                    Err(Error::Corrupt(format!(
                        "prepared transaction '{gid}' of checkpoint {} is gone and was never \
                         committed (rolled back by hand?): its rows are not in '{}'",
                        handle.checkpoint, self.table
                    )))
                }
            }
            Err(e) => Err(db_error(&format!("COMMIT PREPARED '{gid}'"), e)),
        }
    }

    async fn abort_uncommitted(&self, job: &str, uid: &str) -> Result<()> {
        if self.mode != SinkMode::ExactlyOnce {
            return Ok(());
        }
        let gids = self.prepared(job, uid).await?;
        self.roll_back(gids, |_| true).await
    }

    async fn abort_epoch(&self, job: &str, uid: &str, epoch: Epoch) -> Result<()> {
        if self.mode != SinkMode::ExactlyOnce {
            return Ok(());
        }
        let gids = self.prepared(job, uid).await?;
        self.roll_back(gids, |gid| gid_epoch(gid) == Some(epoch.0))
            .await
    }
}

/// How often an upsert is tried again after a dropped connection.
const WRITE_RETRIES: u32 = 5;

/// Rows an exactly-once writer gathers before it loads them with one COPY:
/// each COPY costs round trips and a statement start, so 8k-row batches
/// (the generator's, a filter's output) loaded one by one ran at about half
/// the rate of 50k-row ones (docs/benchmarks.md).
const COPY_ROWS: usize = 50_000;

/// How long a writer's transaction waits for a row lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// PostgreSQL's `lock_not_available`: `lock_timeout` ran out.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The epoch in a prepared transaction's name (`None` for names from
/// before epochs were part of them).
fn gid_epoch(gid: &str) -> Option<u64> {
    gid.rsplit_once(":e")?.1.parse().ok()
}

struct PostgresWriter {
    sink: PostgresSink,
    ctx: TaskContext,
    /// The insert statement, built for the first batch's columns.
    insert: Option<String>,
    /// In exactly-once mode, the binary COPY statement that loads a batch
    /// faster than the insert, when every column's type allows it.
    copy: Option<Arc<(String, Vec<String>)>>,
    connection: Option<PgConnection>,
    in_transaction: bool,
    bad_rows: u64,
    /// Exactly-once batches not yet loaded (fewer than [`COPY_ROWS`] rows).
    pending: Vec<RecordBatch>,
    pending_rows: usize,
}

impl PostgresWriter {
    /// The table's column for each of `batch`'s columns, matched by name.
    fn table_columns(&self, batch: &RecordBatch) -> Result<Vec<&PgColumn>> {
        let sink = &self.sink;
        batch
            .schema()
            .fields()
            .iter()
            .map(|field| {
                sink.columns
                    .iter()
                    .find(|c| &c.name == field.name())
                    .ok_or_else(|| {
                        user_error(format!(
                            "the stream has a column '{}' that table '{}' lacks (table columns: {})",
                            field.name(),
                            sink.table,
                            sink.columns
                                .iter()
                                .map(|c| c.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })
            })
            .collect()
    }

    fn build_insert(&self, batch: &RecordBatch, columns: &[&PgColumn]) -> Result<String> {
        let sink = &self.sink;
        let mut names = Vec::new();
        let mut selects = Vec::new();
        let mut params = Vec::new();
        for (i, (field, column)) in batch.schema().fields().iter().zip(columns).enumerate() {
            let name = quote_ident(&column.name);
            params.push(format!(
                "${}::{}",
                i + 1,
                encode::array_type(field.data_type())?
            ));
            selects.push(format!("u.{name}::{}", column.sql_type));
            names.push(name);
        }
        let mut sql = format!(
            "INSERT INTO {table} ({cols}) SELECT {selects} FROM UNNEST({params}) AS u({cols})",
            table = quote_table(&sink.table),
            cols = names.join(", "),
            selects = selects.join(", "),
            params = params.join(", ")
        );
        if sink.mode == SinkMode::Upsert {
            let key: Vec<String> = sink.key.iter().map(|k| quote_ident(k)).collect();
            let updates: Vec<String> = names
                .iter()
                .filter(|n| !key.contains(n))
                .map(|n| format!("{n} = EXCLUDED.{n}"))
                .collect();
            sql.push_str(&format!(" ON CONFLICT ({}) DO ", key.join(", ")));
            if updates.is_empty() {
                sql.push_str("NOTHING");
            } else {
                sql.push_str(&format!("UPDATE SET {}", updates.join(", ")));
            }
        }
        Ok(sql)
    }

    /// After a lock wait ran out (the transaction is gone): rolls back the
    /// older epochs' prepared transactions of this sink, which nothing will
    /// commit (this run restored past them) and which may hold the lock;
    /// the error restarts the job from its last checkpoint.
    async fn lock_waited(&mut self, table: &str) -> Error {
        let (job, uid, mine) = (
            self.ctx.job.to_string(),
            self.ctx.uid.to_string(),
            self.ctx.epoch.0,
        );
        let older = |gid: &str| gid_epoch(gid).is_none_or(|e| e < mine);
        let cleared = match self.sink.prepared(&job, &uid).await {
            Ok(gids) => {
                let n = gids.iter().filter(|g| older(g)).count();
                match self.sink.roll_back(gids, older).await {
                    Ok(()) => n,
                    Err(e) => return e,
                }
            }
            Err(e) => return e,
        };
        let holder = if cleared > 0 {
            format!(
                "{cleared} prepared transaction(s) of an older run (a worker that was paused and \
                 woke after this run took over), now rolled back"
            )
        } else {
            "another session".to_string()
        };
        Error::External {
            message: format!(
                "PostgreSQL: a row lock in '{table}' was held for more than {}s by {holder}; \
                 the job restarts from its last checkpoint",
                LOCK_WAIT.as_secs()
            ),
            retryable: true,
        }
    }

    /// The fencing error of this writer, naming the newest epoch in
    /// `tidewater_commits` (or any error reading it).
    async fn fenced_by_newer(&mut self, job: &str, uid: &str, epoch: i64) -> Error {
        let newer: Result<Option<i64>> = async {
            sqlx::query_scalar(
                "SELECT max(epoch) FROM tidewater_commits WHERE job = $1 AND sink = $2",
            )
            .bind(job)
            .bind(uid)
            .fetch_one(&mut *self.connection().await?)
            .await
            .map_err(|e| db_error("reading the newest epoch in tidewater_commits", e))
        }
        .await;
        match newer {
            Ok(newer) => Error::Fenced {
                job: job.to_string(),
                mine: self.ctx.epoch,
                newer: Epoch(newer.map_or(epoch + 1, |n| n.max(epoch + 1)) as u64),
            },
            Err(e) => e,
        }
    }

    async fn connection(&mut self) -> Result<&mut PgConnection> {
        if self.connection.is_none() {
            let options = session(
                &self.sink.options,
                &application_name(&self.ctx),
                self.sink.timeouts,
                false,
            );
            let connection = PgConnection::connect_with(&options)
                .await
                .map_err(|e| db_error("connecting the sink writer", e))?;
            self.connection = Some(connection);
        }
        Ok(self.connection.as_mut().expect("connected above"))
    }

    async fn run(&mut self, sql: &str) -> Result<()> {
        let connection = self.connection().await?;
        if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
            .execute(&mut *connection)
            .await
        {
            self.connection = None;
            self.in_transaction = false;
            return Err(db_error(sql, e));
        }
        Ok(())
    }

    /// Runs the insert for `batch` on the writer's connection.
    async fn insert(&mut self, batch: &RecordBatch) -> std::result::Result<(), sqlx::Error> {
        let sql = self.insert.clone().unwrap_or_default();
        let connection = match self.connection().await {
            Ok(c) => c,
            Err(_) => return Err(sqlx::Error::PoolClosed),
        };
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for column in batch.columns() {
            query =
                encode::bind(query, column).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        }
        query.execute(&mut *connection).await.map(|_| ())
    }

    /// Writes the rows one by one, sending refused ones to the dead-letter table.
    async fn insert_row_by_row(&mut self, batch: &RecordBatch) -> Result<()> {
        let transactional = self.sink.mode == SinkMode::ExactlyOnce;
        for row in 0..batch.num_rows() {
            let one = batch.slice(row, 1);
            if transactional {
                self.run("SAVEPOINT tw_row").await?;
            }
            match self.insert(&one).await {
                Ok(()) => {
                    if transactional {
                        self.run("RELEASE SAVEPOINT tw_row").await?;
                    }
                }
                Err(e) if is_row_error(&e) => {
                    if transactional {
                        self.run("ROLLBACK TO SAVEPOINT tw_row").await?;
                    }
                    self.dead_letter(&one, &e).await?;
                }
                Err(e) => {
                    self.connection = None;
                    return Err(db_error("writing a row", e));
                }
            }
        }
        Ok(())
    }

    async fn dead_letter(&mut self, row: &RecordBatch, error: &sqlx::Error) -> Result<()> {
        self.bad_rows += 1;
        let row_value = row_json(row, 0);
        let detail = error
            .as_database_error()
            .map(|d| d.message().to_string())
            .unwrap_or_else(|| error.to_string());
        if self.bad_rows > self.sink.max_bad_rows {
            return Err(Error::BadInput(format!(
                "table '{}' refused row {row_value}: {} ({detail}); {} bad rows exceed the \
                 budget of {} (raise max_bad_rows to send such rows to tidewater_dead_letters)",
                self.sink.table,
                constraint_of(error),
                self.bad_rows,
                self.sink.max_bad_rows
            )));
        }
        RowDeadLettered {
            job: &self.ctx.job,
            uid: &self.ctx.uid,
            subtask: self.ctx.subtask,
            target: "tidewater_dead_letters",
            row: &row_value.to_string(),
            reason: &detail.to_string(),
        }
        .emit();
        let (job, uid, subtask, table) = (
            self.ctx.job.to_string(),
            self.ctx.uid.to_string(),
            self.ctx.subtask as i32,
            self.sink.table.clone(),
        );
        let connection = self.connection().await?;
        sqlx::query(
            "INSERT INTO tidewater_dead_letters (job, sink, subtask, target, row, error) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(job)
        .bind(uid)
        .bind(subtask)
        .bind(table)
        .bind(row_value)
        .bind(format!("{}: {detail}", constraint_of(error)))
        .execute(&mut *connection)
        .await
        .map_err(|e| db_error("writing to tidewater_dead_letters", e))?;
        Ok(())
    }

    fn refused(&self, batch: &RecordBatch, error: &sqlx::Error) -> Error {
        let detail = error
            .as_database_error()
            .map(|d| d.message().to_string())
            .unwrap_or_default();
        let pg_detail = error
            .as_database_error()
            .and_then(|d| d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
            .and_then(|d| d.detail().map(str::to_string))
            .unwrap_or_default();
        Error::BadInput(format!(
            "table '{}' refused a row of a {}-row batch: {} ({detail}; {pg_detail}); first row of \
             the batch: {}. Set max_bad_rows to send such rows to tidewater_dead_letters",
            self.sink.table,
            batch.num_rows(),
            constraint_of(error),
            row_json(batch, 0)
        ))
    }

    async fn write_upsert(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.insert(batch).await {
                Ok(()) => return Ok(()),
                // Upserts are idempotent: after a dropped connection, write again.
                Err(e) if is_connection_error(&e) && attempt < WRITE_RETRIES => {
                    attempt += 1;
                    self.connection = None;
                    let backoff = Duration::from_millis(100 * 2u64.pow(attempt));
                    ConnectionRetried {
                        what: "postgres sink",
                        target: &self.sink.table,
                        attempt,
                        of: WRITE_RETRIES,
                        backoff,
                        error: &e.to_string(),
                    }
                    .emit();
                    tokio::time::sleep(backoff).await;
                }
                Err(e) if is_row_error(&e) && self.sink.max_bad_rows > 0 => {
                    return self.insert_row_by_row(batch).await;
                }
                Err(e) if is_row_error(&e) => return Err(self.refused(batch, &e)),
                Err(e) => {
                    self.connection = None;
                    return Err(db_error(&format!("writing into '{}'", self.sink.table), e));
                }
            }
        }
    }

    /// The COPY statement for `batch`'s columns, when binary COPY can load them.
    /// With it, each column's type name (`udt`), which the encoding follows;
    /// shared, since every load of the writer uses it.
    fn build_copy(
        &self,
        batch: &RecordBatch,
        columns: &[&PgColumn],
    ) -> Option<Arc<(String, Vec<String>)>> {
        if !copy::all_copyable(batch, columns) {
            return None;
        }
        let names: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
        let statement = format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            quote_table(&self.sink.table),
            names.join(", ")
        );
        Some(Arc::new((
            statement,
            columns.iter().map(|c| c.udt.clone()).collect(),
        )))
    }

    /// Loads `batch` inside the open transaction: binary COPY where it can,
    /// the insert otherwise. Both are plain inserts.
    async fn load(&mut self, batch: &RecordBatch) -> std::result::Result<(), sqlx::Error> {
        let Some(plan) = self.copy.clone() else {
            return self.insert(batch).await;
        };
        let (statement, udts) = &*plan;
        let Ok(payload) = copy::encode(batch, udts) else {
            // A value binary COPY cannot carry (out of PostgreSQL's range):
            // the insert sends it for the server to refuse by row, which the
            // dead-letter budget handles like any other bad row.
            return self.insert(batch).await;
        };
        let connection = match self.connection().await {
            Ok(c) => c,
            Err(_) => return Err(sqlx::Error::PoolClosed),
        };
        let mut copy_in = connection.copy_in_raw(statement).await?;
        if let Err(e) = copy_in.send(payload).await {
            // The server already refused it; abort reads that refusal back.
            return Err(match copy_in.abort("tidewater: send failed").await {
                Err(refusal) => refusal,
                Ok(()) => e,
            });
        }
        copy_in.finish().await.map(|_| ())
    }

    /// Loads the gathered batches into the checkpoint's transaction as one.
    async fn load_pending(&mut self) -> Result<()> {
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let Some(first) = batches.first() else {
            return Ok(());
        };
        let batch = if batches.len() == 1 {
            first.clone()
        } else {
            arrow::compute::concat_batches(&first.schema(), &batches)?
        };
        self.write_transactional(&batch).await
    }

    async fn write_transactional(&mut self, batch: &RecordBatch) -> Result<()> {
        if !self.in_transaction {
            // A row lock held by an older run's prepared transaction (a
            // worker that was paused and woke after this run restored)
            // would be waited on for ever: wait a while (or the shorter
            // `lock_timeout` asked for), then clear it.
            self.run(&format!(
                "BEGIN; SET LOCAL lock_timeout = '{}ms'",
                LOCK_WAIT.min(self.sink.timeouts.lock).as_millis().max(1)
            ))
            .await?;
            self.in_transaction = true;
        }
        let budget = self.sink.max_bad_rows > 0;
        if budget {
            self.run("SAVEPOINT tw_batch").await?;
        }
        match self.load(batch).await {
            Ok(()) if budget => self.run("RELEASE SAVEPOINT tw_batch").await,
            Ok(()) => Ok(()),
            Err(e) if is_row_error(&e) && budget => {
                self.run("ROLLBACK TO SAVEPOINT tw_batch").await?;
                self.insert_row_by_row(batch).await
            }
            Err(e) => {
                // The transaction is lost with the connection or the error: the job
                // fails and resumes from the last checkpoint, which had none of it.
                let refused = is_row_error(&e).then(|| self.refused(batch, &e));
                self.connection = None;
                self.in_transaction = false;
                let code = e.as_database_error().and_then(|d| d.code());
                if code.as_deref() == Some(LOCK_NOT_AVAILABLE) {
                    let table = self.sink.table.clone();
                    return Err(self.lock_waited(&table).await);
                }
                Err(refused
                    .unwrap_or_else(|| db_error(&format!("writing into '{}'", self.sink.table), e)))
            }
        }
    }
}

#[async_trait]
impl SinkWriter for PostgresWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.insert.is_none() {
            let columns = self.table_columns(&batch)?;
            let insert = self.build_insert(&batch, &columns)?;
            let copy = match self.sink.mode {
                SinkMode::ExactlyOnce => self.build_copy(&batch, &columns),
                SinkMode::Upsert => None,
            };
            self.insert = Some(insert);
            self.copy = copy;
        }
        match self.sink.mode {
            SinkMode::Upsert => self.write_upsert(&batch).await,
            SinkMode::ExactlyOnce => {
                self.pending_rows += batch.num_rows();
                self.pending.push(batch);
                if self.pending_rows >= COPY_ROWS {
                    self.load_pending().await?;
                }
                Ok(())
            }
        }
    }

    async fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<Option<Value>> {
        if self.sink.mode == SinkMode::ExactlyOnce {
            self.load_pending().await?;
        }
        if self.sink.mode != SinkMode::ExactlyOnce || !self.in_transaction {
            return Ok(None);
        }
        let (job, uid, subtask, epoch) = (
            self.ctx.job.to_string(),
            self.ctx.uid.to_string(),
            self.ctx.subtask,
            self.ctx.epoch.0 as i64,
        );
        // The commit row carries the epoch; a newer epoch's row fences this writer off.
        let connection = self.connection().await?;
        let recorded = sqlx::query(
            "INSERT INTO tidewater_commits (job, sink, subtask, checkpoint, epoch) \
             SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM tidewater_commits \
             WHERE job = $1 AND sink = $2 AND epoch > $5)",
        )
        .bind(&job)
        .bind(&uid)
        .bind(subtask as i32)
        .bind(checkpoint.0 as i64)
        .bind(epoch)
        .execute(&mut *connection)
        .await;
        match recorded {
            Ok(done) if done.rows_affected() == 1 => {}
            Ok(_) => {
                self.run("ROLLBACK").await?;
                self.in_transaction = false;
                return Err(self.fenced_by_newer(&job, &uid, epoch).await);
            }
            Err(e) => {
                self.connection = None;
                self.in_transaction = false;
                let code = e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .map(|c| c.to_string());
                match code.as_deref() {
                    // A row of this checkpoint is committed: by a newer epoch.
                    Some("23505") => return Err(self.fenced_by_newer(&job, &uid, epoch).await),
                    Some(LOCK_NOT_AVAILABLE) => {
                        return Err(self.lock_waited("tidewater_commits").await);
                    }
                    _ => return Err(db_error("recording the checkpoint in tidewater_commits", e)),
                }
            }
        }
        let gid = PostgresSink::gid(&job, &uid, subtask, checkpoint, self.ctx.epoch);
        self.run(&format!(
            "PREPARE TRANSACTION '{}'",
            gid.replace('\'', "''")
        ))
        .await?;
        self.in_transaction = false;
        Ok(Some(json!({ "gid": gid, "job": job })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_transaction_names_its_epoch() {
        let gid = PostgresSink::gid("job:a", "out", 1, CheckpointId(12), Epoch(7));
        assert_eq!(gid, "tw:job:a:out:1:12:e7");
        let cases = [
            (gid.as_str(), Some(7)),
            ("tw:job:out:1:12", None),
            ("tw:j:out:0:3:e", None),
            ("tw:j:out:0:3:e18446744073709551615", Some(u64::MAX)),
        ];
        for (gid, epoch) in cases {
            assert_eq!(gid_epoch(gid), epoch, "{gid}");
        }
    }
}
