//! Fencing decisions: pure functions over the epochs observed in the store.

use crate::error::{Error, Result};
use crate::ids::Epoch;

/// The epoch a worker taking the job claims: one past the newest.
pub fn next_epoch(existing: &[Epoch]) -> Epoch {
    Epoch(existing.iter().map(|e| e.0).max().unwrap_or(0) + 1)
}

/// Whether a worker holding `mine` may still commit progress.
pub fn check(job: &str, mine: Epoch, existing: &[Epoch]) -> Result<()> {
    match existing.iter().copied().filter(|e| *e > mine).max() {
        None => Ok(()),
        Some(newer) => Err(Error::Fenced {
            job: job.to_string(),
            mine,
            newer,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let cases: &[(&[u64], u64, bool)] = &[
            (&[], 1, true),
            (&[1], 1, true),
            (&[1, 2], 2, true),
            (&[1, 2], 1, false),
            (&[3, 1], 2, false),
        ];
        for (existing, mine, allowed) in cases {
            let existing: Vec<_> = existing.iter().copied().map(Epoch).collect();
            assert_eq!(
                check("j", Epoch(*mine), &existing).is_ok(),
                *allowed,
                "{existing:?} {mine}"
            );
        }
        assert_eq!(next_epoch(&[]), Epoch(1));
        assert_eq!(next_epoch(&[Epoch(4), Epoch(2)]), Epoch(5));
    }
}
