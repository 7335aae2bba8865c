//! Showing a run's progress: the live bar, the plain line, the JSON object,
//! and a log writer that never tears the bar.

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidewater_core::ProgressSnapshot;

/// The bar on screen, if any: log lines are written around it.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn bar_slot() -> std::sync::MutexGuard<'static, Option<ProgressBar>> {
    BAR.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bar's look while the total is known: a fraction, then the counts;
/// checkpoints and throttling on a second line, so that the whole fits a
/// narrow terminal.
const WITH_TOTAL: &str = "{bar:30} {percent:>3}% {msg}\n  {prefix}";
/// Without a total there is no fraction to show: a spinner and the counts.
const WITHOUT_TOTAL: &str = "{spinner} {msg}\n  {prefix}";

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("a valid template")
}

/// Starts the live bar on stderr.
pub fn start_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
    bar.set_style(style(WITHOUT_TOTAL));
    *bar_slot() = Some(bar.clone());
    bar
}

/// Redraws the bar for `p`, at `rate` rows/s.
pub fn update_bar(bar: &ProgressBar, p: &ProgressSnapshot, rate: Option<f64>) {
    match (p.rows_total > 0, bar.length().is_some()) {
        (true, false) => bar.set_style(style(WITH_TOTAL)),
        (false, true) => {
            bar.unset_length();
            bar.set_style(style(WITHOUT_TOTAL));
        }
        _ => {}
    }
    if p.rows_total > 0 {
        bar.set_length(p.rows_total.max(p.rows_read));
    }
    bar.set_position(p.rows_read);
    let (work, state) = progress_parts(p, rate);
    bar.set_message(work);
    bar.set_prefix(state);
}

/// Takes the bar off the screen.
pub fn finish_bar(bar: &ProgressBar) {
    bar.finish_and_clear();
    *bar_slot() = None;
}

/// The rate over the last [`RATE_WINDOW`] of this run, for the rows/s and
/// the ETA shown while a job runs. An average since the start would count a
/// rate limit's first burst, and the rows a restore skipped, as speed.
#[derive(Debug, Default)]
pub struct RecentRate {
    /// `(elapsed, rows read in this run)`, oldest first.
    samples: std::collections::VecDeque<(Duration, u64)>,
}

/// How far back [`RecentRate`] looks.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

impl RecentRate {
    /// Adds a reading; returns the rate in rows/s, `None` until there is
    /// any work to measure.
    pub fn observe(&mut self, p: &ProgressSnapshot) -> Option<f64> {
        let done = p.rows_read.saturating_sub(p.rows_restored);
        self.samples.push_back((p.elapsed, done));
        while self.samples.len() > 2 && p.elapsed.saturating_sub(self.samples[1].0) >= RATE_WINDOW {
            self.samples.pop_front();
        }
        let (t0, r0) = self.samples[0];
        let span = p.elapsed.saturating_sub(t0).as_secs_f64();
        if span >= 0.5 {
            Some(done.saturating_sub(r0) as f64 / span)
        } else if done > 0 {
            // Too short a window yet: the run's average.
            Some(done as f64 / p.elapsed.as_secs_f64().max(1e-3))
        } else {
            None
        }
    }
}

/// Seconds the rest will take at `rate` rows/s, when the total and a rate
/// are known.
pub fn eta_seconds(p: &ProgressSnapshot, rate: Option<f64>) -> Option<f64> {
    let rate = rate.filter(|r| *r > 0.0)?;
    (p.rows_total > 0).then(|| p.rows_total.saturating_sub(p.rows_read) as f64 / rate)
}

/// How long the rest will take at `rate` rows/s: `"unknown"` without a
/// total or a rate, never `"0s"` while rows remain.
pub fn eta(p: &ProgressSnapshot, rate: Option<f64>) -> String {
    let Some(seconds) = eta_seconds(p, rate) else {
        return "unknown".to_string();
    };
    if p.rows_read >= p.rows_total {
        return "finishing".to_string();
    }
    eta_text(seconds)
}

/// `<1s`, `3s`, `2m 5s`: a time to go, never `0s`.
pub fn eta_text(seconds: f64) -> String {
    if seconds < 1.0 {
        return "<1s".to_string();
    }
    humantime::format_duration(Duration::from_secs(seconds.ceil() as u64)).to_string()
}

/// The two halves of the progress line: the work (rows done/total, rate,
/// ETA) and the job's state (checkpoints and the last one's age,
/// throttling).
fn progress_parts(p: &ProgressSnapshot, rate: Option<f64>) -> (String, String) {
    let total = if p.rows_total == 0 {
        "?".to_string()
    } else {
        p.rows_total.to_string()
    };
    let work = format!(
        "{}/{total} rows, {:.2}M rows/s, ETA {}",
        p.rows_read,
        rate.unwrap_or(0.0) / 1e6,
        eta(p, rate)
    );
    let checkpoints = match p.checkpoints {
        0 => "no checkpoint yet".to_string(),
        n => format!(
            "{n} checkpoint{} (last #{} {:.1}s ago)",
            if n == 1 { "" } else { "s" },
            p.last_checkpoint,
            p.exposure.as_secs_f64()
        ),
    };
    let throttled = match p.throttled_sources {
        _ if !p.throttled_by.is_empty() => format!(", throttled: {}", p.throttled_by.join(", ")),
        0 if p.throttled.as_secs_f64() < 0.1 => String::new(),
        0 => format!(", throttled {:.1}s so far", p.throttled.as_secs_f64()),
        n => format!(
            ", throttled now: {n} source{} waiting ({:.1}s so far)",
            if n == 1 { "" } else { "s" },
            p.throttled.as_secs_f64()
        ),
    };
    (work, format!("{checkpoints}{throttled}"))
}

