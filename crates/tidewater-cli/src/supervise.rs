//! A run under the job store: the job's record and lease around it. Before
//! the run the job is submitted (or found) and its lease taken; while it
//! runs a heartbeat renews the lease, reports progress and brings cancels
//! from the store; when it ends, the record says how.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tidewater_core::events::InternalEvent;
use tidewater_core::{JobControl, Outcome, ProgressSnapshot};
use tidewater_jobs::{
    CheckpointRecord, Ending, Heartbeat, JobError, JobRecord, JobStore, LeaseClock, NewJob, Owner,
    Report, Sample, StoreError, Submitted,
};

use crate::events::{
    CancelSeen, CheckpointsNotRecorded, HeartbeatNotStarted, JobEndNotRecorded, LeaseLost,
    LeaseRenewFailed, LeaseRenewed, LeaseTaken, SampleNotRecorded,
};
use crate::progress::{RecentRate, eta_seconds};
use crate::runner::RunHooks;

/// The job-store flags of every command that reads or writes jobs.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// The job store: `sqlite://PATH` or `postgres://...` (default: a
    /// SQLite file under the user's data folder,
    /// ~/.local/share/tidewater/jobs.sqlite).
    #[arg(long = "store", env = "TIDEWATER_STORE")]
    pub url: Option<String>,
}

impl StoreArgs {
    /// The store's URL.
    pub fn url(&self) -> String {
        self.url.clone().unwrap_or_else(tidewater_jobs::default_url)
    }

    /// Opens the store.
    pub async fn open(&self) -> anyhow::Result<Arc<dyn JobStore>> {
        Ok(Arc::from(tidewater_jobs::open(&self.url()).await?))
    }
}

/// What submitting a run found.
pub enum Admission {
    /// A job to run, once its lease is taken.
    Run(Pending),
    /// The idempotency key was used before: this is that job.
    SameKey(JobRecord),
    /// The job already succeeded.
    Succeeded(JobRecord),
}

/// What the store needs to know of a run's job.
pub struct Request<'a> {
    /// The job's name.
    pub name: &'a str,
    /// Where its state is (its identity, with the name).
    pub state_url: &'a str,
    /// The spec's text.
    pub spec: &'a str,
    /// The spec's file.
    pub spec_path: &'a std::path::Path,
    /// The idempotency key, if any.
    pub key: Option<&'a str>,
}

/// Submits the job to `store` (opened from `url`), or finds it: nothing is
/// opened or leased yet, so a submission that finds an earlier one touches
/// nothing else.
pub async fn submit(
    store: Arc<dyn JobStore>,
    url: &str,
    request: Request<'_>,
) -> Result<Admission, StoreError> {
    let submitted = store
        .submit(NewJob {
            name: request.name.to_string(),
            state_url: request.state_url.to_string(),
            spec: request.spec.to_string(),
            spec_path: Some(request.spec_path.display().to_string()),
            idempotency_key: request.key.map(str::to_string),
        })
        .await?;
    Ok(match submitted {
        Submitted::SameKey(job) => Admission::SameKey(job),
        Submitted::Existing(job) if job.state == tidewater_jobs::JobState::Succeeded => {
            Admission::Succeeded(job)
        }
        Submitted::Created(job) | Submitted::Existing(job) => Admission::Run(Pending {
            store,
            url: url.to_string(),
            job,
        }),
    })
}

/// A submitted job, not yet leased.
pub struct Pending {
    store: Arc<dyn JobStore>,
    url: String,
    job: JobRecord,
}

impl Pending {
    /// Takes the job's lease for `ttl`, at an epoch past `min_epoch` (the
    /// newest in its state store); `steal` takes it from a live holder.
    pub async fn lease(
        self,
        ttl: Duration,
        min_epoch: u64,
        steal: bool,
    ) -> Result<Supervised, StoreError> {
        let me = Owner::this_process();
        let sent = Instant::now();
        let job = self
            .store
            .take_lease(self.job.id, &me, ttl, min_epoch, steal)
            .await?;
        LeaseTaken {
            id: job.id,
            name: &job.name,
            epoch: job.epoch,
            store: &tidewater_core::redact_url(&self.url),
        }
        .emit();
        let clock = Arc::new(LeaseClock::new(
            &job.name,
            tidewater_core::Epoch(job.epoch),
            ttl,
            sent,
        ));
        Ok(Supervised {
            store: self.store,
            url: self.url,
            job,
            me,
            ttl,
            clock,
            heartbeat: None,
            ending: None,
            control: None,
            recorded: Arc::new(AtomicU64::new(0)),
        })
    }
}

