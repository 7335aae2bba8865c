//! The logical graph a [`Pipeline`](super::Pipeline) builds, and how it is cut into chains.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::operator::OperatorFactory;
use crate::sink::Sink;
use crate::source::Source;

/// How batches travel along an edge between two operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Subtask i sends to subtask i (equal parallelism); such edges may be chained.
    Forward,
    /// Rows go to the subtask chosen by the hash of these columns.
    Hash(Vec<String>),
    /// Whole batches go round-robin to every downstream subtask.
    Rebalance,
}

/// What a node does.
pub(crate) enum NodeBody {
    Source(Arc<dyn Source>),
    Operator(OperatorFactory),
    Sink(Arc<dyn Sink>),
}

pub(crate) struct Edge {
    pub from: usize,
    pub partitioning: Partitioning,
}

pub(crate) struct Node {
    pub uid: String,
    pub body: NodeBody,
    pub parallelism: Option<usize>,
    /// Without a parallelism of its own, take this node's (an operator the
    /// builder inserted to run beside its input, e.g. a pre-aggregation).
    pub parallelism_of: Option<usize>,
    /// What to run instead when this node and every consumer of it have one
    /// subtask each (a pre-aggregation then saves no shuffle: it would only
    /// aggregate twice in one task).
    pub single_subtask_body: Option<OperatorFactory>,
    pub inputs: Vec<Edge>,
    /// Consulted before each fetch (sources only).
    pub throttles: Vec<Arc<dyn crate::throttle::Throttle>>,
}

/// A run of nodes executed in one task per subtask, with no channel between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainPlan {
    pub nodes: Vec<usize>,
    pub parallelism: usize,
    /// (upstream chain, partitioning) for every input of the head node.
    pub inputs: Vec<(usize, Partitioning)>,
}

/// Checks a uid: it names folders in every checkpoint, so it must be path-safe.
pub(crate) fn validate_uid(uid: &str) -> Result<()> {
    let ok = !uid.is_empty()
        && uid.len() <= 128
        && !uid.starts_with('.')
        && !uid.starts_with('_')
        && uid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidPipeline(format!(
            "uid '{uid}' is not valid: use 1-128 characters from A-Z a-z 0-9 - _ . \
             not starting with '.' or '_' (it names the operator's state in every checkpoint)"
        )))
    }
}

/// Cuts the graph into chains: a node joins its input's chain when the edge is
/// Forward (or a hash edge between two single subtasks), the parallelism is
/// equal, and it is that input's only consumer.
pub(crate) fn plan_chains(nodes: &[Node], parallelism: &[usize]) -> Vec<ChainPlan> {
    let mut consumers = vec![0usize; nodes.len()];
    for node in nodes {
        for edge in &node.inputs {
            consumers[edge.from] += 1;
        }
    }
    let mut chain_of = vec![usize::MAX; nodes.len()];
    let mut chains: Vec<ChainPlan> = Vec::new();
    for (id, node) in nodes.iter().enumerate() {
        let chainable = match node.inputs.as_slice() {
            [edge] => {
                let one_to_one = match edge.partitioning {
                    Partitioning::Forward => true,
                    // With one subtask on each side every key goes to subtask
                    // 0: the edge is a forward edge, and a channel hop would
                    // only make the two tasks hand batches to each other.
                    Partitioning::Hash(_) => parallelism[id] == 1,
                    Partitioning::Rebalance => false,
                };
                one_to_one
                    && parallelism[edge.from] == parallelism[id]
                    && consumers[edge.from] == 1
                    && !matches!(nodes[edge.from].body, NodeBody::Sink(_))
            }
            _ => false,
        };
        if chainable {
            let chain = chain_of[node.inputs[0].from];
            chains[chain].nodes.push(id);
            chain_of[id] = chain;
        } else {
            chain_of[id] = chains.len();
            chains.push(ChainPlan {
                nodes: vec![id],
                parallelism: parallelism[id],
                inputs: node
                    .inputs
                    .iter()
                    .map(|e| (chain_of[e.from], e.partitioning.clone()))
                    .collect(),
            });
        }
    }
    chains
}
