//! Rescaling on restore: state taken at one parallelism handed to the
//! subtasks of another. Keyed operator state is split by key group (the
//! same placement that routes input rows, see [`crate::partition`]); a
//! sink's writer state is moved by the sink itself ([`Sink::rescale`]).

use std::collections::HashMap;

use arrow::array::ArrayRef;
use arrow::compute::concat_batches;
use arrow::record_batch::RecordBatch;

use super::job::Job;
use super::restore::Restored;
use super::wiring::context;
use crate::error::{Error, Result};
use crate::events::{InternalEvent, StateRescaled};
use crate::ids::Epoch;
use crate::operator::Operator;
use crate::partition::{KeyGroups, hash_columns, partitioner, take_parts};
use crate::pipeline::graph::NodeBody;

/// Splits the state of a keyed operator (`states`, one batch per old
/// subtask that had any, rows keyed by the `keys` columns) among the
/// subtasks of `groups`: each row goes to the subtask owning its key group.
/// A subtask that owns no restored key gets `None`.
pub(crate) fn split_keyed_state(
    uid: &str,
    states: &[RecordBatch],
    keys: &[String],
    groups: &KeyGroups,
) -> Result<Vec<Option<RecordBatch>>> {
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); groups.parallelism()];
    let mut hashes = Vec::new();
    for state in states {
        let columns = keys
            .iter()
            .map(|key| {
                state.column_by_name(key).ok_or_else(|| {
                    Error::Corrupt(format!(
                        "operator '{uid}' names '{key}' among its state's key columns \
                         (Operator::state_keys), but its checkpointed state has no such column; \
                         its columns are {}",
                        crate::error::field_list(&state.schema())
                    ))
                })
            })
            .collect::<Result<Vec<&ArrayRef>>>()?;
        hash_columns(&columns, &mut hashes)?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); groups.parallelism()];
        for (row, hash) in hashes.iter().enumerate() {
            rows[groups.owner_of_hash(*hash)].push(row as u32);
        }
        for (subtask, part) in take_parts(state, rows)?.into_iter().enumerate() {
            parts[subtask].extend(part);
        }
    }
    parts
        .into_iter()
        .map(|batches| match batches.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one.clone())),
            [first, ..] => Ok(Some(concat_batches(&first.schema(), &batches)?)),
        })
        .collect()
}

/// The key columns of every operator whose state is split by key.
pub(crate) fn state_keys(
    operators: &HashMap<usize, Vec<Box<dyn Operator>>>,
) -> HashMap<usize, Vec<String>> {
    operators
        .iter()
        .filter_map(|(id, instances)| Some((*id, instances.first()?.state_keys()?)))
        .collect()
}

/// What rescaling needs of the run.
pub(crate) struct Rescale<'a> {
    pub job: &'a Job,
    /// The key columns of each operator's state that is split by key
    /// ([`Operator::state_keys`]), by node.
    pub state_keys: HashMap<usize, Vec<String>>,
    pub epoch: Epoch,
    pub key_groups: u32,
}

