//! Where a pre-aggregation's groups go downstream: each group's subtask
//! under the edge's key routing, worked out once per group, and the
//! renumbering of the groups in key group order before the first hand-on
//! (see [`key_group_order`](crate::transforms::key_group_order)).

use arrow::array::ArrayRef;

use super::operator::{AggregateOperator, Groups};
use crate::error::Result;
use crate::partition::{KeyRouting, hash_columns};
use crate::transforms::key_group_order::by_key_group;
use crate::transforms::spare_columns::SpareColumns;

/// Groups whose downstream subtask is worked out in one go.
const ROUTE_CHUNK: u32 = 65_536;

impl AggregateOperator {
    /// Extends `owners`, the downstream subtask of each group in group
    /// order under `routing`, to every group: only groups added since the
    /// last call are hashed. `false` when `routing` does not partition by
    /// this aggregation's keys.
    pub(crate) fn owners_of_groups(
        &mut self,
        routing: &KeyRouting,
        owners: &mut Vec<u16>,
        hashes: &mut Vec<u64>,
    ) -> Result<bool> {
        if routing.columns != self.keys {
            return Ok(false);
        }
        let Some(groups) = &self.groups else {
            return Ok(true);
        };
        let from = owners.len() as u32;
        Self::hash_keys_from(groups, &mut self.spare, from, hashes, |hashes| {
            owners.extend(
                hashes
                    .iter()
                    .map(|h| routing.groups.owner_of_hash(*h) as u16),
            );
        })?;
        Ok(true)
    }

    /// Hands `each` the key hashes ([`hash_columns`]) of the groups from
    /// `from` on, in group order, a chunk at a time, so that the keys and
    /// hashes stay small.
    fn hash_keys_from(
        groups: &Groups,
        spare: &mut SpareColumns,
        from: u32,
        hashes: &mut Vec<u64>,
        mut each: impl FnMut(&[u64]),
    ) -> Result<()> {
        let count = groups.index.len() as u32;
        let mut chunk = Vec::new();
        let mut done = from;
        while done < count {
            chunk.clear();
            chunk.extend(done..count.min(done.saturating_add(ROUTE_CHUNK)));
            let keys = groups.index.key_columns_of(&chunk, spare)?;
            let keys: Vec<&ArrayRef> = keys.iter().collect();
            hash_columns(&keys, hashes)?;
            each(hashes);
            done += chunk.len() as u32;
        }
        Ok(())
    }

    /// Numbers the groups anew in ascending order of their key groups
    /// under `routing`, and writes each one's downstream subtask into
    /// `owners` (see [`key_group_order`](crate::transforms::key_group_order)).
    /// Only for a pre-aggregation that has not handed a group on under
    /// its present numbering: the numbers it sent would mean other keys.
    /// `false` (and nothing done) when `routing` does not partition by
    /// this aggregation's keys.
    pub(crate) fn renumber_by_key_group(
        &mut self,
        routing: &KeyRouting,
        owners: &mut Vec<u16>,
        hashes: &mut Vec<u64>,
    ) -> Result<bool> {
        debug_assert!(!self.merge && self.changed.is_none());
        if routing.columns != self.keys {
            return Ok(false);
        }
        owners.clear();
        let Some(groups) = &mut self.groups else {
            return Ok(true);
        };
        let mut key_groups = Vec::with_capacity(groups.index.len());
        Self::hash_keys_from(groups, &mut self.spare, 0, hashes, |hashes| {
            key_groups.extend(hashes.iter().map(|h| routing.groups.group_of(*h)));
        })?;
        let order = by_key_group(&key_groups, routing.groups.count());
        owners.extend(
            order
                .iter()
                .map(|group| routing.groups.owner_of_group(key_groups[*group as usize])),
        );
        drop(key_groups);
        groups.renumber(order)?;
        Ok(true)
    }
}

impl Groups {
    /// Numbers the groups anew: group `order[i]` becomes group `i`, with
    /// its key, accumulator row and marks. Nothing is hashed or inserted
    /// again: rebuilding the groups from a sorted copy of the state, as
    /// this did first, cost about as much CPU as the rest of a run's first
    /// checkpoint (about 0.2 s at 1M groups and two subtasks).
    fn renumber(&mut self, order: Vec<u32>) -> Result<()> {
        self.index.renumber(&order)?;
        for accumulator in &mut self.accumulators {
            accumulator.renumber(&order);
        }
        self.table.renumber(order);
        Ok(())
    }
}
