//! A user-defined operator with its own checkpointed state: keep the first row
//! of every key, drop the rest. The set of keys already seen is the state; a
//! restore that lost it would let keys through twice.
//!
//! ```text
//! cargo run --release --example dedup
//! ```
//!
//! The example runs the job at parallelism 2, cancels it half-way (a
//! savepoint), resumes it at parallelism 3 (each subtask restores the keys
//! it now receives), and checks that every key came out exactly once. It
//! checkpoints incrementally: each checkpoint writes only the keys seen
//! since the one before.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use tidewater::prelude::*;
use tidewater::{Error, RateLimit, StateChanges, state};

/// Emits only the first row seen for each value of `k`.
#[derive(Default)]
struct FirstPerKey {
    seen: HashSet<i64>,
    /// Keys first seen since the last snapshot, when the job checkpoints
    /// incrementally (`None` otherwise: nothing to track).
    new_keys: Option<Vec<i64>>,
}

fn key_batch(keys: impl IntoIterator<Item = i64>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    let keys: Int64Array = keys.into_iter().collect();
    Ok(RecordBatch::try_new(schema, vec![Arc::new(keys)])?)
}

impl Operator for FirstPerKey {
    fn kind(&self) -> &str {
        "first-per-key"
    }

    // Bump when the layout of `snapshot` changes: old checkpoints are then refused.
    fn state_version(&self) -> Option<u32> {
        Some(1)
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let keys = batch
            .column_by_name("k")
            .ok_or_else(|| Error::BadInput("first-per-key needs a column 'k'".into()))?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| Error::BadInput("first-per-key needs 'k' to be Int64".into()))?;
        let keep: BooleanArray = keys
            .values()
            .iter()
            .map(|k| {
                let new = self.seen.insert(*k);
                if let (true, Some(new_keys)) = (new, &mut self.new_keys) {
                    new_keys.push(*k);
                }
                Some(new)
            })
            .collect();
        out.emit(filter_record_batch(&batch, &keep)?);
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(new_keys) = &mut self.new_keys {
            new_keys.clear();
        }
        Ok(Some(key_batch(self.seen.iter().copied())?))
    }

    // With incremental checkpoints (`--incremental`), a checkpoint writes
    // only the keys seen since the last one: keys are never forgotten, so
    // the state is the last full snapshot plus every delta since.
    fn track_changes(&mut self) -> bool {
        self.new_keys = Some(Vec::new());
        true
    }

    fn snapshot_changes(&mut self) -> Result<StateChanges> {
        let new_keys = self
            .new_keys
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        Ok(StateChanges::Changed(Some(key_batch(new_keys)?)))
    }

    // The state is one row per key, in column `k`: a restore at another
    // parallelism gives each subtask the keys it now receives.
    fn state_keys(&self) -> Option<Vec<String>> {
        Some(vec!["k".into()])
    }

    fn restore(&mut self, state: RecordBatch) -> Result<()> {
        self.seen = state::column::<Int64Array>(&state, "k")?
            .values()
            .iter()
            .copied()
            .collect();
        Ok(())
    }
}

const ROWS: u64 = 2_000_000;
const KEYS: u64 = 50_000;

fn build(out: &str, parallelism: usize) -> Result<Job> {
    let pipeline = Pipeline::new("dedup").with_parallelism(parallelism);
    pipeline
        .source("generator", GeneratorSource::new(ROWS, KEYS))
        // Half the rows at once, the rest over a second: the cancel below
        // lands before the end.
        .throttle(RateLimit::new(ROWS as f64 / 2.0))
        .key_by(["k"]) // every row of a key reaches the same subtask, and so the same set
        .transform("first-per-key", |_ctx| Ok(FirstPerKey::default()))
        .sink("parquet", ParquetSink::open(out)?);
    pipeline.build()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let dir = tempfile::tempdir()?;
    let state_dir = dir.path().join("state");
    let out = dir.path().join("out");
    let out = out.to_str().expect("utf-8 path");
    let config = || -> Result<JobConfig> {
        Ok(JobConfig::new(state_dir.to_str().expect("utf-8 path"))?
            .checkpoint_interval(Some(Duration::from_millis(100)))
            .incremental_checkpoints(true))
    };

    // Run, and cancel once a checkpoint exists: the job takes a savepoint.
    let handle = build(out, 2)?.start(config()?);
    while handle.progress().checkpoints == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.cancel();
    let first = handle.join().await?;
    println!("first run: {:?}", short(&first));
    anyhow::ensure!(
        matches!(first, Outcome::Cancelled { .. }),
        "the first run should have been cancelled half-way"
    );

    // Same state, one more subtask: resumes from the savepoint, the seen
    // keys split among the three subtasks by key group.
    let second = build(out, 3)?.run(config()?).await?;
    println!("second run: {:?}", short(&second));
    anyhow::ensure!(
        matches!(second, Outcome::Completed(ref s) if s.restored_from.is_some()),
        "the second run should have resumed and completed"
    );

    let mut keys = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "parquet") {
            let file = std::fs::File::open(&path)?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?
                    .build()?;
            for batch in reader {
                keys.extend(
                    batch?
                        .column(1)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .copied(),
                );
            }
        }
    }
    let distinct: HashSet<i64> = keys.iter().copied().collect();
    println!("{} rows out, {} distinct keys", keys.len(), distinct.len());
    anyhow::ensure!(
        keys.len() == KEYS as usize,
        "expected {KEYS} rows, one per key"
    );
    anyhow::ensure!(distinct.len() == keys.len(), "a key came out twice");
    Ok(())
}

fn short(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Completed(s) => {
            format!("completed, resumed from {:?}", s.restored_from.map(|c| c.0))
        }
        Outcome::Cancelled { savepoint, summary } => {
            format!(
                "cancelled at savepoint {savepoint} after {} rows",
                summary.progress.rows_read
            )
        }
        Outcome::AlreadyComplete { checkpoint } => format!("already complete at {checkpoint}"),
        Outcome::Discarded { resumes_from, .. } => {
            format!("stopped without a savepoint; resumes from {resumes_from:?}")
        }
    }
}
