//! The checkpoint coordinator: triggers checkpoints at the sources, collects
//! every task's ack, writes the manifest (the moment the checkpoint exists),
//! then tells the sinks to commit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::handle::Stop;
use super::lateness::{DelayLog, late_by};
use super::progress::{CheckpointPhases, CheckpointStats, Progress};
use super::task::{Control, Event, TaskTiming};
use crate::checkpoint::StateStore;
use crate::checkpoint::incremental::{carried_blobs, referenced_folders};
use crate::checkpoint::manifest::{
    BlobRecord, CheckpointKind, MANIFEST_FORMAT, Manifest, OperatorRecord,
};
use crate::error::{Error, Result};
use crate::events::{
    CheckpointCompleted, CheckpointDeclined, CheckpointDelayed, CheckpointStarted, CleanupFailed,
    InternalEvent, RetentionFailed, SavepointRequested, SinkCommitted,
};
use crate::failpoint;
use crate::ids::{CheckpointId, Epoch};
use crate::sink::{CommitHandle, Sink};

/// When periodic checkpoints are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trigger {
    pub interval: Option<Duration>,
    pub every_rows: Option<u64>,
}

/// How a run of the coordinator ended.
pub(crate) enum Ending {
    Completed {
        last: CheckpointId,
    },
    Cancelled {
        savepoint: CheckpointId,
    },
    /// Stopped without a savepoint; a rerun resumes from `last`.
    Discarded {
        last: Option<CheckpointId>,
    },
}

struct InFlight {
    id: CheckpointId,
    kind: CheckpointKind,
    pending: usize,
    started: Instant,
    phases: CheckpointPhases,
    manifest: Manifest,
    rows_read_in_run: u64,
    bytes: u64,
}

impl InFlight {
    /// Folds one task's timing in: each phase is the slowest task's.
    fn timed(&mut self, timing: TaskTiming) {
        let phases = &mut self.phases;
        let aligned = timing.began.saturating_duration_since(self.started);
        phases.align = phases.align.max(aligned);
        phases.snapshot = phases.snapshot.max(timing.snapshot);
        phases.upload = phases.upload.max(timing.upload);
    }
}

pub(crate) struct Coordinator {
    pub store: StateStore,
    pub epoch: Epoch,
    pub fingerprint: String,
    pub operators: Vec<OperatorRecord>,
    pub sinks: HashMap<String, Arc<dyn Sink>>,
    pub controls: Vec<UnboundedSender<Control>>,
    pub events: UnboundedReceiver<Event>,
    pub tasks: JoinSet<Result<()>>,
    pub task_count: usize,
    pub trigger: Trigger,
    pub retain: usize,
    /// The job's key groups, recorded in every manifest.
    pub key_groups: u32,
    pub next_id: CheckpointId,
    pub rows_before_run: u64,
    pub progress: Arc<Progress>,
    pub cancel: watch::Receiver<Stop>,
    /// A job store's lease, asked before each commit of progress.
    pub lease: Option<Arc<dyn crate::runtime::config::Lease>>,
    /// The newest completed checkpoint (the restored one, at first).
    pub last_completed: Option<CheckpointId>,
    /// A checkpoint whose manifest this run wrote and whose commits it has
    /// not all made: its pre-commits are its successor's to commit.
    pub committing: Option<CheckpointId>,
    /// The blobs of the last manifest this run wrote: incremental chains
    /// that go on carry theirs over.
    pub previous_blobs: Option<(CheckpointId, Vec<BlobRecord>)>,
    /// The folders each kept checkpoint's manifest lists: retention reads
    /// only the manifests this run did not write (once each).
    pub references: BTreeMap<CheckpointId, BTreeSet<CheckpointId>>,
}

impl Coordinator {
    pub async fn run(mut self) -> Result<Ending> {
        let result = self.run_inner().await;
        match &result {
            Err(error) if error.superseded() => self.leave_to_successor().await,
            Err(_) => self.tasks.abort_all(),
            Ok(_) => {}
        }
        result
    }

