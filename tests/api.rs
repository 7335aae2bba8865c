//! The library API end to end, in one process: graphs with unequal
//! parallelism (round-robin, hash shuffle, several inputs per task), a user
//! operator with its own checkpointed state across a cancel and resume, a
//! zombie worker fenced off, an operator error reported with its uid, and
//! the hand-ons an operator is asked for before barriers and the end.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use async_trait::async_trait;
use tidewater::checkpoint::{CheckpointKind, StateStore};
use tidewater::prelude::*;
use tidewater::{
    CheckpointId, CommitHandle, Error, RateLimit, Sink, SinkWriter, StoreLocation, open_location,
    splitmix64,
};

/// A transactional in-memory sink: batches are staged per checkpoint and
/// become visible on commit; committing twice changes nothing.
#[derive(Clone, Default)]
struct MemorySink {
    state: Arc<Mutex<MemoryState>>,
}

#[derive(Default)]
struct MemoryState {
    staged: HashMap<(String, usize, u64), Vec<RecordBatch>>,
    committed: BTreeMap<(String, usize, u64), Vec<RecordBatch>>,
}

impl MemorySink {
    fn staged(&self) -> usize {
        self.state.lock().unwrap().staged.len()
    }

    fn committed(&self) -> Vec<RecordBatch> {
        self.state
            .lock()
            .unwrap()
            .committed
            .values()
            .flatten()
            .cloned()
            .collect()
    }
}

struct MemoryWriter {
    sink: MemorySink,
    uid: String,
    subtask: usize,
    buffer: Vec<RecordBatch>,
}

#[async_trait]
impl Sink for MemorySink {
    fn kind(&self) -> &str {
        "memory"
    }
    async fn open_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(MemoryWriter {
            sink: self.clone(),
            uid: ctx.uid.to_string(),
            subtask: ctx.subtask,
            buffer: Vec::new(),
        }))
    }
    async fn commit(&self, handle: &CommitHandle) -> Result<()> {
        let mut state = self.state.lock().unwrap();
        let key = (handle.uid.clone(), handle.subtask, handle.checkpoint.0);
        if let Some(batches) = state.staged.remove(&key) {
            state.committed.insert(key, batches);
        }
        Ok(())
    }
    async fn abort_uncommitted(&self, _job: &str, uid: &str) -> Result<()> {
        self.state.lock().unwrap().staged.retain(|k, _| k.0 != uid);
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for MemoryWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        self.buffer.push(batch);
        Ok(())
    }
    async fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<Option<serde_json::Value>> {
        if self.buffer.is_empty() {
            return Ok(None);
        }
        let key = (self.uid.clone(), self.subtask, checkpoint.0);
        self.sink
            .state
            .lock()
            .unwrap()
            .staged
            .insert(key, std::mem::take(&mut self.buffer));
        Ok(Some(serde_json::json!({})))
    }
}

/// A user operator with keyed state: numbers the rows of each key 0, 1, 2, ...
/// `keyed` declares the state one row per key (column `k`), which lets a
/// restore at another parallelism split it.
#[derive(Default)]
struct NumberPerKey {
    next: HashMap<i64, i64>,
    keyed: bool,
}

fn numbered_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
    ]))
}

impl Operator for NumberPerKey {
    fn kind(&self) -> &str {
        "number-per-key"
    }
    fn state_version(&self) -> Option<u32> {
        Some(1)
    }
    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let k = tidewater::state::column::<Int64Array>(&batch, "k")?;
        let n: Int64Array = k
            .values()
            .iter()
            .map(|k| {
                let next = self.next.entry(*k).or_insert(0);
                *next += 1;
                *next - 1
            })
            .collect();
        let id = batch.column_by_name("id").unwrap().clone();
        out.emit(RecordBatch::try_new(
            numbered_schema(),
            vec![id, batch.column_by_name("k").unwrap().clone(), Arc::new(n)],
        )?);
        Ok(())
    }
    fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        let (keys, next): (Vec<i64>, Vec<i64>) = self.next.iter().map(|(k, n)| (*k, *n)).unzip();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("next", DataType::Int64, false),
        ]));
        Ok(Some(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(Int64Array::from(next)),
            ],
        )?))
    }
    fn state_keys(&self) -> Option<Vec<String>> {
        self.keyed.then(|| vec!["k".to_string()])
    }
    fn restore(&mut self, state: RecordBatch) -> Result<()> {
        let keys = tidewater::state::column::<Int64Array>(&state, "k")?;
        let next = tidewater::state::column::<Int64Array>(&state, "next")?;
        self.next = keys
            .values()
            .iter()
            .copied()
            .zip(next.values().iter().copied())
            .collect();
        Ok(())
    }
}

