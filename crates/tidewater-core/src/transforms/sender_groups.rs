//! Partials that carry their pre-aggregation's group numbers, so that the
//! merging aggregate finds its own group for a key it has seen from the
//! same sender without looking the key up again.
//!
//! A pre-aggregation hands the same groups on at every barrier, under the
//! same group numbers, in ascending order. Tagged with the sender and its
//! numbering (an epoch that changes whenever the sender's groups start
//! over), each piece lets the merge keep a table per sender from the
//! sender's group number to its own: a read in ascending order of a
//! table it holds, where looking the key up again reads the key, hashes it
//! and probes the index at random. Keys still travel with every partial:
//! the merge needs them for groups it has not seen from that sender.
//!
//! The tables are a cache, never state: a merge that restores, or a sender
//! that starts over (a new sender id after a restart, a new epoch after
//! its table was emptied), starts them empty.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};

use super::group_index::GroupIndex;
use crate::error::{Error, Result};

/// The schema metadata key naming the sender and its numbering.
const SENDER_KEY: &str = "tidewater.partials.sender";

/// The last column of a tagged piece: the sender's group of each row.
const GROUP_COLUMN: &str = "__tidewater_sender_group";

/// A merge's table entry for a sender group it has not seen.
const UNKNOWN: u32 = u32::MAX;

/// Who numbered a piece's groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sender {
    /// Drawn at random per pre-aggregation instance, so that two senders
    /// never share one, whichever task or process they run in.
    id: u64,
    /// Changes whenever the sender's group numbers start over.
    epoch: u64,
}

/// The sender side: tags the pieces a pre-aggregation hands on.
#[derive(Debug)]
pub(crate) struct Tagger {
    sender: Sender,
    /// The tagged schema of the current epoch, built on the first piece.
    schema: Option<SchemaRef>,
}

impl Default for Tagger {
    fn default() -> Self {
        Tagger {
            sender: Sender {
                id: RandomState::new().hash_one(std::process::id()),
                epoch: 0,
            },
            schema: None,
        }
    }
}

impl Tagger {
    /// The sender's group numbers start over: pieces tagged from now on
    /// must not be read against the tables built from earlier ones.
    pub(crate) fn start_over(&mut self) {
        self.sender.epoch += 1;
        self.schema = None;
    }