/// Hands every restored state taken at another parallelism to the subtasks
/// of this run, in `restored.operator_state`. Keyed operator state restored
/// from a checkpoint of another partitioner is split again too, so that it
/// sits where this build routes its keys.
pub(crate) async fn rescale(plan: Rescale<'_>, restored: &mut Restored) -> Result<()> {
    let Some(checkpoint) = restored.checkpoint else {
        return Ok(());
    };
    let current = partitioner();
    let other_partitioner = restored.partitioner.as_ref() != Some(&current);
    for (id, node) in plan.job.nodes.iter().enumerate() {
        let Some(&from) = restored.parallelism.get(&node.uid) else {
            continue;
        };
        let to = plan.job.parallelism[id];
        let take = |restored: &mut Restored| -> Vec<Option<RecordBatch>> {
            (0..from)
                .map(|subtask| restored.operator_state.remove(&(node.uid.clone(), subtask)))
                .collect()
        };
        let moved = match &node.body {
            NodeBody::Operator(_) => {
                let Some(keys) = plan.state_keys.get(&id) else {
                    continue;
                };
                if from == to && !other_partitioner {
                    continue;
                }
                let groups = KeyGroups::new(plan.key_groups, to)?;
                let states: Vec<RecordBatch> = take(restored).into_iter().flatten().collect();
                split_keyed_state(&node.uid, &states, keys, &groups)?
            }
            NodeBody::Sink(sink) if from != to && sink.state_version().is_some() => {
                let states = take(restored);
                let ctx = context(plan.job, id, 0, plan.epoch);
                let moved = sink
                    .rescale(&ctx, checkpoint, states)
                    .await
                    .map_err(|e| e.in_operator(&node.uid, 0))?;
                if moved.len() != to {
                    return Err(Error::Internal(format!(
                        "sink '{}' moved its state to {} writers, not {to}",
                        node.uid,
                        moved.len()
                    )));
                }
                moved
            }
            _ => continue,
        };
        for (subtask, state) in moved.into_iter().enumerate() {
            if let Some(state) = state {
                restored
                    .operator_state
                    .insert((node.uid.clone(), subtask), state);
            }
        }
        if from != to {
            StateRescaled {
                job: &plan.job.name,
                uid: &node.uid,
                from,
                to,
                key_groups: plan.key_groups,
            }
            .emit();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::Int64Type;

    use std::sync::Arc;

    use super::*;
    use crate::partition::{DEFAULT_KEY_GROUPS, partition_batch};

    fn state(keys: std::ops::Range<i64>) -> RecordBatch {
        let names: Vec<String> = keys.clone().map(|k| format!("n{k}")).collect();
        RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(Int64Array::from_iter_values(keys)) as ArrayRef,
            ),
            ("name", Arc::new(StringArray::from(names)) as ArrayRef),
        ])
        .unwrap()
    }

    fn keys_of(batch: &Option<RecordBatch>) -> Vec<i64> {
        let mut keys = batch
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect::<Vec<_>>();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn split_state_lands_where_rows_of_its_keys_are_routed() {
        // Three old subtasks' state, to 1, 2, 5 and 7 new ones: every key once,
        // with its own row, in the subtask that receives that key's input.
        let old = [state(0..400), state(400..1000), state(1000..1001)];
        for to in [1usize, 2, 5, 7] {
            let groups = KeyGroups::new(DEFAULT_KEY_GROUPS, to).unwrap();
            let split = split_keyed_state("agg", &old, &["k".into()], &groups).unwrap();
            assert_eq!(split.len(), to);
            let input = state(0..1001);
            let routed = partition_batch(&input, &[0], &groups, &mut Vec::new()).unwrap();
            let mut all = Vec::new();
            for (subtask, (part, rows)) in split.iter().zip(&routed).enumerate() {
                assert_eq!(keys_of(part), keys_of(rows), "to {to}, subtask {subtask}");
                if let Some(part) = part {
                    let names = part.column(1).as_string::<i32>();
                    for row in 0..part.num_rows() {
                        let k = part.column(0).as_primitive::<Int64Type>().value(row);
                        assert_eq!(names.value(row), format!("n{k}"), "row moved whole");
                    }
                }
                all.extend(keys_of(part));
            }
            all.sort_unstable();
            assert_eq!(all, (0..1001).collect::<Vec<_>>(), "to {to}");
        }
    }

    #[test]
    fn a_key_column_the_state_lacks_is_named() {
        let groups = KeyGroups::new(DEFAULT_KEY_GROUPS, 2).unwrap();
        let error = split_keyed_state("dedup", &[state(0..3)], &["id".into()], &groups)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("'dedup'")
                && error.contains("'id'")
                && error.contains("k: Int64, name: Utf8"),
            "{error}"
        );
    }
}
