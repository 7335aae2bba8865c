//! The Prometheus exporter behind `GET /metrics`: the recorder every typed
//! event's counters, gauges and histograms go to, installed once per
//! process when the API is on.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tidewater_jobs::{JobRecord, JobState};

/// Histogram buckets for durations: 1 ms to 5 min.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Histogram buckets for sizes: 1 KiB to 16 GiB.
const BYTES: &[f64] = &[
    1024.0,
    16384.0,
    262144.0,
    1048576.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
    17179869184.0,
];

static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// The process's exporter, installed as the `metrics` recorder on first use.
pub fn handle() -> Result<PrometheusHandle, String> {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTES))
                .map_err(|e| e.to_string())?
                .install_recorder()
                .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
            let upkeep = handle.clone();
            // Histograms drain into their buckets on upkeep.
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    upkeep.run_upkeep();
                }
            });
            Ok(handle)
        })
        .clone()
}

/// Sets the per-job gauges from the job store's records, so that one
/// scrape of any process serving the store sees every job:
/// `tidewater_job_rows_done`, `tidewater_job_rows_total`,
/// `tidewater_job_rows_per_second`, `tidewater_job_exposure_seconds`,
/// `tidewater_job_running` (1 while RUNNING or CANCELLING) and
/// `tidewater_job_failed` (1 when FAILED), labelled by job name and id.
pub fn record_jobs(jobs: &[JobRecord]) {
    for job in jobs {
        let labels = [("job", job.name.clone()), ("id", job.id.to_string())];
        let p = &job.progress;
        let running = job.state.has_worker();
        metrics::gauge!("tidewater_job_rows_done", &labels).set(p.rows_done as f64);
        metrics::gauge!("tidewater_job_rows_total", &labels).set(p.rows_total.unwrap_or(0) as f64);
        metrics::gauge!("tidewater_job_rows_per_second", &labels)
            .set(p.rows_per_second.filter(|_| running).unwrap_or(0.0));
        metrics::gauge!("tidewater_job_exposure_seconds", &labels).set(if running {
            p.exposure_ms as f64 / 1000.0
        } else {
            0.0
        });
        metrics::gauge!("tidewater_job_running", &labels).set(f64::from(u8::from(running)));
        metrics::gauge!("tidewater_job_failed", &labels)
            .set(f64::from(u8::from(job.state == JobState::Failed)));
    }
}
