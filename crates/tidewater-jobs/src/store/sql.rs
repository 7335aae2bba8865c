//! The store in SQL, for SQLite and PostgreSQL alike (sqlx's `Any` driver):
//! one table, `tidewater_jobs`; every change a compare-and-set on the
//! row's epoch and state, so two processes never both win; time from the
//! database's clock, so that workers on machines whose clocks disagree
//! still agree on when a lease runs out.

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, AssertSqlSafe, Row, SqlSafeStr};

use super::{JobStore, StoreError};
use crate::lease::{Decision, LeaseRecord, Owner, may_take, process_alive};
use crate::record::{
    CheckpointRecord, Ending, Heartbeat, JobError, JobId, JobRecord, NewJob, Report, Sample,
    Submitted,
};
use crate::state::{JobEvent, JobState, transition};

/// Which SQL the store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The database's clock, in ms since the Unix epoch.
    fn now_ms(self) -> &'static str {
        match self {
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }

    /// The migrations, in this dialect.
    fn migrations(self) -> Vec<Migration> {
        let id = match self {
            Dialect::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
            Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
        };
        let files = [
            (
                1,
                "job records",
                include_str!("../../migrations/0001_jobs.sql"),
            ),
            (
                2,
                "checkpoints",
                include_str!("../../migrations/0002_checkpoints.sql"),
            ),
            (
                3,
                "samples",
                include_str!("../../migrations/0003_samples.sql"),
            ),
        ];
        files
            .into_iter()
            .map(|(version, name, text)| {
                Migration::new(
                    version,
                    Cow::Borrowed(name),
                    MigrationType::Simple,
                    AssertSqlSafe(text.replace("{id}", id)).into_sql_str(),
                    false,
                )
            })
            .collect()
    }
}

/// A job store in SQLite or PostgreSQL.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
}

/// How many checkpoints of a job the store keeps.
const KEEP_CHECKPOINTS: i64 = 10_000;

/// How many samples of a job the store keeps, over all its runs.
const KEEP_SAMPLES: i64 = 5_000;

/// How long a write waits out other processes' writes before failing.
const BUSY_LIMIT: Duration = Duration::from_secs(30);

const COLUMNS: &str = "id, name, state_url, state, spec, spec_path, idempotency_key, rows_done, \
    rows_total, rows_per_second, eta_seconds, last_checkpoint, last_checkpoint_ms, exposure_rows, \
    exposure_ms, throttle, error_code, error_message, error_retryable, lease_host, lease_pid, \
    lease_acquired_ms, lease_expires_ms, epoch, discard, created_ms, updated_ms";

/// Whether every migration of `migrator` is recorded as applied, read
/// without the migrator's lock. Any failure (no table yet) means no.
async fn migrated(pool: &AnyPool, migrator: &Migrator) -> bool {
    let text = format!("SELECT version FROM {} WHERE success", migrator.table_name);
    let Ok(applied) = sqlx::query_scalar::<_, i64>(AssertSqlSafe(text))
        .fetch_all(pool)
        .await
    else {
        return false;
    };
    migrator
        .migrations
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| applied.contains(&m.version))
}

/// The PostgreSQL lock that serializes migrations of one store.
const MIGRATION_LOCK: i64 = 0x7469_6465_6a6f_6273; // "tidejobs"

/// How long a migrating process may sit idle inside its transaction before
/// the server ends its session, rolling the migration back and releasing
/// the lock.
const MIGRATION_IDLE_LIMIT: &str = "15s";

/// Applies `migrator`'s missing migrations. On PostgreSQL they run in one
/// transaction holding a transaction-scoped advisory lock, not sqlx's
/// session lock: a process paused while migrating (SIGSTOP, a frozen VM)
/// would hold a session lock until it woke, and every other process's
/// open, `tidewater status` included, would wait for it. A transaction
/// left idle is ended by the server after [`MIGRATION_IDLE_LIMIT`].
async fn migrate(
    pool: &AnyPool,
    dialect: Dialect,
    migrator: &Migrator,
) -> Result<(), sqlx::migrate::MigrateError> {
    if dialect == Dialect::Sqlite {
        return migrator.run(pool).await;
    }
    let mut tx = pool.begin().await?;
    let limit = format!("SET LOCAL idle_in_transaction_session_timeout = '{MIGRATION_IDLE_LIMIT}'");
    sqlx::query(AssertSqlSafe(limit)).execute(&mut *tx).await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    migrator.run(&mut *tx).await?;
    tidewater_core::failpoint::stall("store-mid-migration");
    tx.commit().await?;
    Ok(())
}

