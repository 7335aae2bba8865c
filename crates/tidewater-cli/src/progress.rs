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

/// Starts the live bar on stderr.
pub fn start_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr_with_hz(5));
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {percent:>3}% {msg}").expect("a valid template"),
    );
    *bar_slot() = Some(bar.clone());
    bar
}

/// Redraws the bar for `p`.
pub fn update_bar(bar: &ProgressBar, p: &ProgressSnapshot) {
    if p.rows_total > 0 {
        bar.set_length(p.rows_total.max(p.rows_read));
    } else {
        // Unknown total: the bar shows no fraction, only the counts.
        bar.set_length(0);
    }
    bar.set_position(p.rows_read);
    bar.set_message(progress_text(p));
}

/// Takes the bar off the screen.
pub fn finish_bar(bar: &ProgressBar) {
    bar.finish_and_clear();
    *bar_slot() = None;
}

/// How long the rest will take at the rate so far: `"unknown"` without a
/// total or a rate, never `"0s"` while rows remain.
pub fn eta(p: &ProgressSnapshot) -> String {
    let rate = p.rows_read as f64 / p.elapsed.as_secs_f64().max(1e-3);
    if p.rows_total == 0 || rate <= 0.0 {
        return "unknown".to_string();
    }
    if p.rows_read >= p.rows_total {
        return "finishing".to_string();
    }
    let seconds = (p.rows_total - p.rows_read) as f64 / rate;
    if seconds < 1.0 {
        return "<1s".to_string();
    }
    humantime::format_duration(Duration::from_secs(seconds.ceil() as u64)).to_string()
}

/// One line: rows done/total, rate, ETA, checkpoints and the last one's
/// age, what a crash now would redo, throttling.
pub fn progress_text(p: &ProgressSnapshot) -> String {
    let rate = p.rows_read as f64 / p.elapsed.as_secs_f64().max(1e-3);
    let total = if p.rows_total == 0 {
        "?".to_string()
    } else {
        p.rows_total.to_string()
    };
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
    format!(
        "{}/{total} rows, {:.2}M rows/s, ETA {}, {checkpoints}{throttled}",
        p.rows_read,
        rate / 1e6,
        eta(p)
    )
}

/// The same as one JSON object (`--progress json`).
pub fn progress_json(p: &ProgressSnapshot) -> serde_json::Value {
    serde_json::json!({
        "rows_read": p.rows_read,
        "rows_total": (p.rows_total > 0).then_some(p.rows_total),
        "rows_per_s": p.rows_read as f64 / p.elapsed.as_secs_f64().max(1e-3),
        "eta": eta(p),
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
        assert_eq!(eta(&snapshot(1000, 0, 1)), "unknown");
        assert_eq!(eta(&snapshot(0, 1000, 1)), "unknown");
        assert_eq!(eta(&snapshot(500, 1000, 5)), "5s");
        assert_eq!(eta(&snapshot(999_999, 1_000_000, 10)), "<1s");
        assert_eq!(eta(&snapshot(1000, 1000, 1)), "finishing");
        assert!(progress_text(&snapshot(10, 0, 1)).starts_with("10/? rows"));
        let held = ProgressSnapshot {
            throttled_sources: 2,
            throttled_by: vec!["replica lag 3.2s > 2.0s".into()],
            ..snapshot(10, 100, 1)
        };
        assert!(
            progress_text(&held).ends_with(", throttled: replica lag 3.2s > 2.0s"),
            "{}",
            progress_text(&held)
        );
    }
}