    /// A superseded run stops its tasks and discards what its epoch
    /// pre-committed, so that none of it waits for a restore that may be
    /// long past (best effort: a successor's restore discards it too);
    /// unless it was superseded between a manifest and the last of its
    /// commits, when those pre-commits belong to a checkpoint that exists
    /// and the successor's restore commits them.
    async fn leave_to_successor(&mut self) {
        self.stop_tasks().await;
        if self.committing.is_some() {
            // Its epoch's pre-commits include a checkpoint that exists: the
            // successor's restore commits them (and discards the rest).
            return;
        }
        for (uid, sink) in &self.sinks {
            if let Err(error) = sink.abort_epoch(self.store.job(), uid, self.epoch).await {
                CleanupFailed {
                    job: self.store.job(),
                    uid,
                    error: &error,
                }
                .emit();
            }
        }
    }

    /// After the final checkpoint every pre-commit of this run is
    /// committed: what is staged now is an older run's, pre-committed after
    /// this run restored (a paused worker that woke), and is discarded.
    async fn discard_leftovers(&self) {
        for (uid, sink) in &self.sinks {
            if let Err(error) = sink.abort_uncommitted(self.store.job(), uid).await {
                CleanupFailed {
                    job: self.store.job(),
                    uid,
                    error: &error,
                }
                .emit();
            }
        }
    }