/// A run holding its job's lease.
pub struct Supervised {
    store: Arc<dyn JobStore>,
    /// The store's URL, for the heartbeat's own connection.
    url: String,
    job: JobRecord,
    me: Owner,
    ttl: Duration,
    clock: Arc<LeaseClock>,
    heartbeat: Option<HeartbeatThread>,
    ending: Option<(Ending, Report)>,
    control: Option<JobControl>,
    /// The newest checkpoint recorded in the store.
    recorded: Arc<AtomicU64>,
}

/// Records the checkpoints the run completed since the last recorded one.
async fn record_checkpoints(
    store: &dyn JobStore,
    control: &JobControl,
    id: tidewater_jobs::JobId,
    epoch: u64,
    recorded: &AtomicU64,
) {
    let new = control.checkpoints_after(recorded.load(Ordering::Relaxed));
    let Some(last) = new.last().map(|c| c.id) else {
        return;
    };
    let records: Vec<_> = new.iter().map(|c| CheckpointRecord::of(c, epoch)).collect();
    match store.record_checkpoints(id, epoch, &records).await {
        Ok(()) => recorded.store(last, Ordering::Relaxed),
        Err(e) => CheckpointsNotRecorded { error: &e }.emit(),
    }
}

/// What the run of `epoch` reports of `p` for the dashboard's charts.
/// `report` is the heartbeat's report of the same snapshot.
fn sample(report: &Report, p: &ProgressSnapshot, epoch: u64) -> Sample {
    let live = tidewater_core::events::live::replica_lag;
    Sample {
        epoch,
        at_ms: now_ms(),
        rows_done: report.rows_done,
        rows_per_second: report.rows_per_second,
        exposure_rows: report.exposure_rows,
        exposure_ms: report.exposure_ms,
        throttle: report.throttle.clone(),
        replica_lag_ms: live().map(|lag| lag.as_millis() as u64),
        rows_dead_lettered: tidewater_core::events::live::rows_dead_lettered(),
        restored_from: p.restored_from,
        fallbacks: p.fallbacks,
    }
}

/// Records a sample, reporting (not failing on) a store that refuses it.
async fn record_sample(store: &dyn JobStore, id: tidewater_jobs::JobId, sample: &Sample) {
    if let Err(e) = store.record_sample(id, sample).await {
        SampleNotRecorded { error: &e }.emit();
    }
}

/// How often the heartbeat renews the lease and reports: a quarter of the
/// ttl, and at least every 2 s so that `status` and cancels are prompt.
fn heartbeat_interval(ttl: Duration) -> Duration {
    tidewater_jobs::lease::renewal_interval(ttl).min(Duration::from_secs(2))
}

/// What the heartbeat needs: the store to renew in, the run it reports on.
struct Beat {
    /// The store's URL: the heartbeat opens a connection of its own.
    url: String,
    control: JobControl,
    clock: Arc<LeaseClock>,
    id: tidewater_jobs::JobId,
    epoch: u64,
    me: Owner,
    ttl: Duration,
    recorded: Arc<AtomicU64>,
}

/// The heartbeat, on an OS thread with a runtime and a store connection of
/// its own: a job that keeps the run's tokio workers busy (decoding a large
/// restore, say) would otherwise delay its timer and its store's I/O, and a
/// renewal late by two thirds of the ttl loses the lease of a healthy run.
struct HeartbeatThread {
    /// Dropped or sent: the heartbeat stops.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Closed when the thread ends.
    done: tokio::sync::oneshot::Receiver<()>,
}

