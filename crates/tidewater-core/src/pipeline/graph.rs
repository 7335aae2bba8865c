//! The logical graph a [`Pipeline`](super::Pipeline) builds (`plan.rs` turns it
//! into tasks).

use std::sync::Arc;

use super::plan::NodeShape;
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

#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// subtask each: for an operator that only pays across a shuffle (a
    /// pre-aggregation there would only aggregate twice in one task).
    pub single_subtask_form: Option<OperatorFactory>,
    pub inputs: Vec<Edge>,
    /// Consulted before each fetch (sources only).
    pub throttles: Vec<Arc<dyn crate::throttle::Throttle>>,
    /// The schema of its output, where the builder knows it (sources, filters).
    pub schema: Option<arrow::datatypes::SchemaRef>,
    /// Mistakes found while declaring (a missing key column, a union of
    /// different schemas), reported by `build` with the first one.
    pub problems: Vec<String>,
}

impl Node {
    /// A node with nothing set but what it is, what it reads and its schema.
    pub fn new(
        uid: String,
        body: NodeBody,
        inputs: Vec<Edge>,
        schema: Option<arrow::datatypes::SchemaRef>,
    ) -> Self {
        Node {
            uid,
            body,
            parallelism: None,
            parallelism_of: None,
            single_subtask_form: None,
            inputs,
            throttles: Vec::new(),
            schema,
            problems: Vec::new(),
        }
    }

    /// What the planner needs to know of it.
    pub fn shape(&self) -> NodeShape {
        NodeShape {
            inputs: self.inputs.clone(),
            parallelism: self.parallelism,
            parallelism_of: self.parallelism_of,
            has_single_subtask_form: self.single_subtask_form.is_some(),
            is_sink: matches!(self.body, NodeBody::Sink(_)),
        }
    }
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