const ROWS: u64 = 400_000;
const KEYS: u64 = 1_000;

/// generator (p=1) → filter (p=3, round-robin) → key_by(k) → number-per-key (p=2) → sink (p=1)
fn numbering_job(sink: &MemorySink) -> Job {
    numbering_job_at(sink, 2, false)
}

/// [`numbering_job`] with number-per-key at `parallelism`, its state
/// declared keyed or not.
fn numbering_job_at(sink: &MemorySink, parallelism: usize, keyed: bool) -> Job {
    let pipeline = Pipeline::new("numbering");
    pipeline
        .source(
            "generator",
            GeneratorSource::new(ROWS, KEYS).with_batch_rows(1000),
        )
        .parallelism(1)
        // Half the rows at once (the bucket starts full), the rest over a
        // second: the cancel lands before the end.
        .throttle(RateLimit::new(ROWS as f64 / 2.0))
        .filter("odd-ids", |batch| {
            let id = batch.column(0).as_primitive::<Int64Type>();
            Ok(id.iter().map(|v| v.map(|v| v % 2 == 1)).collect())
        })
        .parallelism(3)
        .key_by(["k"])
        .transform("number", move |_ctx| {
            Ok(NumberPerKey {
                keyed,
                ..NumberPerKey::default()
            })
        })
        .parallelism(parallelism)
        .sink("memory", sink.clone())
        .parallelism(1);
    pipeline.build().unwrap()
}

fn assert_numbering(batches: &[RecordBatch]) {
    let mut per_key: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut ids = Vec::new();
    for batch in batches {
        let id = batch.column(0).as_primitive::<Int64Type>();
        let k = batch.column(1).as_primitive::<Int64Type>();
        let n = batch.column(2).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            let i = id.value(row) as u64;
            assert_eq!(
                k.value(row),
                (splitmix64(i) % KEYS) as i64,
                "key of row {i}"
            );
            ids.push(i);
            per_key.entry(k.value(row)).or_default().push(n.value(row));
        }
    }
    ids.sort_unstable();
    let expected: Vec<u64> = (0..ROWS).filter(|i| i % 2 == 1).collect();
    assert_eq!(ids.len(), expected.len(), "row count");
    assert!(ids == expected, "rows lost or duplicated");
    // Restored state continues the numbering: each key's numbers are 0..count, once each.
    for (key, mut numbers) in per_key {
        numbers.sort_unstable();
        let want: Vec<i64> = (0..numbers.len() as i64).collect();
        assert!(numbers == want, "key {key}: numbering has gaps or repeats");
    }
}

