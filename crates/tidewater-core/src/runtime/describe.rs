//! What the manifest records of a job: its operators, the one whose state
//! depends on key placement, and the pipeline's fingerprint.

use std::collections::HashMap;

use super::job::Job;
use crate::checkpoint::manifest::OperatorRecord;
use crate::checkpoint::manifest::Role;
use crate::operator::Operator;
use crate::pipeline::Partitioning;
use crate::pipeline::graph::NodeBody;

/// The records the manifest keeps per operator.
pub(crate) fn describe(
    job: &Job,
    operators: &HashMap<usize, Vec<Box<dyn Operator>>>,
) -> Vec<OperatorRecord> {
    job.nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            let (role, kind, state_version, rescalable) = match &node.body {
                NodeBody::Source(source) => {
                    (Role::Source, source.kind().to_string(), Some(1), true)
                }
                NodeBody::Sink(sink) => (
                    Role::Sink,
                    sink.kind().to_string(),
                    sink.state_version(),
                    sink.rescales(),
                ),
                NodeBody::Operator(_) => {
                    let first = &operators[&id][0];
                    (
                        Role::Operator,
                        first.kind().to_string(),
                        first.state_version(),
                        first.state_keys().is_some(),
                    )
                }
            };
            OperatorRecord {
                uid: node.uid.clone(),
                role,
                kind,
                state_version,
                parallelism: job.parallelism[id],
                rescalable,
            }
        })
        .collect()
}

/// An operator whose state depends on where the partitioner sent each key:
/// a stateful one reading a hash-partitioned input over several subtasks,
/// whose state is not split by key on restore (that is done with this
/// build's partitioner, wherever the keys were before).
pub(crate) fn keyed_operator<'a>(job: &Job, records: &'a [OperatorRecord]) -> Option<&'a str> {
    job.nodes
        .iter()
        .zip(records)
        .enumerate()
        .find(|(id, (node, record))| {
            record.state_version.is_some()
                && !record.rescalable
                && job.parallelism[*id] > 1
                && node
                    .inputs
                    .iter()
                    .any(|e| matches!(e.partitioning, Partitioning::Hash(_)))
        })
        .map(|(_, (_, record))| record.uid.as_str())
}

/// A stable hash of the pipeline's shape (operators and edges) over a
/// canonical encoding: strings as a little-endian u64 length and their
/// bytes, numbers as little-endian u64s, hashed with XXH3-64. Unlike a hash
/// of `Debug` output it changes only when the pipeline does.
pub(crate) fn fingerprint(job: &Job, records: &[OperatorRecord]) -> String {
    fn text(bytes: &mut Vec<u8>, s: &str) {
        bytes.extend_from_slice(&(s.len() as u64).to_le_bytes());
        bytes.extend_from_slice(s.as_bytes());
    }
    fn number(bytes: &mut Vec<u8>, n: u64) {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    let mut bytes = Vec::new();
    number(&mut bytes, records.len() as u64);
    for record in records {
        text(&mut bytes, &record.uid);
        number(&mut bytes, record.role as u64);
        text(&mut bytes, &record.kind);
        number(
            &mut bytes,
            record.state_version.map_or(0, |v| u64::from(v) + 1),
        );
        number(&mut bytes, record.parallelism as u64);
    }
    for node in &job.nodes {
        for edge in &node.inputs {
            text(&mut bytes, &job.nodes[edge.from].uid);
            text(&mut bytes, &node.uid);
            match &edge.partitioning {
                Partitioning::Forward => number(&mut bytes, 0),
                Partitioning::Rebalance => number(&mut bytes, 1),
                Partitioning::Hash(columns) => {
                    number(&mut bytes, 2);
                    number(&mut bytes, columns.len() as u64);
                    for column in columns {
                        text(&mut bytes, column);
                    }
                }
            }
        }
    }
    format!("{:016x}", twox_hash::XxHash3_64::oneshot(&bytes))
}