    /// `piece` (the rows of `groups`, in order) with the group numbers as a
    /// last column and the sender in its schema's metadata.
    pub(crate) fn tag(&mut self, piece: RecordBatch, groups: &[u32]) -> Result<RecordBatch> {
        let sender = self.sender;
        let schema = self.schema.get_or_insert_with(|| {
            let mut fields: Vec<Field> = piece
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fields.push(Field::new(GROUP_COLUMN, DataType::UInt32, false));
            let value = format!("{:016x}.{}", sender.id, sender.epoch);
            let metadata = HashMap::from([(SENDER_KEY.to_string(), value)]);
            Arc::new(Schema::new_with_metadata(fields, metadata))
        });
        let mut columns = piece.columns().to_vec();
        columns.push(Arc::new(UInt32Array::from(groups.to_vec())));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// The sender and its group numbers, when `batch` is a tagged piece.
pub(crate) fn sender_of(batch: &RecordBatch) -> Result<Option<(Sender, &[u32])>> {
    let schema = batch.schema_ref();
    let Some(value) = schema.metadata().get(SENDER_KEY) else {
        return Ok(None);
    };
    let bad = || {
        Error::Internal(format!(
            "a piece of partials has a bad sender tag '{value}'"
        ))
    };
    let (id, epoch) = value.split_once('.').ok_or_else(bad)?;
    let sender = Sender {
        id: u64::from_str_radix(id, 16).map_err(|_| bad())?,
        epoch: epoch.parse().map_err(|_| bad())?,
    };
    let column = match schema.fields().last() {
        Some(field) if field.name() == GROUP_COLUMN => batch.column(batch.num_columns() - 1),
        _ => return Err(bad()),
    };
    if column.data_type() != &DataType::UInt32 || column.null_count() > 0 {
        return Err(bad());
    }
    Ok(Some((sender, column.as_primitive::<UInt32Type>().values())))
}

/// One sender's numbering, as the merge knows it.
#[derive(Debug, Default)]
struct SenderTable {
    epoch: u64,
    /// The merge's group of each sender group ([`UNKNOWN`] if not seen).
    groups: Vec<u32>,
}

/// The merge side: per sender, the merge's group of each sender group.
#[derive(Debug, Default)]
pub(crate) struct SenderTables {
    tables: HashMap<u64, SenderTable>,
    missing: Vec<u32>,
    found: Vec<u32>,
}

impl SenderTables {
    /// Forgets every sender: the merge's own group numbers start over.
    pub(crate) fn clear(&mut self) {
        self.tables.clear();
    }

    /// Writes the merge's group of every row into `groups`, as
    /// [`GroupIndex::assign`] does for `keys`: rows whose sender group is
    /// in the sender's table are read from it, the others are looked up
    /// (or added) in `index` by their keys, and remembered.
    pub(crate) fn assign(
        &mut self,
        (sender, sender_groups): (Sender, &[u32]),
        keys: &[ArrayRef],
        index: &mut GroupIndex,
        groups: &mut Vec<u32>,
    ) -> Result<()> {
        let table = self.tables.entry(sender.id).or_default();
        if table.epoch != sender.epoch {
            table.epoch = sender.epoch;
            table.groups.clear();
        }
        groups.clear();
        self.missing.clear();
        for (row, &group) in sender_groups.iter().enumerate() {
            let known = table.groups.get(group as usize).copied().unwrap_or(UNKNOWN);
            if known == UNKNOWN {
                self.missing.push(row as u32);
            }
            groups.push(known);
        }
        if self.missing.is_empty() {
            return Ok(());
        }
        if self.missing.len() == sender_groups.len() {
            index.assign(keys, &mut self.found)?;
        } else {
            let rows = UInt32Array::from(self.missing.clone());
            let keys = keys
                .iter()
                .map(|column| take(column, &rows, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            index.assign(&keys, &mut self.found)?;
        }
        for (&row, &group) in self.missing.iter().zip(&self.found) {
            groups[row as usize] = group;
            let theirs = sender_groups[row as usize] as usize;
            if table.groups.len() <= theirs {
                table.groups.resize(theirs + 1, UNKNOWN);
            }
            table.groups[theirs] = group;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn piece(keys: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(keys.to_vec())) as ArrayRef),
            (
                "n",
                Arc::new(Int64Array::from(vec![1; keys.len()])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    /// The merge's groups for a tagged piece, and what a plain lookup gives.
    fn merge(tables: &mut SenderTables, index: &mut GroupIndex, tagged: &RecordBatch) -> Vec<u32> {
        let sender = sender_of(tagged).unwrap().expect("tagged");
        let mut groups = Vec::new();
        tables
            .assign(sender, &tagged.columns()[..1], index, &mut groups)
            .unwrap();
        groups
    }

    #[test]
    fn a_tag_round_trips_and_an_untagged_batch_has_none() {
        let mut tagger = Tagger::default();
        let tagged = tagger.tag(piece(&[7, 9]), &[3, 5]).unwrap();
        let (sender, groups) = sender_of(&tagged).unwrap().unwrap();
        assert_eq!(sender, tagger.sender);
        assert_eq!(groups, &[3, 5]);
        assert_eq!(tagged.num_columns(), 3, "one column more");
        assert!(sender_of(&piece(&[1])).unwrap().is_none());
        tagger.start_over();
        let again = tagger.tag(piece(&[7]), &[0]).unwrap();
        assert_ne!(sender_of(&again).unwrap().unwrap().0, sender, "new epoch");
        assert_ne!(Tagger::default().sender.id, tagger.sender.id, "ids differ");
    }

    #[test]
    fn known_sender_groups_map_to_the_merge_groups_their_keys_had() {
        // Keys are what decides: each case checks the tables against a
        // lookup of the same keys in a second index fed the same pieces.
        let mut tables = SenderTables::default();
        let mut index = GroupIndex::new(&[DataType::Int64]).unwrap();
        let mut oracle = GroupIndex::new(&[DataType::Int64]).unwrap();
        let (mut a, mut b) = (Tagger::default(), Tagger::default());
        // (sender, its groups, their keys): a's group 0 is key 10 until a
        // starts over, then key 99; b numbers the same keys differently.
        let steps: [(usize, &[u32], &[i64]); 6] = [
            (0, &[0, 1, 2], &[10, 11, 12]),
            (1, &[0, 1], &[12, 10]),
            (0, &[0, 2, 3], &[10, 12, 13]), // group 3 is new: partly known
            (1, &[0, 1, 2], &[12, 10, 14]),
            (2, &[0, 1], &[99, 11]), // a started over: group 0 is another key
            (0, &[1, 0], &[11, 99]),
        ];
        for (i, (who, groups, keys)) in steps.into_iter().enumerate() {
            let tagger = match who {
                1 => &mut b,
                2 => {
                    a.start_over();
                    &mut a
                }
                _ => &mut a,
            };
            let tagged = tagger.tag(piece(keys), groups).unwrap();
            let got = merge(&mut tables, &mut index, &tagged);
            let mut expected = Vec::new();
            oracle
                .assign(
                    &[Arc::new(Int64Array::from(keys.to_vec())) as ArrayRef],
                    &mut expected,
                )
                .unwrap();
            assert_eq!(got, expected, "step {i}");
        }
        assert_eq!(index.len(), 6, "keys 10, 11, 12, 13, 14, 99");
    }

    #[test]
    fn string_keys_of_unknown_rows_are_looked_up_alone() {
        let mut tables = SenderTables::default();
        let mut index = GroupIndex::new(&[DataType::Utf8]).unwrap();
        let mut tagger = Tagger::default();
        let strings = |keys: &[&str]| {
            RecordBatch::try_from_iter([(
                "s",
                Arc::new(StringArray::from(keys.to_vec())) as ArrayRef,
            )])
            .unwrap()
        };
        let first = tagger.tag(strings(&["x", "y"]), &[0, 1]).unwrap();
        assert_eq!(merge(&mut tables, &mut index, &first), vec![0, 1]);
        let second = tagger.tag(strings(&["z", "y", "w"]), &[2, 1, 3]).unwrap();
        assert_eq!(merge(&mut tables, &mut index, &second), vec![2, 1, 3]);
    }

    #[test]
    fn a_bad_tag_is_an_error() {
        let mut tagger = Tagger::default();
        let tagged = tagger.tag(piece(&[1]), &[0]).unwrap();
        let mut metadata = tagged.schema().metadata().clone();
        metadata.insert(SENDER_KEY.to_string(), "nonsense".to_string());
        let schema = Arc::new(tagged.schema().as_ref().clone().with_metadata(metadata));
        let bad = RecordBatch::try_new(schema, tagged.columns().to_vec()).unwrap();
        assert!(matches!(sender_of(&bad), Err(Error::Internal(_))));
    }
}