fn query_error(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { what, source }
}

impl SqlStore {
    /// Opens the store at `url` (`sqlite://PATH` or `postgres://...`),
    /// creating the SQLite file and the table as needed.
    pub async fn open(url: &str) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let failed = |detail: String| StoreError::Open {
            url: tidewater_core::redact_url(url),
            detail,
        };
        let (dialect, connect) = if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(failed("give a file: sqlite://PATH".into()));
            }
            if let Some(parent) = std::path::Path::new(path).parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent)
                    .map_err(|e| failed(format!("cannot create {}: {e}", parent.display())))?;
            }
            (Dialect::Sqlite, format!("sqlite://{path}?mode=rwc"))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Dialect::Postgres, url.to_string())
        } else {
            return Err(failed(
                "a job store is sqlite://PATH or postgres://USER@HOST/DATABASE".into(),
            ));
        };
        let pool = AnyPoolOptions::new()
            .max_connections(if dialect == Dialect::Sqlite { 1 } else { 4 })
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |connection, _| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        // Other processes write the same file: wait for their
                        // locks instead of failing at once.
                        sqlx::query("PRAGMA busy_timeout = 10000")
                            .execute(&mut *connection)
                            .await?;
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *connection)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(&connect)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let migrator = Migrator {
            migrations: Cow::Owned(dialect.migrations()),
            table_name: Cow::Borrowed("tidewater_jobs_migrations"),
            // `migrate` takes its own lock on PostgreSQL; SQLite has none.
            locking: false,
            ..Migrator::DEFAULT
        };
        // A store already migrated is opened without waiting for the
        // migration lock, which a paused process may hold (see `migrate`).
        if migrated(&pool, &migrator).await {
            return Ok(SqlStore { pool, dialect });
        }
        // Processes opening a new store at once race to migrate it (SQLite
        // takes no migration lock): the loser finds the work done on a retry.
        let mut attempt = 0;
        while let Err(e) = migrate(&pool, dialect, &migrator).await {
            attempt += 1;
            if attempt == 5 {
                return Err(failed(format!("migrating its tables: {e}")));
            }
            tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
        }
        Ok(SqlStore { pool, dialect })
    }

    /// Runs `attempt` again while SQLite says the database is busy: two
    /// processes writing at once can get `SQLITE_BUSY` at once, without
    /// the busy timeout's wait (a write that must upgrade a read snapshot
    /// another process's commit made stale).
    async fn retrying<T, F>(&self, mut attempt: impl FnMut() -> F) -> Result<T, sqlx::Error>
    where
        F: Future<Output = Result<T, sqlx::Error>>,
    {
        let started = std::time::Instant::now();
        let mut wait = Duration::from_millis(2 + u64::from(std::process::id() % 5));
        loop {
            match attempt().await {
                Err(sqlx::Error::Database(e))
                    if self.dialect == Dialect::Sqlite
                        && (e.code().as_deref() == Some("5") || e.message().contains("locked"))
                        && started.elapsed() < BUSY_LIMIT =>
                {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    fn sql(&self, text: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(text.replace("{now}", self.dialect.now_ms()))
    }

    /// The job with this id and the store's clock, if there is one.
    async fn by_id(&self, id: JobId) -> Result<Option<(JobRecord, i64)>, StoreError> {
        let text = format!("SELECT {COLUMNS}, {{now}} AS now_ms FROM tidewater_jobs WHERE id = $1");
        let row = self
            .retrying(|| {
                sqlx::query(self.sql(&text))
                    .bind(id)
                    .fetch_optional(&self.pool)
            })
            .await
            .map_err(query_error("reading a job"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let now: i64 = row
            .try_get("now_ms")
            .map_err(query_error("reading the clock"))?;
        Ok(Some((decode(&row)?, now)))
    }

    async fn by_text(
        &self,
        filter: &str,
        value: &str,
        other: Option<&str>,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let text = format!("SELECT {COLUMNS} FROM tidewater_jobs WHERE {filter} ORDER BY id DESC");
        let rows = self
            .retrying(|| {
                let mut query = sqlx::query(self.sql(&text)).bind(value.to_string());
                if let Some(other) = other {
                    query = query.bind(other.to_string());
                }
                query.fetch_all(&self.pool)
            })
            .await
            .map_err(query_error("reading jobs"))?;
        rows.iter().map(decode).collect()
    }

    /// The job and the store's clock.
    async fn with_now(&self, id: JobId) -> Result<(JobRecord, i64), StoreError> {
        self.by_id(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))
    }

    /// Moves `job` by `event`, if nobody changed it meanwhile.
    async fn move_state(
        &self,
        job: &JobRecord,
        event: JobEvent,
        discard: bool,
    ) -> Result<bool, StoreError> {
        let to = transition(job.state, event)
            .map_err(|source| StoreError::Illegal { id: job.id, source })?;
        let done = self
            .retrying(|| {
                sqlx::query(self.sql(
                    "UPDATE tidewater_jobs SET state = $1, discard = $2, updated_ms = {now} \
             WHERE id = $3 AND epoch = $4 AND state = $5",
                ))
                .bind(to.as_str())
                .bind(i64::from(discard))
                .bind(job.id)
                .bind(job.epoch as i64)
                .bind(job.state.as_str())
                .execute(&self.pool)
            })
            .await
            .map_err(query_error("changing a job's state"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl JobStore for SqlStore {
    async fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        loop {
            if let Some(key) = &job.idempotency_key
                && let Some(found) = self.by_text("idempotency_key = $1", key, None).await?.pop()
            {
                return Ok(Submitted::SameKey(found));
            }
            if let Some(found) = self
                .by_text(
                    "name = $1 AND state_url = $2",
                    &job.name,
                    Some(&job.state_url),
                )
                .await?
                .pop()
            {
                return Ok(Submitted::Existing(found));
            }
            let inserted = self
                .retrying(|| {
                    sqlx::query(self.sql(
                        "INSERT INTO tidewater_jobs (name, state_url, state, spec, spec_path, \
                 idempotency_key, created_ms, updated_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, {now}, {now}) RETURNING id",
                    ))
                    .bind(job.name.clone())
                    .bind(job.state_url.clone())
                    .bind(JobState::Queued.as_str())
                    .bind(job.spec.clone())
                    .bind(job.spec_path.clone())
                    .bind(job.idempotency_key.clone())
                    .fetch_one(&self.pool)
                })
                .await;
            match inserted {
                Ok(row) => {
                    let id: i64 = row.try_get(0).map_err(query_error("submitting a job"))?;
                    return Ok(Submitted::Created(self.get(id).await?));
                }
                // Another process submitted the same job (or key) at once:
                // look again, and find theirs.
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => continue,
                Err(e) => return Err(query_error("submitting a job")(e)),
            }
        }
    }

    async fn get(&self, id: JobId) -> Result<JobRecord, StoreError> {
        Ok(self.with_now(id).await?.0)
    }

    async fn find(&self, name_or_id: &str) -> Result<JobRecord, StoreError> {
        if let Ok(id) = name_or_id.parse::<JobId>()
            && let Some((job, _)) = self.by_id(id).await?
        {
            return Ok(job);
        }
        let mut found = self.by_text("name = $1", name_or_id, None).await?;
        match found.len() {
            0 => Err(StoreError::NotFound(name_or_id.to_string())),
            1 => Ok(found.remove(0)),
            _ => Err(StoreError::Ambiguous {
                name: name_or_id.to_string(),
                ids: found
                    .iter()
                    .map(|j| j.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    async fn list(&self, state: Option<JobState>) -> Result<Vec<JobRecord>, StoreError> {
        match state {
            Some(state) => self.by_text("state = $1", state.as_str(), None).await,
            None => self.by_text("$1 = $1", "", None).await,
        }
    }

    async fn take_lease(
        &self,
        id: JobId,
        me: &Owner,
        ttl: Duration,
        min_epoch: u64,
        steal: bool,
    ) -> Result<JobRecord, StoreError> {
        loop {
            let (job, now) = self.with_now(id).await?;
            match may_take(job.lease.as_ref(), now, me, steal, process_alive) {
                Decision::Take => {}
                Decision::Held { owner, expires_in } => {
                    return Err(StoreError::Held {
                        id,
                        name: job.name,
                        owner,
                        expires_in,
                    });
                }
            }
            if job.state == JobState::Cancelling {
                // Its worker stopped before the savepoint: the cancel is
                // over, and this run resumes it.
                self.move_state(&job, JobEvent::Cancelled, false).await?;
                continue;
            }
            transition(job.state, JobEvent::Start)
                .map_err(|source| StoreError::Illegal { id, source })?;
            let epoch = job.epoch.max(min_epoch) + 1;
            // The record comes back from the write itself: read afterwards,
            // it could already be a successor's, and a run paused between
            // the two would then take that successor's epoch for its own.
            let text = format!(
                "UPDATE tidewater_jobs SET state = $1, lease_host = $2, lease_pid = $3, \
                 lease_acquired_ms = {{now}}, lease_expires_ms = {{now}} + $4, epoch = $5, \
                 error_code = NULL, error_message = NULL, error_retryable = NULL, discard = 0, \
                 updated_ms = {{now}} WHERE id = $6 AND epoch = $7 AND state = $8 \
                 RETURNING {COLUMNS}"
            );
            let taken = self
                .retrying(|| {
                    sqlx::query(self.sql(&text))
                        .bind(JobState::Running.as_str())
                        .bind(me.host.clone())
                        .bind(i64::from(me.pid))
                        .bind(ttl.as_millis() as i64)
                        .bind(epoch as i64)
                        .bind(id)
                        .bind(job.epoch as i64)
                        .bind(job.state.as_str())
                        .fetch_optional(&self.pool)
                })
                .await
                .map_err(query_error("taking a lease"))?;
            if let Some(row) = taken {
                return decode(&row);
            }
            // Someone changed the job between the read and the write: judge again.
        }
    }

    async fn heartbeat(
        &self,
        id: JobId,
        epoch: u64,
        me: &Owner,
        ttl: Duration,
        report: &Report,
    ) -> Result<Heartbeat, StoreError> {
        let ([rate, eta], floats) = float_params(12, [report.rows_per_second, report.eta_seconds]);
        let text = format!(
            "UPDATE tidewater_jobs SET lease_expires_ms = {{now}} + $1, rows_done = $2, \
             rows_total = $3, rows_per_second = {rate}, eta_seconds = {eta}, \
             last_checkpoint = $4, last_checkpoint_ms = $5, exposure_rows = $6, \
             exposure_ms = $7, throttle = $8, updated_ms = {{now}} \
             WHERE id = $9 AND epoch = $10 AND lease_host = $11 AND lease_pid = $12 \
             AND state IN ('RUNNING', 'CANCELLING') RETURNING state, discard"
        );
        let row = self
            .retrying(|| {
                let mut query = sqlx::query(self.sql(&text))
                    .bind(ttl.as_millis() as i64)
                    .bind(report.rows_done as i64)
                    .bind(report.rows_total.map(|v| v as i64))
                    .bind(report.last_checkpoint.map(|v| v as i64))
                    .bind(report.last_checkpoint_ms)
                    .bind(report.exposure_rows as i64)
                    .bind(report.exposure_ms as i64)
                    .bind(report.throttle.clone())
                    .bind(id)
                    .bind(epoch as i64)
                    .bind(me.host.clone())
                    .bind(i64::from(me.pid));
                for value in &floats {
                    query = query.bind(*value);
                }
                query.fetch_optional(&self.pool)
            })
            .await
            .map_err(query_error("renewing a lease"))?;
        let Some(row) = row else {
            let job = self.get(id).await?;
            return Ok(Heartbeat::Lost(lost_why(&job, epoch)));
        };
        let state: String = row.try_get(0).map_err(query_error("renewing a lease"))?;
        let discard: i64 = row.try_get(1).map_err(query_error("renewing a lease"))?;
        Ok(Heartbeat::Renewed {
            cancel: (state == JobState::Cancelling.as_str()).then_some(discard != 0),
        })
    }

    async fn finish(
        &self,
        id: JobId,
        epoch: u64,
        ending: Ending,
        report: &Report,
    ) -> Result<JobRecord, StoreError> {
        let job = self.get(id).await?;
        if job.epoch != epoch {
            return Err(StoreError::Fenced {
                id,
                why: lost_why(&job, epoch),
            });
        }
        let (event, error) = match &ending {
            Ending::Succeeded => (JobEvent::Succeed, None),
            Ending::Failed(e) => (JobEvent::Fail, Some(e.clone())),
            Ending::Cancelled => (JobEvent::Cancelled, None),
        };
        let to =
            transition(job.state, event).map_err(|source| StoreError::Illegal { id, source })?;
        let done = self
            .retrying(|| {
                sqlx::query(self.sql(
                    "UPDATE tidewater_jobs SET state = $1, error_code = $2, error_message = $3, \
             error_retryable = $4, rows_done = $5, rows_total = $6, last_checkpoint = $7, \
             last_checkpoint_ms = $8, exposure_rows = $9, exposure_ms = $10, \
             rows_per_second = NULL, eta_seconds = NULL, throttle = NULL, lease_host = NULL, \
             lease_pid = NULL, lease_acquired_ms = NULL, lease_expires_ms = NULL, \
             updated_ms = {now} WHERE id = $11 AND epoch = $12 AND state = $13",
                ))
                .bind(to.as_str())
                .bind(error.as_ref().map(|e| e.code.clone()))
                .bind(error.as_ref().map(|e| e.message.clone()))
                .bind(error.as_ref().map(|e| i64::from(e.retryable)))
                .bind(report.rows_done as i64)
                .bind(report.rows_total.map(|v| v as i64))
                .bind(report.last_checkpoint.map(|v| v as i64))
                .bind(report.last_checkpoint_ms)
                .bind(report.exposure_rows as i64)
                .bind(report.exposure_ms as i64)
                .bind(id)
                .bind(epoch as i64)
                .bind(job.state.as_str())
                .execute(&self.pool)
            })
            .await
            .map_err(query_error("recording how a job ended"))?;
        if done.rows_affected() == 1 {
            return self.get(id).await;
        }
        // A cancel landed meanwhile (RUNNING became CANCELLING): once more.
        let again = self.get(id).await?;
        if again.epoch == epoch && again.state != job.state {
            return self.finish(id, epoch, ending, report).await;
        }
        Err(StoreError::Fenced {
            id,
            why: lost_why(&again, epoch),
        })
    }

    async fn forget(&self, id: JobId) -> Result<(), StoreError> {
        let job = self.get(id).await?;
        if !job.state.has_ended() {
            return Err(StoreError::Illegal {
                id,
                source: crate::state::IllegalTransition {
                    from: job.state,
                    event: "be forgotten",
                },
            });
        }
        let deleted = self
            .retrying(|| {
                sqlx::query("DELETE FROM tidewater_jobs WHERE id = $1 AND state = $2")
                    .bind(id)
                    .bind(job.state.as_str())
                    .execute(&self.pool)
            })
            .await
            .map_err(query_error("forgetting a job"))?;
        // Its checkpoints only once the job is gone: a job that moved on meanwhile keeps them.
        if deleted.rows_affected() == 1 {
            self.retrying(|| {
                sqlx::query("DELETE FROM tidewater_checkpoints WHERE job_id = $1")
                    .bind(id)
                    .execute(&self.pool)
            })
            .await
            .map_err(query_error("forgetting a job's checkpoints"))?;
            self.retrying(|| {
                sqlx::query("DELETE FROM tidewater_samples WHERE job_id = $1")
                    .bind(id)
                    .execute(&self.pool)
            })
            .await
            .map_err(query_error("forgetting a job's samples"))?;
        }
        Ok(())
    }

    async fn record_checkpoints(
        &self,
        id: JobId,
        epoch: u64,
        checkpoints: &[CheckpointRecord],
    ) -> Result<(), StoreError> {
        for c in checkpoints {
            self.retrying(|| {
                sqlx::query(
                    "INSERT INTO tidewater_checkpoints (job_id, checkpoint, epoch, kind, \
                     triggered_ms, duration_ms, bytes, align_ms, snapshot_ms, upload_ms, \
                     manifest_ms, commit_ms) \
                     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 \
                     WHERE EXISTS (SELECT 1 FROM tidewater_jobs WHERE id = $1 AND epoch = $3) \
                     ON CONFLICT (job_id, checkpoint) DO NOTHING",
                )
                .bind(id)
                .bind(c.id as i64)
                .bind(epoch as i64)
                .bind(c.kind.clone())
                .bind(c.triggered_ms)
                .bind(c.duration_ms as i64)
                .bind(c.bytes as i64)
                .bind(c.align_ms as i64)
                .bind(c.snapshot_ms as i64)
                .bind(c.upload_ms as i64)
                .bind(c.manifest_ms as i64)
                .bind(c.commit_ms as i64)
                .execute(&self.pool)
            })
            .await
            .map_err(query_error("recording a checkpoint"))?;
        }
        if let Some(last) = checkpoints.last() {
            // A job checkpointing every second for weeks keeps its last
            // KEEP_CHECKPOINTS, not all of them.
            self.retrying(|| {
                sqlx::query(
                    "DELETE FROM tidewater_checkpoints WHERE job_id = $1 AND checkpoint <= $2",
                )
                .bind(id)
                .bind(last.id as i64 - KEEP_CHECKPOINTS)
                .execute(&self.pool)
            })
            .await
            .map_err(query_error("trimming a job's checkpoints"))?;
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        id: JobId,
        limit: usize,
    ) -> Result<Vec<CheckpointRecord>, StoreError> {
        let rows = self
            .retrying(|| {
                sqlx::query(
                    "SELECT checkpoint, epoch, kind, triggered_ms, duration_ms, bytes, align_ms, \
                     snapshot_ms, upload_ms, manifest_ms, commit_ms FROM tidewater_checkpoints \
                     WHERE job_id = $1 ORDER BY checkpoint DESC LIMIT $2",
                )
                .bind(id)
                .bind(limit.min(i64::MAX as usize) as i64)
                .fetch_all(&self.pool)
            })
            .await
            .map_err(query_error("reading a job's checkpoints"))?;
        let mut out = rows
            .iter()
            .map(decode_checkpoint)
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_error("reading a job's checkpoints"))?;
        out.reverse();
        Ok(out)
    }

    async fn record_sample(&self, id: JobId, sample: &Sample) -> Result<(), StoreError> {
        let ([rate], floats) = float_params(11, [sample.rows_per_second]);
        let text = format!(
            "INSERT INTO tidewater_samples (job_id, epoch, at_ms, rows_done, rows_per_second, \
             exposure_rows, exposure_ms, throttle, replica_lag_ms, rows_dead_lettered, \
             restored_from, fallbacks) \
             SELECT $1, $2, $3, $4, {rate}, $5, $6, $7, $8, $9, $10, $11 \
             WHERE EXISTS (SELECT 1 FROM tidewater_jobs WHERE id = $1 AND epoch = $2) \
             ON CONFLICT (job_id, epoch, at_ms) DO NOTHING"
        );
        let i = |v: u64| v.min(i64::MAX as u64) as i64;
        self.retrying(|| {
            let mut query = sqlx::query(self.sql(&text))
                .bind(id)
                .bind(i(sample.epoch))
                .bind(sample.at_ms)
                .bind(i(sample.rows_done))
                .bind(i(sample.exposure_rows))
                .bind(i(sample.exposure_ms))
                .bind(sample.throttle.clone())
                .bind(sample.replica_lag_ms.map(i))
                .bind(i(sample.rows_dead_lettered))
                .bind(sample.restored_from.map(i))
                .bind(i(sample.fallbacks));
            for value in &floats {
                query = query.bind(*value);
            }
            query.execute(&self.pool)
        })
        .await
        .map_err(query_error("recording a sample"))?;
        self.retrying(|| {
            sqlx::query(
                "DELETE FROM tidewater_samples WHERE job_id = $1 AND at_ms < \
                 (SELECT at_ms FROM tidewater_samples WHERE job_id = $1 \
                 ORDER BY at_ms DESC LIMIT 1 OFFSET $2)",
            )
            .bind(id)
            .bind(KEEP_SAMPLES)
            .execute(&self.pool)
        })
        .await
        .map_err(query_error("trimming a job's samples"))?;
        Ok(())
    }

    async fn samples(&self, id: JobId, limit: usize) -> Result<Vec<Sample>, StoreError> {
        let rows = self
            .retrying(|| {
                sqlx::query(
                    "SELECT epoch, at_ms, rows_done, rows_per_second, exposure_rows, exposure_ms, \
                     throttle, replica_lag_ms, rows_dead_lettered, restored_from, fallbacks \
                     FROM tidewater_samples WHERE job_id = $1 ORDER BY at_ms DESC LIMIT $2",
                )
                .bind(id)
                .bind(limit.min(i64::MAX as usize) as i64)
                .fetch_all(&self.pool)
            })
            .await
            .map_err(query_error("reading a job's samples"))?;
        let mut out = rows
            .iter()
            .map(decode_sample)
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_error("reading a job's samples"))?;
        out.reverse();
        Ok(out)
    }

    async fn cancel(&self, id: JobId, discard: bool) -> Result<JobRecord, StoreError> {
        loop {
            let job = self.get(id).await?;
            if self.move_state(&job, JobEvent::Cancel, discard).await? {
                return self.get(id).await;
            }
        }
    }
}

/// The SQL of optional floats: a placeholder numbered after the `fixed`
/// parameters for each value (bound in this order), or `NULL` written into
/// the statement. sqlx 0.9's Any driver sends a NULL f64 to PostgreSQL
/// typed as float4 (the NULL kinds of its Real and Double are swapped), and
/// a statement prepared that way then refuses every float8 bound to it on
/// that connection: a NULL float is never bound.
fn float_params<const N: usize>(fixed: usize, values: [Option<f64>; N]) -> ([String; N], Vec<f64>) {
    let mut bound = Vec::new();
    let sql = values.map(|value| match value {
        Some(v) => {
            bound.push(v);
            format!("${}", fixed + bound.len())
        }
        None => "NULL".to_string(),
    });
    (sql, bound)
}

/// Why epoch `mine` no longer holds `job`.
fn lost_why(job: &JobRecord, mine: u64) -> String {
    if job.epoch > mine {
        let by = job
            .lease
            .as_ref()
            .map_or_else(|| "another run".to_string(), |l| l.owner.to_string());
        format!(
            "epoch {} ({by}) took the job over from epoch {mine}",
            job.epoch
        )
    } else {
        format!("the job is {} and this run's lease is gone", job.state)
    }
}

fn decode_checkpoint(row: &AnyRow) -> Result<CheckpointRecord, sqlx::Error> {
    let u = |i: usize| -> Result<u64, sqlx::Error> { Ok(row.try_get::<i64, _>(i)? as u64) };
    Ok(CheckpointRecord {
        id: u(0)?,
        epoch: u(1)?,
        kind: row.try_get(2)?,
        triggered_ms: row.try_get(3)?,
        duration_ms: u(4)?,
        bytes: u(5)?,
        align_ms: u(6)?,
        snapshot_ms: u(7)?,
        upload_ms: u(8)?,
        manifest_ms: u(9)?,
        commit_ms: u(10)?,
    })
}

fn decode_sample(row: &AnyRow) -> Result<Sample, sqlx::Error> {
    let u = |i: usize| -> Result<u64, sqlx::Error> { Ok(row.try_get::<i64, _>(i)? as u64) };
    let maybe = |i: usize| -> Result<Option<u64>, sqlx::Error> {
        Ok(row.try_get::<Option<i64>, _>(i)?.map(|v| v as u64))
    };
    Ok(Sample {
        epoch: u(0)?,
        at_ms: row.try_get(1)?,
        rows_done: u(2)?,
        rows_per_second: row.try_get(3)?,
        exposure_rows: u(4)?,
        exposure_ms: u(5)?,
        throttle: row.try_get(6)?,
        replica_lag_ms: maybe(7)?,
        rows_dead_lettered: u(8)?,
        restored_from: maybe(9)?,
        fallbacks: u(10)?,
    })
}

fn decode(row: &AnyRow) -> Result<JobRecord, StoreError> {
    decode_row(row).map_err(query_error("reading a job record"))
}

fn decode_row(row: &AnyRow) -> Result<JobRecord, sqlx::Error> {
    let state: String = row.try_get("state")?;
    let state = state
        .parse::<JobState>()
        .map_err(|e| sqlx::Error::Decode(e.into()))?;
    let u = |name: &str| -> Result<Option<u64>, sqlx::Error> {
        Ok(row.try_get::<Option<i64>, _>(name)?.map(|v| v as u64))
    };
    let lease = match (
        row.try_get::<Option<String>, _>("lease_host")?,
        row.try_get::<Option<i64>, _>("lease_pid")?,
        row.try_get::<Option<i64>, _>("lease_acquired_ms")?,
        row.try_get::<Option<i64>, _>("lease_expires_ms")?,
    ) {
        (Some(host), Some(pid), Some(acquired_ms), Some(expires_ms)) => Some(LeaseRecord {
            owner: Owner {
                host,
                pid: pid as u32,
            },
            acquired_ms,
            expires_ms,
        }),
        _ => None,
    };
    let error = match (
        row.try_get::<Option<String>, _>("error_code")?,
        row.try_get::<Option<String>, _>("error_message")?,
    ) {
        (Some(code), Some(message)) => Some(JobError {
            code,
            message,
            retryable: row
                .try_get::<Option<i64>, _>("error_retryable")?
                .unwrap_or(0)
                != 0,
        }),
        _ => None,
    };
    Ok(JobRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        state_url: row.try_get("state_url")?,
        state,
        spec: row.try_get("spec")?,
        spec_path: row.try_get("spec_path")?,
        idempotency_key: row.try_get("idempotency_key")?,
        progress: Report {
            rows_done: u("rows_done")?.unwrap_or(0),
            rows_total: u("rows_total")?,
            rows_per_second: row.try_get("rows_per_second")?,
            eta_seconds: row.try_get("eta_seconds")?,
            last_checkpoint: u("last_checkpoint")?,
            last_checkpoint_ms: row.try_get("last_checkpoint_ms")?,
            exposure_rows: u("exposure_rows")?.unwrap_or(0),
            exposure_ms: u("exposure_ms")?.unwrap_or(0),
            throttle: row.try_get("throttle")?,
        },
        error,
        lease,
        epoch: u("epoch")?.unwrap_or(0),
        discard: row.try_get::<i64, _>("discard")? != 0,
        created_ms: row.try_get("created_ms")?,
        updated_ms: row.try_get("updated_ms")?,
    })
}

#[cfg(test)]
mod tests {
    use super::float_params;

    /// Values, the SQL for each, what is bound.
    type Case = ([Option<f64>; 2], [&'static str; 2], &'static [f64]);

    #[test]
    fn a_null_float_is_written_into_the_statement_not_bound() {
        let cases: [Case; 4] = [
            ([None, None], ["NULL", "NULL"], &[]),
            ([Some(1.5), None], ["$13", "NULL"], &[1.5]),
            ([None, Some(2.5)], ["NULL", "$13"], &[2.5]),
            ([Some(1.5), Some(2.5)], ["$13", "$14"], &[1.5, 2.5]),
        ];
        for (values, sql, bound) in cases {
            let (got_sql, got_bound) = float_params(12, values);
            assert_eq!(got_sql, sql.map(String::from), "{values:?}");
            assert_eq!(got_bound, bound, "{values:?}");
        }
    }
}