    async fn run_inner(&mut self) -> Result<Ending> {
        let mut ticker = self.trigger.interval.map(|every| {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        let mut row_poll = tokio::time::interval(Duration::from_millis(20));
        let mut rows_at_last_trigger = self.progress.rows_read();
        let mut exhausted = 0usize;
        let mut in_flight: Option<InFlight> = None;
        let mut delays = DelayLog::default();
        let mut cancel_requested = false;
        let mut finishing = false;

        loop {
            let idle = in_flight.is_none() && !finishing;
            // Start what is due: a savepoint on cancel, the final checkpoint
            // once every source is exhausted.
            if idle && cancel_requested {
                in_flight = Some(self.start_or_cause(CheckpointKind::Savepoint).await?);
                continue;
            }
            if idle && exhausted == self.controls.len() {
                finishing = true;
                in_flight = Some(self.start_or_cause(CheckpointKind::Final).await?);
                continue;
            }
            tokio::select! {
                due = async { ticker.as_mut().expect("guarded").tick().await },
                    if ticker.is_some() && idle => {
                    rows_at_last_trigger = self.progress.rows_read();
                    let flight = self.start_or_cause(CheckpointKind::Periodic).await?;
                    let (now, every) = (Instant::now(), ticker.as_ref().expect("guarded").period());
                    if let Some(behind) = late_by(due.into_std(), now, every) {
                        CheckpointDelayed {
                            job: self.store.job(),
                            checkpoint: flight.id.0,
                            behind,
                            interval: every,
                            warn_of: delays.note(now),
                        }
                        .emit();
                    }
                    in_flight = Some(flight);
                }
                _ = row_poll.tick(), if idle && self.trigger.every_rows.is_some() => {
                    let every = self.trigger.every_rows.unwrap_or(u64::MAX);
                    if self.progress.rows_read().saturating_sub(rows_at_last_trigger) >= every {
                        rows_at_last_trigger = self.progress.rows_read();
                        in_flight = Some(self.start_or_cause(CheckpointKind::Periodic).await?);
                    }
                }
                changed = self.cancel.changed() => {
                    let stop = *self.cancel.borrow();
                    if changed.is_err() {
                        // The handle was dropped: nobody can cancel any more.
                        self.cancel = watch::channel(Stop::No).1;
                    } else if stop == Stop::Discarding {
                        return self.discard().await;
                    } else if stop == Stop::AtSavepoint && !cancel_requested {
                        SavepointRequested { job: self.store.job() }.emit();
                        cancel_requested = true;
                    }
                }
                event = self.events.recv() => {
                    match event {
                        Some(Event::SourceExhausted) => exhausted += 1,
                        Some(Event::Ack(ack)) => {
                            let Some(flight) = in_flight.as_mut() else {
                                return Err(Error::Internal(format!("ack for checkpoint {} with none in flight", ack.checkpoint)));
                            };
                            if flight.id != ack.checkpoint {
                                return Err(Error::Internal(format!(
                                    "ack for checkpoint {} while {} is in flight", ack.checkpoint, flight.id
                                )));
                            }
                            let data = match ack.result {
                                Ok(data) => data,
                                Err(error) => {
                                    CheckpointDeclined {
                                        job: self.store.job(),
                                        checkpoint: ack.checkpoint.0,
                                        error: &error,
                                    }
                                    .emit();
                                    return Err(error);
                                }
                            };
                            flight.bytes += data.blobs.iter().map(|b| b.bytes).sum::<u64>();
                            let previous = self.previous_blobs.as_ref().map(|(id, b)| (*id, b.as_slice()));
                            // Each chain's earlier blobs first: `complete` sorts stably.
                            flight.manifest.blobs.extend(carried_blobs(previous, &data.carried)?);
                            flight.manifest.blobs.extend(data.blobs);
                            flight.manifest.commits.extend(data.commits);
                            flight.rows_read_in_run += data.rows_read;
                            flight.timed(data.timing);
                            flight.pending -= 1;
                            if flight.pending == 0 {
                                let flight = in_flight.take().expect("in flight");
                                let kind = flight.kind;
                                let id = flight.id;
                                self.complete(flight).await?;
                                match kind {
                                    CheckpointKind::Periodic => {}
                                    CheckpointKind::Savepoint => {
                                        self.tasks.abort_all();
                                        return Ok(Ending::Cancelled { savepoint: id });
                                    }
                                    CheckpointKind::Final => {
                                        self.join_tasks().await?;
                                        self.discard_leftovers().await;
                                        return Ok(Ending::Completed { last: id });
                                    }
                                }
                            }
                        }
                        None => return Err(self.why_events_closed().await),
                    }
                }
                Some(joined) = self.tasks.join_next() => {
                    if let Err(error) = task_result(joined) {
                        return Err(self.root_cause(error).await);
                    }
                }
            }
        }
    }

    /// Aborts every task and waits until each stopped (an aborted task
    /// stops at its next await), so that no writer pre-commits anything
    /// after what the caller does next.
    async fn stop_tasks(&mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }

    /// Stops every task, then aborts the sinks' pre-committed work that no
    /// completed checkpoint refers to (every completed one is committed:
    /// [`Coordinator::complete`] commits before it returns).
    async fn discard(&mut self) -> Result<Ending> {
        self.stop_tasks().await;
        for (uid, sink) in &self.sinks {
            sink.abort_uncommitted(self.store.job(), uid)
                .await
                .map_err(|e| e.in_operator(uid, 0))?;
        }
        Ok(Ending::Discarded {
            last: self.last_completed,
        })
    }

    /// Starts a checkpoint; when a source task is gone, the error is the one
    /// that task died of, not the closed channel.
    async fn start_or_cause(&mut self, kind: CheckpointKind) -> Result<InFlight> {
        match self.start(kind) {
            Ok(flight) => Ok(flight),
            Err(error) => Err(self.root_cause(error).await),
        }
    }

    /// Sends checkpoint triggers (or the finish signal) to every source.
    fn start(&mut self, kind: CheckpointKind) -> Result<InFlight> {
        let id = self.next_id;
        self.next_id = id.next();
        CheckpointStarted {
            job: self.store.job(),
            checkpoint: id.0,
            kind,
        }
        .emit();
        for control in &self.controls {
            let message = match kind {
                CheckpointKind::Final => Control::Finish(id),
                _ => Control::Trigger {
                    checkpoint: id,
                    pause: kind == CheckpointKind::Savepoint,
                },
            };
            control
                .send(message)
                .map_err(|_| Error::Stopped("a source task stopped".into()))?;
        }
        let created_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        Ok(InFlight {
            id,
            kind,
            pending: self.task_count,
            started: Instant::now(),
            phases: CheckpointPhases::default(),
            rows_read_in_run: 0,
            bytes: 0,
            manifest: Manifest {
                format: MANIFEST_FORMAT,
                job: self.store.job().to_string(),
                checkpoint: id,
                kind,
                epoch: self.epoch,
                created_at_ms,
                fingerprint: self.fingerprint.clone(),
                partitioner: Some(crate::partition::partitioner()),
                key_groups: Some(self.key_groups),
                operators: self.operators.clone(),
                blobs: Vec::new(),
                commits: Vec::new(),
                rows_read: 0,
            },
        })
    }

    fn check_lease(&self) -> Result<()> {
        match &self.lease {
            Some(lease) => lease.check(),
            None => Ok(()),
        }
    }

    /// Makes the checkpoint exist (fenced, create-only), then commits its sink work.
    async fn complete(&mut self, flight: InFlight) -> Result<()> {
        let mut manifest = flight.manifest;
        manifest.rows_read = self.rows_before_run + flight.rows_read_in_run;
        manifest
            .blobs
            .sort_by(|a, b| (&a.uid, a.subtask).cmp(&(&b.uid, b.subtask)));
        manifest
            .commits
            .sort_by(|a, b| (&a.uid, a.subtask).cmp(&(&b.uid, b.subtask)));
        let mut phases = flight.phases;
        let writing = Instant::now();
        self.check_lease()?;
        self.store.check_epoch(self.epoch).await?;
        let id = manifest.checkpoint;
        failpoint::hit("before-manifest", id);
        self.store.write_manifest(&manifest).await?;
        self.committing = Some(manifest.checkpoint);
        self.previous_blobs = Some((id, manifest.blobs.clone()));
        self.references
            .insert(id, referenced_folders(&manifest.blobs));
        let took = flight.started.elapsed();
        phases.manifest = writing.elapsed();
        failpoint::hit("after-manifest", id);
        let committing = Instant::now();
        for (n, handle) in manifest.commits.iter().enumerate() {
            if n == 1 {
                failpoint::hit("mid-commit", id);
            }
            // The manifest exists: a successor's restore commits what is
            // left, so a worker whose lease ran out leaves it to them.
            self.check_lease()?;
            commit_all(self.store.job(), &self.sinks, std::slice::from_ref(handle)).await?;
        }
        failpoint::hit("after-commit", id);
        self.committing = None;
        phases.commit = committing.elapsed();
        self.last_completed = Some(id);
        let stats = CheckpointStats {
            id: manifest.checkpoint.0,
            kind: manifest.kind,
            duration: took,
            state_bytes: flight.bytes,
            triggered_at_ms: manifest.created_at_ms,
            phases,
        };
        self.progress
            .checkpoint_completed(stats, manifest.rows_read);
        CheckpointCompleted {
            job: self.store.job(),
            checkpoint: manifest.checkpoint.0,
            kind: manifest.kind,
            duration: took,
            phases,
            state_bytes: flight.bytes,
            commits: manifest.commits.len(),
            rows_read: manifest.rows_read,
        }
        .emit();
        self.apply_retention().await;
        Ok(())
    }

    async fn apply_retention(&mut self) {
        let result = async {
            let retention = self
                .store
                .retention(self.retain, &mut self.references)
                .await?;
            self.store.apply_retention(&retention).await
        }
        .await;
        if let Err(e) = result {
            // Old checkpoints cost space, not correctness: retry at the next one.
            RetentionFailed {
                job: self.store.job(),
                error: &e,
            }
            .emit();
        }
    }

    async fn join_tasks(&mut self) -> Result<()> {
        while let Some(joined) = self.tasks.join_next().await {
            task_result(joined)?;
        }
        Ok(())
    }

    /// After one task failed, stop the others and report the error that caused
    /// it, not the "downstream stopped" errors it set off.
    async fn root_cause(&mut self, first: Error) -> Error {
        self.tasks.abort_all();
        let mut best = first;
        while let Some(joined) = self.tasks.join_next().await {
            // A task stopped by `abort_all` tells nothing; one that panicked
            // does, as much as one that returned an error.
            if matches!(&joined, Err(e) if e.is_cancelled()) {
                continue;
            }
            if let Err(error) = task_result(joined)
                && is_secondary(&best)
                && !is_secondary(&error)
            {
                best = error;
            }
        }
        best
    }

    /// Every task dropped its event sender. A failing task drops its sender
    /// just before its result reaches the join set, so the event channel can
    /// close first: the error is the one a task failed with, and only when
    /// none failed is it a bug.
    async fn why_events_closed(&mut self) -> Error {
        let closed = "every task dropped its event channel";
        match self.root_cause(Error::Stopped(closed.into())).await {
            cause if is_secondary(&cause) => Error::Internal(closed.into()),
            cause => cause,
        }
    }
}

/// A joined task's outcome, with a panic as an internal error.
fn task_result(joined: std::result::Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
    joined.map_err(|e| Error::Internal(format!("a task panicked: {e}")))?
}

fn is_secondary(error: &Error) -> bool {
    match error {
        Error::Stopped(_) => true,
        Error::InOperator { source, .. } => is_secondary(source),
        _ => false,
    }
}

/// Commits sink handles (idempotent), in a stable order.
pub(crate) async fn commit_all(
    job: &str,
    sinks: &HashMap<String, Arc<dyn Sink>>,
    commits: &[CommitHandle],
) -> Result<()> {
    for handle in commits {
        let sink = sinks.get(&handle.uid).ok_or_else(|| Error::IncompatibleState {
            uid: handle.uid.clone(),
            checkpoint: handle.checkpoint,
            detail: "has pre-committed output in the checkpoint but is no longer a sink of the pipeline"
                .into(),
        })?;
        sink.commit(handle)
            .await
            .map_err(|e| e.in_operator(&handle.uid, handle.subtask))?;
        SinkCommitted {
            job,
            uid: &handle.uid,
            subtask: handle.subtask,
            checkpoint: handle.checkpoint.0,
        }
        .emit();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    /// A coordinator over `tasks`, which hold the only event sender.
    fn coordinator(
        tasks: JoinSet<Result<()>>,
        events: UnboundedReceiver<Event>,
        control: UnboundedSender<Control>,
        cancel: watch::Receiver<Stop>,
    ) -> Coordinator {
        let location = crate::open_location("memory://state").unwrap();
        Coordinator {
            store: StateStore::new(&location, "job"),
            epoch: Epoch(1),
            fingerprint: String::new(),
            operators: Vec::new(),
            sinks: HashMap::new(),
            controls: vec![control],
            events,
            tasks,
            task_count: 1,
            trigger: Trigger {
                interval: None,
                every_rows: None,
            },
            retain: 2,
            key_groups: 4096,
            next_id: CheckpointId(1),
            rows_before_run: 0,
            progress: Arc::new(Progress::new(0)),
            cancel,
            lease: None,
            last_completed: None,
            committing: None,
            previous_blobs: None,
            references: BTreeMap::new(),
        }
    }

    /// Runs a coordinator over one task that drops its event sender and only
    /// later ends with `ending` (a result, or a panic), without yielding in
    /// between, as a task's future drops its sender on its way out: the
    /// closed channel is seen before the task's end. The run's error.
    async fn error_of_a_task_ending_late(
        ending: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Error {
        let (events_tx, events) = unbounded_channel::<Event>();
        // The task holds the control receiver, as a source task does.
        let (control, controls) = unbounded_channel::<Control>();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            drop(events_tx);
            std::thread::sleep(Duration::from_millis(100));
            drop(controls);
            ending()
        });
        let (_keep, cancel) = watch::channel(Stop::No);
        match coordinator(tasks, events, control, cancel).run().await {
            Err(error) => error,
            Ok(_) => panic!("the run succeeded"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_failing_after_its_events_closed_reports_its_own_error() {
        let error = error_of_a_task_ending_late(|| {
            Err(Error::External {
                message: "No space left on device".into(),
                retryable: false,
            })
        })
        .await;
        assert!(
            error.to_string().contains("No space left on device"),
            "{error}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_panicking_after_its_events_closed_reports_the_panic() {
        let error = error_of_a_task_ending_late(|| panic!("a bug in an operator")).await;
        assert!(
            error.to_string().contains("a bug in an operator"),
            "{error}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_closing_with_no_task_failed_is_an_internal_error() {
        let error = error_of_a_task_ending_late(|| Ok(())).await;
        assert!(matches!(error, Error::Internal(_)), "{error}");
    }
}
