//! What another checkpoint interval would cost and save this job, from its
//! own live figures: the estimate behind `tidewater-bench interval`'s
//! measured report (overhead per interval, rows redone after a crash),
//! applied to the rate the job runs at and the pauses its checkpoints take.

use serde::Serialize;
use tidewater_jobs::CheckpointRecord;
use utoipa::ToSchema;

/// The intervals every estimate shows, in seconds, beside the job's own.
const CANDIDATES: [f64; 6] = [1.0, 5.0, 10.0, 30.0, 60.0, 300.0];

/// How many of the newest checkpoints the figures are the median of.
const RECENT: usize = 20;

/// The estimate for one interval.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct IntervalOption {
    /// The interval, in seconds.
    pub interval_seconds: f64,
    /// Whether it is (about) the interval the job checkpoints at now.
    pub current: bool,
    /// The share of the run its checkpoints would hold the tasks: their
    /// pause over the interval (null without a checkpoint yet).
    pub overhead_percent: Option<f64>,
    /// Rows a crash redoes on average: half an interval at this rate.
    pub rework_rows_mean: Option<f64>,
    /// Rows a crash redoes at worst: a whole interval at this rate.
    pub rework_rows_worst: Option<f64>,
    /// Seconds of work a crash redoes on average.
    pub rework_seconds_mean: f64,
}

/// The interval-versus-rework estimate of one job.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct IntervalsView {
    /// The job.
    pub job: i64,
    /// The rate the estimate assumes (the job's recent rate).
    pub rows_per_second: Option<f64>,
    /// The median time a checkpoint holds the tasks (align + snapshot) of
    /// the last checkpoints, in ms.
    pub pause_ms: Option<f64>,
    /// The median time from trigger to manifest, in ms.
    pub duration_ms: Option<f64>,
    /// The median time between the job's periodic checkpoints.
    pub observed_interval_seconds: Option<f64>,
    /// Each interval's estimate, shortest first.
    pub options: Vec<IntervalOption>,
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The estimate for job `job` at `rate` rows/s, from its checkpoints
/// (oldest first).
pub fn estimate(job: i64, rate: Option<f64>, checkpoints: &[CheckpointRecord]) -> IntervalsView {
    let recent = &checkpoints[checkpoints.len().saturating_sub(RECENT)..];
    let pause_ms = median(
        recent
            .iter()
            .map(|c| (c.align_ms + c.snapshot_ms) as f64)
            .collect(),
    );
    let duration_ms = median(recent.iter().map(|c| c.duration_ms as f64).collect());
    // Between periodic checkpoints of one run: a restart or a savepoint is no interval.
    let gaps = recent
        .windows(2)
        .filter(|w| w[0].epoch == w[1].epoch && w[0].kind == "periodic" && w[1].kind == "periodic")
        .map(|w| (w[1].triggered_ms - w[0].triggered_ms) as f64 / 1000.0)
        .filter(|gap| *gap > 0.0)
        .collect();
    let observed = median(gaps);
    let mut intervals: Vec<f64> = CANDIDATES.to_vec();
    if let Some(now) = observed {
        // The job's own, unless a candidate is within 10% of it.
        if !intervals.iter().any(|c| (c / now - 1.0).abs() <= 0.1) {
            intervals.push(now);
        }
    }
    intervals.sort_by(f64::total_cmp);
    let rate = rate.filter(|r| r.is_finite() && *r >= 0.0);
    let options = intervals
        .into_iter()
        .map(|interval| IntervalOption {
            interval_seconds: interval,
            current: observed.is_some_and(|now| (interval / now - 1.0).abs() <= 0.1),
            overhead_percent: pause_ms.map(|p| (p / (interval * 1000.0) * 100.0).min(100.0)),
            rework_rows_mean: rate.map(|r| r * interval / 2.0),
            rework_rows_worst: rate.map(|r| r * interval),
            rework_seconds_mean: interval / 2.0,
        })
        .collect();
    IntervalsView {
        job,
        rows_per_second: rate,
        pause_ms,
        duration_ms,
        observed_interval_seconds: observed,
        options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(id: u64, epoch: u64, kind: &str, at_s: f64, pause: u64) -> CheckpointRecord {
        CheckpointRecord {
            id,
            epoch,
            kind: kind.into(),
            triggered_ms: (at_s * 1000.0) as i64,
            duration_ms: pause * 3,
            bytes: 0,
            align_ms: pause / 2,
            snapshot_ms: pause - pause / 2,
            upload_ms: 0,
            manifest_ms: 0,
            commit_ms: 0,
        }
    }

    #[test]
    fn the_estimate_follows_the_rate_and_the_pauses() {
        // Every 2 s in one run, then a restart (no gap counted across it).
        let checkpoints = [
            checkpoint(1, 1, "periodic", 0.0, 10),
            checkpoint(2, 1, "periodic", 2.0, 20),
            checkpoint(3, 1, "periodic", 4.0, 30),
            checkpoint(4, 2, "periodic", 100.0, 20),
            checkpoint(5, 2, "savepoint", 101.0, 20),
        ];
        let view = estimate(7, Some(1000.0), &checkpoints);
        assert_eq!(view.observed_interval_seconds, Some(2.0));
        assert_eq!(view.pause_ms, Some(20.0));
        assert_eq!(view.duration_ms, Some(60.0));
        let table: Vec<_> = view
            .options
            .iter()
            .map(|o| {
                (
                    o.interval_seconds,
                    o.current,
                    o.overhead_percent,
                    o.rework_rows_mean,
                )
            })
            .collect();
        assert_eq!(
            table,
            [
                (1.0, false, Some(2.0), Some(500.0)),
                (2.0, true, Some(1.0), Some(1000.0)),
                (5.0, false, Some(0.4), Some(2500.0)),
                (10.0, false, Some(0.2), Some(5000.0)),
                (30.0, false, Some(20.0 / 30_000.0 * 100.0), Some(15000.0)),
                (60.0, false, Some(20.0 / 60_000.0 * 100.0), Some(30000.0)),
                (300.0, false, Some(20.0 / 300_000.0 * 100.0), Some(150000.0)),
            ]
        );
        assert_eq!(view.options[1].rework_rows_worst, Some(2000.0));
    }

    #[test]
    fn a_candidate_near_the_jobs_interval_is_marked_current_and_nothing_is_made_up() {
        let checkpoints = [
            checkpoint(1, 1, "periodic", 0.0, 5),
            checkpoint(2, 1, "periodic", 9.5, 5),
        ];
        let view = estimate(1, None, &checkpoints);
        let current: Vec<_> = view.options.iter().filter(|o| o.current).collect();
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].interval_seconds, 10.0);
        assert_eq!(view.options.len(), CANDIDATES.len());
        assert!(view.options.iter().all(|o| o.rework_rows_mean.is_none()));

        let none = estimate(1, Some(f64::NAN), &[]);
        assert_eq!(
            (none.pause_ms, none.observed_interval_seconds),
            (None, None)
        );
        assert!(
            none.options
                .iter()
                .all(|o| !o.current && o.overhead_percent.is_none())
        );
        assert_eq!(none.rows_per_second, None);
    }
}