impl HeartbeatThread {
    fn start(beat: Beat) -> HeartbeatThread {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ended, done) = tokio::sync::oneshot::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("tidewater-heartbeat".into())
            .spawn(move || {
                let _ended = ended;
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(async move {
                        tokio::select! {
                            _ = beat.run() => {}
                            _ = stopped => {}
                        }
                    }),
                    Err(e) => HeartbeatNotStarted { error: &e }.emit(),
                }
            });
        if let Err(e) = spawned {
            // No renewals: the lease's deadline stops the run's commits.
            HeartbeatNotStarted { error: &e }.emit();
        }
        HeartbeatThread {
            stop: Some(stop),
            done,
        }
    }

    /// Stops the heartbeat and waits until it has (a renewal under way is
    /// dropped).
    async fn stop(mut self) {
        drop(self.stop.take());
        let _ = (&mut self.done).await;
    }
}

impl Beat {
    /// Renews the lease, reports progress and brings cancels, every
    /// [`heartbeat_interval`], until the store says the lease is gone.
    async fn run(self) {
        let (control, id, epoch, ttl) = (&self.control, self.id, self.epoch, self.ttl);
        let mut store: Option<Box<dyn JobStore>> = None;
        let mut rate = RecentRate::default();
        let mut cancelled = false;
        let mut sampled: Option<Instant> = None;
        // The first report soon, so that `status` shows the run at once.
        let mut wait = heartbeat_interval(ttl).min(Duration::from_millis(500));
        loop {
            let planned = Instant::now() + wait;
            tokio::time::sleep(wait).await;
            wait = heartbeat_interval(ttl);
            let sent = Instant::now();
            let store = match &store {
                Some(store) => store,
                None => match tidewater_jobs::open(&self.url).await {
                    Ok(opened) => store.insert(opened),
                    Err(e) => {
                        LeaseRenewFailed { error: &e }.emit();
                        continue;
                    }
                },
            };
            let p = control.progress();
            let recent = rate.observe(&p);
            let report = report(&p, recent);
            match store.heartbeat(id, epoch, &self.me, ttl, &report).await {
                Ok(Heartbeat::Renewed { cancel }) => {
                    self.clock.renewed(sent);
                    LeaseRenewed {
                        epoch,
                        late: sent.saturating_duration_since(planned),
                        took: sent.elapsed(),
                    }
                    .emit();
                    record_checkpoints(&**store, control, id, epoch, &self.recorded).await;
                    if Sample::due(p.elapsed, sampled.map(|at| at.elapsed())) {
                        sampled = Some(Instant::now());
                        record_sample(&**store, id, &sample(&report, &p, epoch)).await;
                    }
                    if let Some(discard) = cancel
                        && !cancelled
                    {
                        cancelled = true;
                        CancelSeen { discard }.emit();
                        if discard {
                            control.discard();
                        } else {
                            control.cancel();
                        }
                    }
                }
                Ok(Heartbeat::Lost(why)) => {
                    LeaseLost { why: &why }.emit();
                    self.clock.lose(why);
                    // The savepoint this asks for is refused by the
                    // lease: the run ends at once, committing nothing.
                    control.cancel();
                    return;
                }
                Err(e) => LeaseRenewFailed { error: &e }.emit(),
            }
        }
    }
}

impl Supervised {
    /// The lease, for the job's configuration.
    pub fn lease(&self) -> Arc<LeaseClock> {
        self.clock.clone()
    }

    /// The job's record as the lease was taken.
    pub fn job(&self) -> &JobRecord {
        &self.job
    }

    /// Records how the run ended (when it still holds the job) and stops
    /// the heartbeat.
    pub async fn finish(mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.stop().await;
        }
        let Some((ending, report)) = self.ending.take() else {
            return;
        };
        if let Some(control) = &self.control {
            let (id, epoch) = (self.job.id, self.job.epoch);
            record_checkpoints(&*self.store, control, id, epoch, &self.recorded).await;
            let p = control.progress();
            record_sample(&*self.store, id, &sample(&report, &p, epoch)).await;
        }
        match self
            .store
            .finish(self.job.id, self.job.epoch, ending, &report)
            .await
        {
            // A successor holds the job: its record is not ours to write.
            Ok(_) | Err(StoreError::Fenced { .. }) => {}
            Err(e) => JobEndNotRecorded { error: &e }.emit(),
        }
    }
}

