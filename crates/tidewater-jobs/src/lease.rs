//! Leases: who may run a job, and until when by its own clock.
//!
//! The store decides whether a lease can be taken, by its clock; the holder
//! decides when to stop committing, by its monotonic clock, measured from
//! the moment it *sent* the last successful renewal. The store set the
//! expiry after that moment, so the holder's deadline falls before the
//! store's as long as the two clocks run at the same rate; the margin covers
//! a drift between them and a commit already under way at the deadline.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tidewater_core::{Epoch, Error};

/// Who holds a lease: a process on a host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owner {
    /// The host's name.
    pub host: String,
    /// The process id.
    pub pid: u32,
}

impl Owner {
    /// This process.
    pub fn this_process() -> Owner {
        Owner {
            host: hostname(),
            pid: std::process::id(),
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {}", self.pid, self.host)
    }
}

fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let ok = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0;
    let end = buffer.iter().position(|b| *b == 0).unwrap_or(buffer.len());
    match ok {
        true if end > 0 => String::from_utf8_lossy(&buffer[..end]).into_owned(),
        _ => "localhost".to_string(),
    }
}

/// Whether process `pid` of this host is alive (it may be stopped).
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let result = unsafe { libc::kill(pid as libc::pid_t, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A lease as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseRecord {
    /// The holder.
    pub owner: Owner,
    /// When it was taken (store clock, ms since the Unix epoch).
    pub acquired_ms: i64,
    /// When it runs out unless renewed (store clock).
    pub expires_ms: i64,
}

/// Whether a worker may take a job's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// It may: nobody holds it, it ran out, its holder died, or it is stolen.
    Take,
    /// Someone else holds it.
    Held {
        /// The holder.
        owner: Owner,
        /// How long until it runs out.
        expires_in: Duration,
    },
}

/// Decides whether `me` may take the lease `current` at `now_ms` (the
/// store's clock). A holder on this host whose process is gone (`alive`
/// says so) gives it up at once; a stopped process is alive and keeps it.
pub fn may_take(
    current: Option<&LeaseRecord>,
    now_ms: i64,
    me: &Owner,
    steal: bool,
    alive: impl Fn(u32) -> bool,
) -> Decision {
    let Some(lease) = current else {
        return Decision::Take;
    };
    let dead_here = lease.owner.host == me.host && !alive(lease.owner.pid);
    if lease.expires_ms <= now_ms || steal || lease.owner == *me || dead_here {
        return Decision::Take;
    }
    Decision::Held {
        owner: lease.owner.clone(),
        expires_in: Duration::from_millis((lease.expires_ms - now_ms) as u64),
    }
}

/// How often a holder renews a lease of `ttl`.
pub fn renewal_interval(ttl: Duration) -> Duration {
    ttl / 4
}

/// The holder's side of a lease: the deadline by its own clock, and whether
/// the store said it is gone. The run asks it before every commit.
#[derive(Debug)]
pub struct LeaseClock {
    job: String,
    epoch: Epoch,
    /// ttl minus the margin.
    trusted_for: Duration,
    state: Mutex<ClockState>,
}

#[derive(Debug)]
struct ClockState {
    deadline: Instant,
    lost: Option<String>,
}

impl LeaseClock {
    /// A lease on `job` at `epoch`, of `ttl`, whose taking was sent at `sent`.
    pub fn new(job: &str, epoch: Epoch, ttl: Duration, sent: Instant) -> Self {
        let trusted_for = ttl - ttl / 3;
        LeaseClock {
            job: job.to_string(),
            epoch,
            trusted_for,
            state: Mutex::new(ClockState {
                deadline: sent + trusted_for,
                lost: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A renewal sent at `sent` succeeded.
    pub fn renewed(&self, sent: Instant) {
        let mut state = self.lock();
        state.deadline = state.deadline.max(sent + self.trusted_for);
    }

    /// The store says the lease is no longer this holder's.
    pub fn lose(&self, why: String) {
        self.lock().lost.get_or_insert(why);
    }

    /// Whether the run may commit at `now`; why not otherwise.
    pub fn check_at(&self, now: Instant) -> Result<(), String> {
        let state = self.lock();
        if let Some(why) = &state.lost {
            return Err(why.clone());
        }
        if now >= state.deadline {
            return Err(format!(
                "it could not be renewed for {:.0?} (the store unreachable, or this process \
                 paused), so it may have run out",
                self.trusted_for
            ));
        }
        Ok(())
    }

    /// What made the lease unusable, if anything has.
    pub fn lost(&self) -> Option<String> {
        self.check_at(Instant::now()).err()
    }
}

impl tidewater_core::Lease for LeaseClock {
    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn check(&self) -> tidewater_core::Result<()> {
        self.check_at(Instant::now())
            .map_err(|why| Error::LeaseLost {
                job: self.job.clone(),
                why,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(host: &str, pid: u32) -> Owner {
        Owner {
            host: host.into(),
            pid,
        }
    }

    fn lease(host: &str, pid: u32, expires_ms: i64) -> LeaseRecord {
        LeaseRecord {
            owner: owner(host, pid),
            acquired_ms: 0,
            expires_ms,
        }
    }

    #[test]
    fn who_may_take_a_lease() {
        let me = owner("a", 1);
        let alive = |pid: u32| pid != 9;
        // (what, current, now, steal) -> taken?
        let cases: &[(&str, Option<LeaseRecord>, i64, bool, bool)] = &[
            ("nobody holds it", None, 100, false, true),
            ("it ran out", Some(lease("b", 2, 100)), 100, false, true),
            (
                "it is alive elsewhere",
                Some(lease("b", 2, 200)),
                100,
                false,
                false,
            ),
            ("stolen", Some(lease("b", 2, 200)), 100, true, true),
            (
                "a live process here",
                Some(lease("a", 2, 200)),
                100,
                false,
                false,
            ),
            (
                "a dead process here",
                Some(lease("a", 9, 200)),
                100,
                false,
                true,
            ),
            (
                "a dead pid elsewhere is not ours to judge",
                Some(lease("b", 9, 200)),
                100,
                false,
                false,
            ),
            ("mine already", Some(lease("a", 1, 200)), 100, false, true),
        ];
        for (what, current, now, steal, taken) in cases {
            let decision = may_take(current.as_ref(), *now, &me, *steal, alive);
            assert_eq!(decision == Decision::Take, *taken, "{what}: {decision:?}");
        }
        assert_eq!(
            may_take(Some(&lease("b", 2, 1100)), 100, &me, false, alive),
            Decision::Held {
                owner: owner("b", 2),
                expires_in: Duration::from_secs(1)
            }
        );
    }

    #[test]
    fn the_holder_stops_before_the_lease_runs_out_by_its_own_clock() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(30);
        let clock = LeaseClock::new("job", Epoch(3), ttl, t0);
        assert!(clock.check_at(t0 + Duration::from_secs(19)).is_ok());
        // Two thirds of the ttl after the last renewal was sent: stop.
        assert!(clock.check_at(t0 + Duration::from_secs(20)).is_err());
        clock.renewed(t0 + Duration::from_secs(10));
        assert!(clock.check_at(t0 + Duration::from_secs(29)).is_ok());
        assert!(clock.check_at(t0 + Duration::from_secs(30)).is_err());
        // A late answer to an older renewal does not move the deadline back.
        clock.renewed(t0);
        assert!(clock.check_at(t0 + Duration::from_secs(29)).is_ok());
        clock.lose("epoch 4 took over".into());
        let why = clock.check_at(t0).unwrap_err();
        assert_eq!(why, "epoch 4 took over");
        let error = tidewater_core::Lease::check(&clock)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("lost the lease on job 'job': epoch 4 took over"),
            "{error}"
        );
    }

    #[test]
    fn this_process_is_alive_and_named() {
        let me = Owner::this_process();
        assert!(process_alive(me.pid));
        assert!(!me.host.is_empty());
        assert!(me.to_string().starts_with("pid "));
    }
}
