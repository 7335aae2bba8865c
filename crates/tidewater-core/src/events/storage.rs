//! Storage: what the state store and file connectors report.

use metrics::counter;
use tracing::{debug, info, warn};

use super::InternalEvent;

/// The checkpoint store refused a conditional write; check-then-put is used.
#[derive(Debug)]
pub struct StoreWithoutConditionalWrites;

impl InternalEvent for StoreWithoutConditionalWrites {
    fn emit(self) {
        warn!(
            "the checkpoint store has no conditional writes: falling back to check-then-put, \
             which relies on one worker running the job at a time (see docs/connectors/parquet.md)"
        );
    }
}

/// A table is read in the order of a key its rows are not stored in, so
/// each row read costs a heap page of its own.
#[derive(Debug)]
pub struct KeyOutOfStorageOrder<'a> {
    /// The table.
    pub table: &'a str,
    /// The key column.
    pub key: &'a str,
    /// The planner's statistic: 1 or -1 when the rows are stored in the
    /// key's order, near 0 when in none.
    pub correlation: f64,
}

impl InternalEvent for KeyOutOfStorageOrder<'_> {
    fn emit(self) {
        warn!(
            table = self.table,
            key = self.key,
            correlation = self.correlation,
            "'{}' is read in the order of '{}', but its rows are stored in no such order \
             (planner correlation {:.2}): each row read fetches a heap page of its own, which \
             measured about 4x slower than a table stored in key order. Key the source by a \
             unique column (or columns) that follows insertion order, such as a serial or a \
             creation time with a tie-breaker, or CLUSTER the table on this key first \
             (docs/connectors/postgres.md, PostgresSource)",
            self.table,
            self.key,
            self.correlation
        );
    }
}

/// A file source listed its input.
#[derive(Debug)]
pub struct SourcePlanned<'a> {
    /// The source's kind (e.g. `parquet`).
    pub kind: &'a str,
    /// Files found.
    pub files: usize,
    /// Splits made of them.
    pub splits: usize,
    /// Rows in them, as their metadata says.
    pub rows: u64,
}

impl InternalEvent for SourcePlanned<'_> {
    fn emit(self) {
        info!(
            files = self.files,
            splits = self.splits,
            rows = self.rows,
            "{} source planned",
            self.kind
        );
    }
}

/// Unreadable input was skipped and recorded as a dead letter.
#[derive(Debug)]
pub struct InputDeadLettered<'a> {
    /// The file.
    pub file: &'a str,
    /// The row group, when only one was unreadable.
    pub row_group: Option<usize>,
    /// Why.
    pub error: &'a str,
}

impl InternalEvent for InputDeadLettered<'_> {
    fn emit(self) {
        warn!(
            file = self.file,
            row_group = self.row_group,
            error = self.error,
            "skipping unreadable Parquet data (dead letter)"
        );
        counter!("tidewater_input_dead_lettered_total").increment(1);
        super::live::dead_lettered();
    }
}

/// A record of a topic that does not decode was skipped and recorded as a
/// dead letter.
#[derive(Debug)]
pub struct RecordDeadLettered<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// Where it was recorded.
    pub target: &'a str,
    /// Why it does not decode.
    pub error: &'a str,
}

impl InternalEvent for RecordDeadLettered<'_> {
    fn emit(self) {
        warn!(
            topic = self.topic,
            partition = self.partition,
            offset = self.offset,
            error = self.error,
            "skipping a record that does not decode (dead letter in {})",
            self.target
        );
        counter!("tidewater_input_dead_lettered_total").increment(1);
        super::live::dead_lettered();
    }
}

/// A sink finished an output file; it becomes visible with the next checkpoint.
#[derive(Debug)]
pub struct FileFinished<'a> {
    /// The sink.
    pub uid: &'a str,
    /// The writer.
    pub subtask: usize,
    /// The file's name.
    pub file: &'a str,
    /// Rows in it.
    pub rows: u64,
    /// Parts it was uploaded in.
    pub parts: usize,
}