impl RunHooks for Supervised {
    fn started(&mut self, control: &JobControl) {
        self.control = Some(control.clone());
        let beat = Beat {
            url: self.url.clone(),
            control: control.clone(),
            clock: self.clock.clone(),
            id: self.job.id,
            epoch: self.job.epoch,
            me: self.me.clone(),
            ttl: self.ttl,
            recorded: self.recorded.clone(),
        };
        self.heartbeat = Some(HeartbeatThread::start(beat));
    }

    fn ended(&mut self, outcome: &tidewater_core::Result<Outcome>, last: &ProgressSnapshot) {
        let ending = match outcome {
            Ok(Outcome::Completed(_)) | Ok(Outcome::AlreadyComplete { .. }) => Ending::Succeeded,
            Ok(Outcome::Cancelled { .. } | Outcome::Discarded { .. }) => Ending::Cancelled,
            Err(e) => Ending::Failed(JobError::of(e)),
        };
        self.ending = Some((ending, report(last, None)));
    }
}

/// This machine's clock, in ms since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What a heartbeat reports of `p`.
fn report(p: &ProgressSnapshot, rate: Option<f64>) -> Report {
    let now_ms = now_ms();
    Report {
        rows_done: p.rows_read,
        rows_total: (p.rows_total > 0).then_some(p.rows_total),
        rows_per_second: rate,
        eta_seconds: eta_seconds(p, rate),
        last_checkpoint: (p.last_checkpoint > 0).then_some(p.last_checkpoint),
        last_checkpoint_ms: (p.last_checkpoint > 0).then(|| now_ms - p.exposure.as_millis() as i64),
        exposure_rows: p.exposure_rows,
        exposure_ms: p.exposure.as_millis() as u64,
        throttle: (!p.throttled_by.is_empty()).then(|| p.throttled_by.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::RunHooks;

    /// A job that keeps the run's only tokio worker busy for three times
    /// as long as its lease is trusted still holds the lease: the heartbeat
    /// renews on a thread of its own.
    #[test]
    fn a_run_whose_workers_are_busy_keeps_its_lease() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name).display().to_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let url = format!("sqlite://{}", at("jobs.sqlite"));
            let store: Arc<dyn JobStore> = Arc::from(tidewater_jobs::open(&url).await.unwrap());
            let text = format!(
                "[job]\nname = \"busy\"\nstate = \"{}\"\n\n\
                 [sources.gen]\ntype = \"generator\"\nrows = 1_000_000\nkeys = 10\n\
                 rate_limit = 1000\n\n\
                 [sinks.out]\ninputs = [\"gen\"]\ntype = \"parquet\"\npath = \"{}\"\n",
                at("state"),
                at("out")
            );
            let spec = crate::spec::Spec::parse("busy.toml", &text, &|_| None).unwrap();
            let request = Request {
                name: "busy",
                state_url: &at("state"),
                spec: &text,
                spec_path: std::path::Path::new("busy.toml"),
                key: None,
            };
            let Admission::Run(pending) = submit(store, &url, request).await.unwrap() else {
                panic!("a new job is run");
            };
            // Trusted for 1.33 s, renewed every 500 ms.
            let ttl = Duration::from_secs(2);
            let mut supervised = pending.lease(ttl, 0, false).await.unwrap();
            let job = crate::build::build(&spec, 1).await.unwrap();
            let location = tidewater_core::open_location(&at("state")).unwrap();
            let config =
                tidewater_core::JobConfig::with_location(location).lease(supervised.lease());
            let handle = job.start(config);
            let control = handle.control();
            supervised.started(&control);
            // The only worker of the run's runtime is busy for 4 s.
            std::thread::sleep(Duration::from_secs(4));
            let lease = supervised.lease();
            let held = tidewater_core::Lease::check(&*lease);
            control.discard();
            let _ = handle.join().await;
            supervised.finish().await;
            held.expect("the lease is held after the run's workers were busy");
        });
    }
}
