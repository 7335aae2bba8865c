//! How a job runs: where its state lives, when it checkpoints, how it restarts.

use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::incremental::ChainPolicy;
use crate::checkpoint::restore::RestoreOptions;
use crate::error::Result;
use crate::ids::Epoch;
use crate::store_url::{StoreLocation, open_location};

/// How a job runs: where its state lives and when it checkpoints.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tidewater_core::JobConfig;
///
/// let config = JobConfig::new("memory://")
///     .unwrap()
///     .checkpoint_interval(Some(Duration::from_secs(10)))
///     .retain(3);
/// assert_eq!(config.interval(), Some(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub(crate) state: StoreLocation,
    pub(crate) interval: Option<Duration>,
    pub(crate) every_rows: Option<u64>,
    pub(crate) retain: usize,
    pub(crate) key_groups: u32,
    /// Whether checkpoints are incremental.
    pub(crate) incremental: bool,
    /// When incremental chains start over.
    pub(crate) chain_policy: ChainPolicy,
    pub(crate) channel_capacity: usize,
    pub(crate) restore: RestoreOptions,
    pub(crate) max_restarts: u32,
    pub(crate) restart_backoff: Duration,
    /// Settings that cannot mean anything: the job refuses to start.
    pub(crate) refused: Vec<String>,
    /// A lease held in a job store, when the job runs under one.
    pub(crate) lease: Option<Arc<dyn Lease>>,
}

/// A lease on the job held outside the state store (a job store's): the
/// run claims the lease's epoch as its fencing token, and asks the lease
/// before every commit of progress, so that a worker that lost it (a
/// pause, a partition) stops committing by its own clock.
pub trait Lease: Send + Sync + std::fmt::Debug {
    /// The epoch the lease was taken with: the run's fencing token.
    fn epoch(&self) -> Epoch;

    /// `Ok` while the run may still commit;
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) once the lease may have
    /// run out.
    fn check(&self) -> Result<()>;
}

impl JobConfig {
    /// State under `location`: a local folder, `file://` or `memory://` URL.
    /// Defaults: a checkpoint every 10 s, the last 3 kept.
    pub fn new(location: &str) -> Result<Self> {
        Ok(Self::with_location(open_location(location)?))
    }

    /// State in an already opened store.
    pub fn with_location(state: StoreLocation) -> Self {
        JobConfig {
            state,
            interval: Some(Duration::from_secs(10)),
            every_rows: None,
            retain: 3,
            key_groups: crate::partition::DEFAULT_KEY_GROUPS,
            incremental: false,
            chain_policy: ChainPolicy::default(),
            channel_capacity: 4,
            restore: RestoreOptions::default(),
            max_restarts: 3,
            restart_backoff: Duration::from_secs(1),
            refused: Vec::new(),
            lease: None,
        }
    }

    /// Runs under `lease`: the run claims exactly its epoch in the state
    /// store (refused when a newer one exists) and checks it before each
    /// manifest and sink commit.
    pub fn lease(mut self, lease: Arc<dyn Lease>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Time between checkpoints; `None` turns periodic checkpoints off (a
    /// final checkpoint and savepoints are still taken).
    pub fn checkpoint_interval(mut self, interval: Option<Duration>) -> Self {
        if interval == Some(Duration::ZERO) {
            self.refused.push(
                "the checkpoint interval is 0: give a duration above zero, or None to turn \
                 periodic checkpoints off"
                    .into(),
            );
        }
        self.interval = interval;
        self
    }

    /// Also checkpoint after this many rows read since the last trigger.
    pub fn checkpoint_every_rows(mut self, rows: Option<u64>) -> Self {
        if rows == Some(0) {
            self.refused
                .push("checkpoint_every_rows is 0: give a row count above zero, or None".into());
        }
        self.every_rows = rows.filter(|r| *r > 0);
        self
    }

    /// How many key groups keyed state is split into when the job first
    /// starts (default 4096, at most 32768): the most subtasks a keyed
    /// operator can ever run. A job that resumes keeps the count in its
    /// checkpoints; a different one here is then ignored, with a warning.
    pub fn key_groups(mut self, count: u32) -> Self {
        if let Err(e) = crate::partition::check_key_groups(count, 1) {
            self.refused.push(e.to_string());
        }
        self.key_groups = count;
        self
    }

    /// How many completed checkpoints to keep (at least 1; default 3).
    pub fn retain(mut self, checkpoints: usize) -> Self {
        if checkpoints == 0 {
            self.refused.push(
                "retain is 0: a restore needs at least the newest checkpoint, keep 1 or more"
                    .into(),
            );
        }
        self.retain = checkpoints.max(1);
        self
    }

    /// Incremental checkpoints (default off): keyed operators that track
    /// their changes (the aggregate, and any [`Operator`](crate::Operator)
    /// whose `track_changes` says so) write only the keys changed since the
    /// previous checkpoint, on top of a full snapshot taken at the first
    /// checkpoint of each run and again after
    /// [`full_checkpoint_every`](Self::full_checkpoint_every) - 1 deltas,
    /// or once the deltas hold as many rows as the full snapshot.
    ///
    /// Worth it when few keys change between checkpoints (a large state,
    /// or a short interval); when most keys change each time, full
    /// snapshots cost the same bytes and less work.
    ///
    /// ```
    /// use tidewater_core::JobConfig;
    /// let config = JobConfig::new("memory://").unwrap().incremental_checkpoints(true);
    /// assert!(config.is_incremental());
    /// ```
    pub fn incremental_checkpoints(mut self, on: bool) -> Self {
        self.incremental = on;
        self
    }

    /// With incremental checkpoints, a full snapshot at least every this
    /// many checkpoints of an operator subtask that found changes (default
    /// 100, [`DEFAULT_FULL_EVERY`](crate::checkpoint::incremental::DEFAULT_FULL_EVERY);
    /// at least 1, which makes every checkpoint full; a checkpoint that
    /// found no changes writes nothing and does not count). Long chains
    /// make checkpoints cheaper and restores slower: a restore reads the
    /// full snapshot and every delta after it.
    pub fn full_checkpoint_every(mut self, checkpoints: u32) -> Self {
        if checkpoints == 0 {
            self.refused
                .push("full_checkpoint_every is 0: give 1 (every checkpoint full) or more".into());
        }
        self.chain_policy = ChainPolicy {
            full_every: checkpoints.max(1),
        };
        self
    }

    /// Whether checkpoints are incremental.
    pub fn is_incremental(&self) -> bool {
        self.incremental
    }

    /// The chain policy when checkpoints are incremental.
    pub(crate) fn incremental(&self) -> Option<ChainPolicy> {
        self.incremental.then_some(self.chain_policy)
    }

    /// Batches buffered per channel (default 4): the backpressure window.
    pub fn channel_capacity(mut self, batches: usize) -> Self {
        if batches == 0 {
            self.refused
                .push("channel_capacity is 0: a channel must hold at least one batch".into());
        }
        self.channel_capacity = batches.max(1);
        self
    }

    /// How often the job restarts itself from its last checkpoint after a
    /// retryable error (default 3; 0 fails at once). Waits `backoff`, doubling
    /// each time (default 1 s).
    pub fn restarts(mut self, max: u32, backoff: Duration) -> Self {
        self.max_restarts = max;
        self.restart_backoff = backoff;
        self
    }

    /// Which pipeline changes a restore accepts.
    pub fn restore_options(mut self, options: RestoreOptions) -> Self {
        self.restore = options;
        self
    }

    /// The periodic interval.
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// Where state lives.
    pub fn state_location(&self) -> &StoreLocation {
        &self.state
    }
}
