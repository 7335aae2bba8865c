//! The job state machine of DESIGN.md: which transitions are legal, as a
//! pure function.
//!
//! ```text
//! QUEUED ──start──▶ RUNNING ──succeed──▶ SUCCEEDED
//!   │                 │ ▲  └───fail────▶ FAILED ──start──▶ RUNNING
//!   │            cancel │ start (a lease taken over)
//!   ▼                 ▼ │
//! CANCELLED ◀─cancelled─ CANCELLING ──succeed / fail──▶ SUCCEEDED / FAILED
//!   └──start (resume)──▶ RUNNING
//! ```

use std::fmt;
use std::str::FromStr;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Submitted, not started.
    Queued,
    /// A worker holds its lease and runs it.
    Running,
    /// Finished: its final checkpoint exists.
    Succeeded,
    /// Stopped on an error; resumable from its last checkpoint.
    Failed,
    /// Asked to stop: the worker is taking a savepoint.
    Cancelling,
    /// Stopped on request; resumable from its savepoint.
    Cancelled,
}

/// What happens to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// A worker takes the lease and runs it (first run, resume, take-over).
    Start,
    /// The run finished.
    Succeed,
    /// The run failed.
    Fail,
    /// Someone asked it to stop.
    Cancel,
    /// The worker stopped it after a cancel (savepoint taken, or discarded).
    Cancelled,
}

/// `event` cannot happen to a job in `from`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {from} job cannot {event}")]
pub struct IllegalTransition {
    /// The state the job is in.
    pub from: JobState,
    /// What was asked.
    pub event: &'static str,
}

/// The state after `event` in `from`, or why it cannot happen.
///
/// ```
/// use tidewater_jobs::{JobEvent, JobState, transition};
///
/// assert_eq!(transition(JobState::Queued, JobEvent::Start), Ok(JobState::Running));
/// assert!(transition(JobState::Succeeded, JobEvent::Start).is_err());
/// ```
pub fn transition(from: JobState, event: JobEvent) -> Result<JobState, IllegalTransition> {
    use JobEvent as E;
    use JobState as S;
    let to = match (from, event) {
        // A worker whose lease expired is replaced: RUNNING stays RUNNING.
        (S::Queued | S::Running | S::Failed | S::Cancelled, E::Start) => S::Running,
        (S::Running | S::Cancelling, E::Succeed) => S::Succeeded,
        (S::Running | S::Cancelling, E::Fail) => S::Failed,
        (S::Queued | S::Cancelled, E::Cancel) => S::Cancelled,
        (S::Running | S::Cancelling, E::Cancel) => S::Cancelling,
        (S::Running | S::Cancelling, E::Cancelled) => S::Cancelled,
        _ => {
            return Err(IllegalTransition {
                from,
                event: event.verb(),
            });
        }
    };
    Ok(to)
}

impl JobEvent {
    fn verb(self) -> &'static str {
        match self {
            JobEvent::Start => "start",
            JobEvent::Succeed => "succeed",
            JobEvent::Fail => "fail",
            JobEvent::Cancel => "be cancelled",
            JobEvent::Cancelled => "end cancelled",
        }
    }
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelling,
        JobState::Cancelled,
    ];

    /// Whether a worker holds (or may still hold) the job: RUNNING or CANCELLING.
    pub fn has_worker(self) -> bool {
        matches!(self, JobState::Running | JobState::Cancelling)
    }

    /// Whether the job ended: SUCCEEDED, FAILED or CANCELLED.
    pub fn has_ended(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// The name stored and shown: `RUNNING`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "QUEUED",
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Cancelling => "CANCELLING",
            JobState::Cancelled => "CANCELLED",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;

    /// Case-insensitive: `running` and `RUNNING` are the same.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "'{s}' is not a job state; the states are {}",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transition_is_decided_by_the_table() {
        use JobEvent as E;
        use JobState as S;
        // Every (state, event) pair; None: illegal.
        let table: &[(S, E, Option<S>)] = &[
            (S::Queued, E::Start, Some(S::Running)),
            (S::Queued, E::Succeed, None),
            (S::Queued, E::Fail, None),
            (S::Queued, E::Cancel, Some(S::Cancelled)),
            (S::Queued, E::Cancelled, None),
            (S::Running, E::Start, Some(S::Running)),
            (S::Running, E::Succeed, Some(S::Succeeded)),
            (S::Running, E::Fail, Some(S::Failed)),
            (S::Running, E::Cancel, Some(S::Cancelling)),
            (S::Running, E::Cancelled, Some(S::Cancelled)),
            (S::Succeeded, E::Start, None),
            (S::Succeeded, E::Succeed, None),
            (S::Succeeded, E::Fail, None),
            (S::Succeeded, E::Cancel, None),
            (S::Succeeded, E::Cancelled, None),
            (S::Failed, E::Start, Some(S::Running)),
            (S::Failed, E::Succeed, None),
            (S::Failed, E::Fail, None),
            (S::Failed, E::Cancel, None),
            (S::Failed, E::Cancelled, None),
            (S::Cancelling, E::Start, None),
            (S::Cancelling, E::Succeed, Some(S::Succeeded)),
            (S::Cancelling, E::Fail, Some(S::Failed)),
            (S::Cancelling, E::Cancel, Some(S::Cancelling)),
            (S::Cancelling, E::Cancelled, Some(S::Cancelled)),
            (S::Cancelled, E::Start, Some(S::Running)),
            (S::Cancelled, E::Succeed, None),
            (S::Cancelled, E::Fail, None),
            (S::Cancelled, E::Cancel, Some(S::Cancelled)),
            (S::Cancelled, E::Cancelled, None),
        ];
        assert_eq!(table.len(), 30, "six states times five events");
        for (from, event, to) in table {
            assert_eq!(transition(*from, *event).ok(), *to, "{from} + {event:?}");
        }
        let refused = transition(S::Succeeded, E::Start).unwrap_err();
        assert_eq!(refused.to_string(), "a SUCCEEDED job cannot start");
    }

    #[test]
    fn states_read_back_case_insensitively() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
            assert_eq!(state.as_str().to_lowercase().parse::<JobState>(), Ok(state));
        }
        let error = "done".parse::<JobState>().unwrap_err();
        assert!(error.contains("QUEUED, RUNNING, SUCCEEDED"), "{error}");
    }
}