/// One line: rows done/total, rate, ETA, checkpoints and the last one's
/// age, throttling.
pub fn progress_text(p: &ProgressSnapshot, rate: Option<f64>) -> String {
    let (work, state) = progress_parts(p, rate);
    format!("{work}, {state}")
}

/// The same as one JSON object (`--progress json`).
pub fn progress_json(p: &ProgressSnapshot, rate: Option<f64>) -> serde_json::Value {
    serde_json::json!({
        "rows_read": p.rows_read,
        "rows_total": (p.rows_total > 0).then_some(p.rows_total),
        "rows_per_s": rate.unwrap_or(0.0),
        "eta": eta(p, rate),
        "checkpoints": p.checkpoints,
        "last_checkpoint": p.last_checkpoint,
        "last_checkpoint_age_s": p.exposure.as_secs_f64(),
        "throttled_sources": p.throttled_sources,
        "throttled_s": p.throttled.as_secs_f64(),
        "throttled_by": p.throttled_by,
        "elapsed_s": p.elapsed.as_secs_f64(),
    })
}

/// stderr for log lines: while a bar is up, each write suspends it, so a
/// line never lands in the middle of the bar.
pub struct BarSafeStderr;

impl Write for BarSafeStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = bar_slot().clone();
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(read: u64, total: u64, elapsed_s: u64) -> ProgressSnapshot {
        ProgressSnapshot {
            rows_read: read,
            rows_total: total,
            elapsed: Duration::from_secs(elapsed_s),
            ..ProgressSnapshot::default()
        }
    }

    #[test]
    fn the_eta_is_unknown_without_a_total_and_never_zero_while_rows_remain() {
        let rate = Some(100.0);
        assert_eq!(eta(&snapshot(1000, 0, 1), rate), "unknown");
        assert_eq!(eta(&snapshot(0, 1000, 1), None), "unknown");
        assert_eq!(eta(&snapshot(0, 1000, 1), Some(0.0)), "unknown");
        assert_eq!(eta(&snapshot(500, 1000, 5), rate), "5s");
        assert_eq!(eta(&snapshot(999_990, 1_000_000, 10), rate), "<1s");
        assert_eq!(eta(&snapshot(1000, 1000, 1), rate), "finishing");
        assert!(progress_text(&snapshot(10, 0, 1), rate).starts_with("10/? rows"));
        let held = ProgressSnapshot {
            throttled_sources: 2,
            throttled_by: vec!["replica lag 3.2s > 2.0s".into()],
            ..snapshot(10, 100, 1)
        };
        assert!(
            progress_text(&held, rate).ends_with(", throttled: replica lag 3.2s > 2.0s"),
            "{}",
            progress_text(&held, rate)
        );
    }

    fn at(ms: u64, read: u64, restored: u64) -> ProgressSnapshot {
        ProgressSnapshot {
            rows_read: read,
            rows_restored: restored,
            elapsed: Duration::from_millis(ms),
            ..ProgressSnapshot::default()
        }
    }

    #[test]
    fn the_rate_is_this_runs_over_the_last_ten_seconds() {
        /// (elapsed ms, rows read, rows restored)
        type Reading = (u64, u64, u64);
        let cases: &[(&str, &[Reading], Option<f64>)] = &[
            ("nothing read yet", &[(200, 0, 0)], None),
            (
                "a short window: the average",
                &[(200, 1000, 0)],
                Some(5000.0),
            ),
            (
                "a burst at the start does not count once the window moves on",
                &[
                    (200, 200_000, 0),
                    (10_200, 300_000, 0),
                    (20_200, 400_000, 0),
                ],
                Some(10_000.0),
            ),
            (
                "restored rows are not this run's work",
                &[(200, 900_000, 900_000), (1_200, 901_000, 900_000)],
                Some(1000.0),
            ),
            (
                "a restore counted after the first reading is not a jump",
                &[(200, 0, 0), (1_200, 901_000, 900_000)],
                Some(1000.0),
            ),
            (
                "held by a throttle: zero",
                &[(200, 5000, 0), (5_200, 5000, 0)],
                Some(0.0),
            ),
        ];
        for (what, readings, expected) in cases {
            let mut rate = RecentRate::default();
            let mut got = None;
            for (ms, read, restored) in readings.iter() {
                got = rate.observe(&at(*ms, *read, *restored));
            }
            assert_eq!(got, *expected, "{what}");
        }
    }
}