fn memory_config(location: &StoreLocation, interval_ms: u64) -> JobConfig {
    JobConfig::with_location(location.clone())
        .checkpoint_interval(Some(Duration::from_millis(interval_ms)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unequal_parallelism_and_user_state_survive_cancel_and_resume() {
    let location = open_location("memory://").unwrap();
    let sink = MemorySink::default();

    let handle = numbering_job(&sink).start(memory_config(&location, 10));
    while handle.progress().checkpoints < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    handle.cancel();
    let savepoint = match handle.join().await.unwrap() {
        Outcome::Cancelled { savepoint, summary } => {
            assert!(
                summary.progress.rows_read < ROWS,
                "cancelled too late to test a resume"
            );
            savepoint
        }
        other => panic!("expected a cancel, got {other:?}"),
    };

    match numbering_job(&sink)
        .run(memory_config(&location, 10))
        .await
        .unwrap()
    {
        Outcome::Completed(summary) => assert_eq!(summary.restored_from, Some(savepoint)),
        other => panic!("expected completion, got {other:?}"),
    }
    assert_numbering(&sink.committed());
}

/// Runs the job until it has checkpointed twice, then cancels it.
async fn cancel_after_two_checkpoints(job: Job, config: JobConfig) {
    let handle = job.start(config);
    while handle.progress().checkpoints < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    handle.cancel();
    match handle.join().await.unwrap() {
        Outcome::Cancelled { summary, .. } => assert!(
            summary.progress.rows_read < ROWS,
            "cancelled too late to test a resume"
        ),
        other => panic!("expected a cancel, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_user_state_moves_to_the_subtasks_of_a_new_parallelism() {
    // 2 → 3 → 1: the numbering of every key goes on where it stopped, so
    // each key's state reached the subtask that now receives its rows.
    let location = open_location("memory://").unwrap();
    let sink = MemorySink::default();
    let config = || memory_config(&location, 10);
    cancel_after_two_checkpoints(numbering_job_at(&sink, 2, true), config()).await;
    cancel_after_two_checkpoints(numbering_job_at(&sink, 3, true), config()).await;
    match numbering_job_at(&sink, 1, true)
        .run(config())
        .await
        .unwrap()
    {
        Outcome::Completed(summary) => assert!(summary.restored_from.is_some()),
        other => panic!("expected completion, got {other:?}"),
    }
    assert_numbering(&sink.committed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_not_declared_keyed_refuses_a_new_parallelism_and_says_how_to_allow_it() {
    let location = open_location("memory://").unwrap();
    let sink = MemorySink::default();
    let config = || memory_config(&location, 10);
    cancel_after_two_checkpoints(numbering_job_at(&sink, 2, false), config()).await;
    let refused = numbering_job_at(&sink, 3, false)
        .run(config())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("'number'")
            && refused.contains("parallelism 2")
            && refused.contains("state_keys"),
        "{refused}"
    );
    // At its old parallelism it resumes and completes exactly.
    numbering_job_at(&sink, 2, false)
        .run(config())
        .await
        .unwrap();
    assert_numbering(&sink.committed());
}

/// Rewrites every manifest under `dir` as a build from before key groups
/// wrote it: partitioner version 1, no key group count.
fn as_if_written_before_key_groups(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            as_if_written_before_key_groups(&path);
        } else if path.file_name().is_some_and(|n| n == "_MANIFEST.json") {
            let mut manifest: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            manifest["partitioner"]["version"] = 1.into();
            manifest.as_object_mut().unwrap().remove("key_groups");
            std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_state_from_an_older_partitioner_is_split_again_or_refused_if_undeclared() {
    // The resumed job routes keys over 3 key groups, not the 4096 the state
    // was placed by: only state split again by key reaches the right subtasks.
    for keyed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let location = open_location(dir.path().to_str().unwrap()).unwrap();
        let sink = MemorySink::default();
        let config = memory_config(&location, 10);
        cancel_after_two_checkpoints(numbering_job_at(&sink, 2, keyed), config).await;
        as_if_written_before_key_groups(dir.path());
        let config = memory_config(&location, 10).key_groups(3);
        let resumed = numbering_job_at(&sink, 2, keyed).run(config).await;
        if keyed {
            assert!(matches!(resumed, Ok(Outcome::Completed(_))), "{resumed:?}");
            assert_numbering(&sink.committed());
        } else {
            let refused = resumed.unwrap_err().to_string();
            assert!(
                refused.contains("'number'") && refused.contains("xxh3-64 version 1"),
                "{refused}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discard_stops_without_a_savepoint_and_resumes_from_the_last_checkpoint() {
    let location = open_location("memory://").unwrap();
    let sink = MemorySink::default();
    let handle = numbering_job(&sink).start(memory_config(&location, 10));
    while handle.progress().checkpoints < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    handle.control().discard();
    // A cancel after the discard does not turn it into a savepoint.
    handle.cancel();
    let resumes_from = match handle.join().await.unwrap() {
        Outcome::Discarded {
            resumes_from,
            summary,
        } => {
            assert!(summary.progress.rows_read < ROWS, "discarded too late");
            assert!(
                summary
                    .checkpoints
                    .iter()
                    .all(|c| c.kind == CheckpointKind::Periodic),
                "a discard took a savepoint: {:?}",
                summary.checkpoints
            );
            assert_eq!(
                resumes_from.map(|c| c.0),
                summary.checkpoints.last().map(|c| c.id)
            );
            resumes_from
        }
        other => panic!("expected a discard, got {other:?}"),
    };
    assert_eq!(sink.staged(), 0, "pre-committed work outlived the discard");
    match numbering_job(&sink)
        .run(memory_config(&location, 10))
        .await
        .unwrap()
    {
        Outcome::Completed(summary) => assert_eq!(summary.restored_from, resumes_from),
        other => panic!("expected completion, got {other:?}"),
    }
    assert_numbering(&sink.committed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_epoch_was_taken_over_cannot_commit() {
    let location = open_location("memory://").unwrap();
    let sink = MemorySink::default();
    let pipeline = Pipeline::new("fenced");
    pipeline
        .source(
            "generator",
            GeneratorSource::new(1 << 40, 10).with_batch_rows(1000),
        )
        .sink("memory", sink.clone());
    let handle = pipeline.build().unwrap().start(memory_config(&location, 5));
    while handle.progress().checkpoints < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // A successor takes the job: a newer epoch.
    let store = StateStore::new(&location, "fenced");
    let successor = store.claim_epoch().await.unwrap();
    let committed_at_takeover = sink.state.lock().unwrap().committed.len();

    let error = tokio::time::timeout(Duration::from_secs(30), handle.join())
        .await
        .expect("the zombie kept running")
        .expect_err("the zombie completed");
    assert!(
        matches!(error, Error::Fenced { newer, .. } if newer == successor),
        "{error}"
    );
    // At most a commit already past its fencing check when the successor arrived.
    let committed_after = sink.state.lock().unwrap().committed.len();
    assert!(
        committed_after <= committed_at_takeover + 1,
        "the zombie kept committing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_error_fails_the_job_and_names_the_operator() {
    let location = open_location("memory://").unwrap();
    let pipeline = Pipeline::new("failing").with_parallelism(2);
    pipeline
        .source("generator", GeneratorSource::new(100_000, 10))
        .key_by(["k"])
        .transform("explode", |_ctx| Ok(Exploding))
        .sink("memory", MemorySink::default());
    let error = pipeline
        .build()
        .unwrap()
        .run(memory_config(&location, 50))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("operator 'explode'"), "{message}");
    assert!(message.contains("row 77777 is bad"), "{message}");
    assert_eq!(error.domain(), tidewater::Domain::User);
}

/// Hand-ons seen by one subtask: for each, whether it came before the
/// end of input (`true`) or a checkpoint barrier.
type HandOns = Arc<Mutex<BTreeMap<usize, Vec<bool>>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_hands_on_before_each_barrier_and_once_more_at_the_end_knowing_which() {
    let location = open_location("memory://").unwrap();
    let seen = HandOns::default();
    let pipeline = Pipeline::new("hand-ons").with_parallelism(2);
    let recorder = seen.clone();
    pipeline
        .source(
            "generator",
            GeneratorSource::new(ROWS, KEYS).with_batch_rows(1000),
        )
        // Over about a second: checkpoints every 10 ms land before the end.
        .throttle(RateLimit::new(ROWS as f64 / 2.0))
        .key_by(["k"])
        .transform("record", move |ctx| {
            Ok(RecordHandOns {
                subtask: ctx.subtask,
                seen: recorder.clone(),
            })
        })
        .sink("memory", MemorySink::default());
    let outcome = pipeline
        .build()
        .unwrap()
        .run(memory_config(&location, 10))
        .await
        .unwrap();
    let Outcome::Completed(summary) = outcome else {
        panic!("expected completion, got {outcome:?}");
    };
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "both subtasks hand on: {seen:?}");
    for (subtask, ending) in seen.iter() {
        // One hand-on per periodic checkpoint, then the last one, which
        // alone knows it is the end (the final checkpoint follows it).
        let (last, barriers) = ending.split_last().expect("a hand-on");
        assert!(
            *last,
            "subtask {subtask}: the last hand-on is the end: {ending:?}"
        );
        assert!(
            barriers.iter().all(|e| !e),
            "subtask {subtask}: a hand-on before a barrier took itself for the end: {ending:?}"
        );
        assert_eq!(
            barriers.len() as u64 + 1,
            summary.progress.checkpoints,
            "subtask {subtask}: one hand-on per checkpoint before the final one"
        );
    }
}

/// Passes rows on and records each hand-on's [`Collector::is_ending`].
struct RecordHandOns {
    subtask: usize,
    seen: HandOns,
}

impl Operator for RecordHandOns {
    fn kind(&self) -> &str {
        "record-hand-ons"
    }
    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        out.emit(batch);
        Ok(())
    }
    fn before_barrier(&mut self, out: &mut Collector) -> Result<bool> {
        let mut seen = self.seen.lock().unwrap();
        seen.entry(self.subtask).or_default().push(out.is_ending());
        Ok(false)
    }
}

struct Exploding;

impl Operator for Exploding {
    fn kind(&self) -> &str {
        "exploding"
    }
    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let id = batch.column(0).as_primitive::<Int64Type>();
        if id.values().contains(&77_777) {
            return Err(Error::BadInput("row 77777 is bad".into()));
        }
        out.emit(batch);
        Ok(())
    }
}

#[test]
fn invalid_pipelines_are_refused_before_running() {
    let reused = Pipeline::new("dup");
    reused
        .source("same", GeneratorSource::new(10, 1))
        .sink("same", MemorySink::default());
    assert!(
        reused
            .build()
            .unwrap_err()
            .to_string()
            .contains("uid 'same' is used twice")
    );

    let dangling = Pipeline::new("dangling");
    dangling
        .source("gen", GeneratorSource::new(10, 1))
        .filter("f", |b| {
            Ok(arrow::array::BooleanArray::from(vec![true; b.num_rows()]))
        });
    assert!(
        dangling
            .build()
            .unwrap_err()
            .to_string()
            .contains("goes nowhere")
    );

    let bad_uid = Pipeline::new("uids");
    bad_uid
        .source("../escape", GeneratorSource::new(10, 1))
        .sink("s", MemorySink::default());
    assert!(
        bad_uid
            .build()
            .unwrap_err()
            .to_string()
            .contains("is not valid")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_feeds_two_branches_and_a_union_reads_two_sources() {
    fn assert_send<T: Send>() {}
    assert_send::<Pipeline>();
    assert_send::<tidewater::Stream>();

    let location = open_location("memory://").unwrap();
    let (copies, counts) = (MemorySink::default(), MemorySink::default());
    let (rows_a, rows_b, keys) = (50_000u64, 30_000u64, 100u64);
    let pipeline = Pipeline::new("branches").with_parallelism(2);
    let a = pipeline.source("a", GeneratorSource::new(rows_a, keys));
    let b = pipeline.source("b", GeneratorSource::new(rows_b, keys));
    let both = a.union([b]);
    // Fan-out: every batch of the union goes to both branches.
    both.clone().sink("copies", copies.clone());
    both.key_by(["k"])
        .aggregate("counts", AggregateSpec::new().count("n"))
        .sink("count-sink", counts.clone());
    // Declared here, built on another thread.
    let job = std::thread::spawn(move || pipeline.build())
        .join()
        .unwrap()
        .unwrap();
    let outcome = job.run(memory_config(&location, 20)).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)), "{outcome:?}");

    let mut ids: Vec<i64> = copies
        .committed()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<i64> = (0..rows_a as i64).chain(0..rows_b as i64).collect();
    expected.sort_unstable();
    assert!(
        ids == expected,
        "the copy branch did not get each row of both sources once"
    );

    let mut want: HashMap<i64, i64> = HashMap::new();
    for i in (0..rows_a).chain(0..rows_b) {
        *want.entry((splitmix64(i) % keys) as i64).or_default() += 1;
    }
    let mut got: HashMap<i64, i64> = HashMap::new();
    for batch in counts.committed() {
        let k = batch.column(0).as_primitive::<Int64Type>();
        let n = batch.column(1).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            assert!(
                got.insert(k.value(row), n.value(row)).is_none(),
                "key twice"
            );
        }
    }
    assert_eq!(got, want, "counts per key over the union");
}

/// A source of no rows with any schema: only its schema matters here.
struct NoRows(Arc<Schema>);

#[async_trait]
impl tidewater::Source for NoRows {
    fn kind(&self) -> &str {
        "no-rows"
    }
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.0.clone()
    }
    async fn splits(&self) -> Result<Vec<tidewater::Split>> {
        Ok(Vec::new())
    }
    async fn open(
        &self,
        split: &tidewater::Split,
        _cursor: Option<&tidewater::Cursor>,
    ) -> Result<Box<dyn tidewater::SplitReader>> {
        Err(Error::Internal(format!("no split {} to open", split.id)))
    }
}

#[test]
fn columns_are_checked_when_the_pipeline_is_built() {
    let refused = |pipeline: Pipeline| pipeline.build().unwrap_err().to_string();

    let missing_key = Pipeline::new("keys");
    missing_key
        .source("gen", GeneratorSource::new(10, 1))
        .key_by(["nope"])
        .aggregate("agg", AggregateSpec::new().count("n"))
        .sink("out", MemorySink::default());
    let message = refused(missing_key);
    assert!(message.contains("no column 'nope'"), "{message}");
    assert!(message.contains("after 'gen'"), "{message}");
    assert!(
        message.contains("id: Int64"),
        "lists the columns: {message}"
    );

    let missing_input = Pipeline::new("inputs");
    missing_input
        .source("gen", GeneratorSource::new(10, 1))
        .key_by(["k"])
        .aggregate("agg", AggregateSpec::new().sum("nope", "total"))
        .sink("out", MemorySink::default());
    let message = refused(missing_input);
    assert!(message.contains("aggregate 'agg'"), "{message}");
    assert!(message.contains("column 'nope'"), "{message}");

    let unhashable = Pipeline::new("types");
    let list = Arc::new(Schema::new(vec![Field::new(
        "tags",
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        true,
    )]));
    unhashable
        .source("lists", NoRows(list))
        .key_by(["tags"])
        .aggregate("agg", AggregateSpec::new().count("n"))
        .sink("out", MemorySink::default());
    let message = refused(unhashable);
    assert!(message.contains("column 'tags'"), "{message}");
    assert!(message.contains("cannot be hashed"), "{message}");

    let mixed = Pipeline::new("mixed");
    let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, false)]));
    let a = mixed.source("gen", GeneratorSource::new(10, 1));
    let b = mixed.source("strings", NoRows(other));
    a.union([b]).sink("out", MemorySink::default());
    let message = refused(mixed);
    assert!(message.contains("union of 'gen', 'strings'"), "{message}");
    assert!(message.contains("schemas differ"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meaningless_settings_are_refused_with_what_to_do() {
    let refused = |source: GeneratorSource| {
        let pipeline = Pipeline::new("meaningless");
        pipeline
            .source("gen", source)
            .sink("out", MemorySink::default());
        pipeline.build().unwrap_err().to_string()
    };
    let message = refused(GeneratorSource::new(10, 0));
    assert!(message.contains("source 'gen'"), "{message}");
    assert!(message.contains("keys is 0"), "{message}");
    let message = refused(GeneratorSource::new(10, 5).with_batch_rows(0));
    assert!(message.contains("batch_rows is 0"), "{message}");
    let message = refused(GeneratorSource::new(10, 5).with_splits(0));
    assert!(message.contains("splits is 0"), "{message}");

    let location = open_location("memory://").unwrap();
    for (config, words) in [
        (
            JobConfig::with_location(location.clone()).retain(0),
            "retain is 0",
        ),
        (
            JobConfig::with_location(location.clone()).checkpoint_interval(Some(Duration::ZERO)),
            "checkpoint interval is 0",
        ),
        (
            JobConfig::with_location(location.clone()).checkpoint_every_rows(Some(0)),
            "checkpoint_every_rows is 0",
        ),
        (
            JobConfig::with_location(location.clone()).channel_capacity(0),
            "channel_capacity is 0",
        ),
    ] {
        let pipeline = Pipeline::new("config");
        pipeline
            .source("gen", GeneratorSource::new(10, 5))
            .sink("out", MemorySink::default());
        let error = pipeline.build().unwrap().run(config).await.unwrap_err();
        assert!(matches!(error, Error::InvalidConfig(_)), "{error}");
        assert!(error.to_string().contains(words), "{error}");
    }
}