impl InternalEvent for FileFinished<'_> {
    fn emit(self) {
        info!(
            sink = self.uid,
            subtask = self.subtask,
            file = self.file,
            rows = self.rows,
            parts = self.parts,
            "file finished; visible after the next checkpoint"
        );
        counter!(
            "tidewater_files_finished_total",
            "uid" => self.uid.to_string(),
            "subtask" => self.subtask.to_string()
        )
        .increment(1);
    }
}

/// A commit found its file already published by another run, and kept it
/// (a warning when its size differs from what this commit would publish).
#[derive(Debug)]
pub struct FileAlreadyPublished<'a> {
    /// The file.
    pub file: &'a str,
    /// Its size.
    pub bytes: u64,
    /// The size this commit would have published.
    pub expected: u64,
}

impl InternalEvent for FileAlreadyPublished<'_> {
    fn emit(self) {
        if self.bytes == self.expected {
            // Published by another run from the same parts: nothing to say.
            debug!(file = self.file, "already published by another run; kept");
            return;
        }
        warn!(
            file = self.file,
            bytes = self.bytes,
            expected = self.expected,
            "the file was already published by another run with other content; kept as it is \
             (is another process running this job with the same state?)"
        );
        counter!("tidewater_files_published_by_another_run_total").increment(1);
    }
}

/// A prepared transaction that no completed checkpoint lists was rolled back.
#[derive(Debug)]
pub struct PreparedRolledBack<'a> {
    /// Its global id.
    pub gid: &'a str,
}

impl InternalEvent for PreparedRolledBack<'_> {
    fn emit(self) {
        warn!(
            gid = self.gid,
            "rolling back a prepared transaction no checkpoint completed"
        );
        counter!("tidewater_prepared_rolled_back_total").increment(1);
    }
}

/// A file system refused a direct (page-cache bypassing) write; the write
/// went through the page cache instead.
#[derive(Debug)]
pub struct DirectWriteRefused<'a> {
    /// The file.
    pub file: &'a str,
    /// Why.
    pub error: &'a str,
}

impl InternalEvent for DirectWriteRefused<'_> {
    fn emit(self) {
        debug!(file = self.file, error = self.error, "direct write refused");
    }
}

/// An output file became visible.
#[derive(Debug)]
pub struct FileCommitted<'a> {
    /// The file.
    pub file: &'a str,
}

impl InternalEvent for FileCommitted<'_> {
    fn emit(self) {
        debug!(file = self.file, "committed");
    }
}

/// A leftover that no checkpoint refers to was deleted (a staged part of a
/// run that crashed after its last checkpoint, a killed write's temporary).
#[derive(Debug)]
pub struct LeftoverDeleted<'a> {
    /// The file or object.
    pub file: &'a str,
    /// What it was.
    pub what: &'a str,
}

impl InternalEvent for LeftoverDeleted<'_> {
    fn emit(self) {
        debug!(file = self.file, "deleting {}", self.what);
    }
}

/// A writer continues a file from a checkpoint.
#[derive(Debug)]
pub struct FileResumed<'a> {
    /// The file.
    pub file: &'a str,
    /// Parts uploaded before the checkpoint.
    pub parts: usize,
    /// Bytes read back from a predecessor's upload into this run's own.
    pub taken_over_bytes: Option<usize>,
}

impl InternalEvent for FileResumed<'_> {
    fn emit(self) {
        debug!(
            file = self.file,
            parts = self.parts,
            taken_over_bytes = self.taken_over_bytes,
            "resuming file"
        );
    }
}

/// A prepared transaction was committed.
#[derive(Debug)]
pub struct PreparedCommitted<'a> {
    /// Its global id.
    pub gid: &'a str,
}

impl InternalEvent for PreparedCommitted<'_> {
    fn emit(self) {
        debug!(gid = self.gid, "committed");
    }
}

/// A restored Parquet writer's open file is published already: a restore of
/// the same checkpoint at another parallelism finished it. The writer
/// carries nothing on.
#[derive(Debug)]
pub struct CarriedFileAlreadyPublished<'a> {
    /// The file.
    pub file: &'a str,
}

impl InternalEvent for CarriedFileAlreadyPublished<'_> {
    fn emit(self) {
        info!(
            file = self.file,
            "the open file of the restored checkpoint was finished by an earlier restore at \
             another parallelism; starting a new one"
        );
    }
}
