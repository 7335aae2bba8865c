//! A job over time: its samples as the charts' points, and the runs they
//! came from (each restore, with the checkpoints it fell back past).

use serde::Serialize;
use tidewater_jobs::Sample;
use utoipa::ToSchema;

use super::views::rfc3339;

/// One point of a job's charts.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SampleView {
    /// The epoch of the run that reported it.
    pub epoch: u64,
    /// When, in ms since the Unix epoch (the charts' x axis).
    pub at_ms: i64,
    /// Rows read, including those before a restore.
    pub rows_done: u64,
    /// That run's recent rate.
    pub rows_per_second: Option<f64>,
    /// Rows read since the last completed checkpoint.
    pub exposure_rows: u64,
    /// Seconds since the last completed checkpoint (or the run's start).
    pub exposure_seconds: f64,
    /// What held the sources back, if anything.
    pub throttle: Option<String>,
    /// The replica's lag, where a source throttles on it.
    pub replica_lag_seconds: Option<f64>,
    /// Rows that run set aside as dead letters.
    pub rows_dead_lettered: u64,
}

/// One run of a job: a worker's lease, from its first sample to its last.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RunView {
    /// Its lease's epoch.
    pub epoch: u64,
    /// Its first sample.
    pub started_at: String,
    /// Its last sample.
    pub last_seen_at: String,
    /// The checkpoint it resumed from (null: it started from the beginning).
    pub restored_from: Option<u64>,
    /// Checkpoints its restore passed over as unreadable or corrupt.
    pub fallbacks: u64,
    /// Rows it found already done when it started.
    pub rows_at_start: u64,
    /// Rows done at its last sample.
    pub rows_at_end: u64,
    /// Rows it set aside as dead letters.
    pub rows_dead_lettered: u64,
}

/// A job's samples and runs, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct HistoryView {
    /// The job.
    pub job: i64,
    /// Its samples, oldest first (up to `limit`).
    pub samples: Vec<SampleView>,
    /// The runs those samples came from, oldest first.
    pub runs: Vec<RunView>,
}

impl SampleView {
    /// The view of a recorded sample.
    pub fn of(s: &Sample) -> SampleView {
        SampleView {
            epoch: s.epoch,
            at_ms: s.at_ms,
            rows_done: s.rows_done,
            rows_per_second: s.rows_per_second,
            exposure_rows: s.exposure_rows,
            exposure_seconds: s.exposure_ms as f64 / 1000.0,
            throttle: s.throttle.clone(),
            replica_lag_seconds: s.replica_lag_ms.map(|ms| ms as f64 / 1000.0),
            rows_dead_lettered: s.rows_dead_lettered,
        }
    }
}

impl HistoryView {
    /// The history of `job` from its samples, oldest first.
    pub fn of(job: i64, samples: &[Sample]) -> HistoryView {
        HistoryView {
            job,
            samples: samples.iter().map(SampleView::of).collect(),
            runs: runs(samples),
        }
    }
}

/// The runs of `samples` (oldest first): consecutive samples of one epoch
/// are one run.
pub fn runs(samples: &[Sample]) -> Vec<RunView> {
    samples
        .chunk_by(|a, b| a.epoch == b.epoch)
        .map(|run| {
            let (first, last) = (&run[0], &run[run.len() - 1]);
            RunView {
                epoch: first.epoch,
                started_at: rfc3339(first.at_ms),
                last_seen_at: rfc3339(last.at_ms),
                restored_from: first.restored_from,
                fallbacks: first.fallbacks,
                rows_at_start: first.rows_done,
                rows_at_end: last.rows_done,
                rows_dead_lettered: run.iter().map(|s| s.rows_dead_lettered).max().unwrap_or(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(epoch: u64, at_ms: i64, rows: u64) -> Sample {
        Sample {
            epoch,
            at_ms,
            rows_done: rows,
            rows_per_second: None,
            exposure_rows: 0,
            exposure_ms: 0,
            throttle: None,
            replica_lag_ms: Some(1500),
            rows_dead_lettered: rows / 100,
            restored_from: (epoch > 1).then_some(epoch * 10),
            fallbacks: u64::from(epoch == 3),
        }
    }

    #[test]
    fn consecutive_samples_of_an_epoch_are_one_run() {
        let samples = [
            sample(1, 1_000, 0),
            sample(1, 2_000, 500),
            sample(2, 5_000, 400),
            sample(3, 9_000, 400),
            sample(3, 10_000, 900),
        ];
        let runs = runs(&samples);
        let got: Vec<_> = runs
            .iter()
            .map(|r| {
                (
                    r.epoch,
                    r.restored_from,
                    r.fallbacks,
                    r.rows_at_start,
                    r.rows_at_end,
                    r.rows_dead_lettered,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, None, 0, 0, 500, 5),
                (2, Some(20), 0, 400, 400, 4),
                (3, Some(30), 1, 400, 900, 9),
            ]
        );
        assert_eq!(runs[2].started_at, "1970-01-01T00:00:09.000Z");
        assert_eq!(runs[2].last_seen_at, "1970-01-01T00:00:10.000Z");
    }

    #[test]
    fn no_samples_no_runs_and_lag_is_in_seconds() {
        assert!(runs(&[]).is_empty());
        let view = SampleView::of(&sample(1, 0, 0));
        assert_eq!(view.replica_lag_seconds, Some(1.5));
    }
}
