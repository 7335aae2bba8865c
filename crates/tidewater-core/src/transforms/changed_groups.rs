//! Which groups changed since the last snapshot: a bit per group, for
//! incremental checkpoints.

/// A set of group numbers, as a bitmap.
#[derive(Debug, Default)]
pub(crate) struct ChangedGroups {
    words: Vec<u64>,
}

impl ChangedGroups {
    /// Marks every group in `groups`; `count` is how many groups exist.
    pub fn mark(&mut self, groups: &[u32], count: usize) {
        let needed = count.div_ceil(64);
        if self.words.len() < needed {
            self.words.resize(needed, 0);
        }
        for &group in groups {
            self.words[(group >> 6) as usize] |= 1 << (group & 63);
        }
    }

    /// The marked groups in ascending order; the set is empty afterwards.
    pub fn take(&mut self) -> Vec<u32> {
        // Sized exactly: while every key changes this is one entry per group.
        let marked = self.words.iter().map(|w| w.count_ones() as usize).sum();
        let mut groups = Vec::with_capacity(marked);
        for (w, word) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                groups.push((w as u32) << 6 | bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        groups
    }

    /// Forgets every mark.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_come_back_once_in_order() {
        let mut changed = ChangedGroups::default();
        changed.mark(&[5, 0, 64, 5, 130], 131);
        changed.mark(&[63], 131);
        assert_eq!(changed.take(), vec![0, 5, 63, 64, 130]);
        assert!(changed.take().is_empty());
        changed.mark(&[1], 2);
        changed.clear();
        assert!(changed.take().is_empty());
    }
}
