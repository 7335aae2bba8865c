//! Declaring a pipeline: sources, transforms, keyed aggregation and sinks.

pub(crate) mod graph;
pub(crate) mod plan;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::record_batch::RecordBatch;

pub use graph::Partitioning;
use graph::{Edge, Node, NodeBody};

use crate::error::{Error, Result};
use crate::operator::{Operator, OperatorFactory, TaskContext};
use crate::sink::Sink;
use crate::source::Source;
use crate::transforms::aggregate::{AggregateOperator, AggregateSpec};
use crate::transforms::local_aggregate::LocalAggregateOperator;
use crate::transforms::stateless::{FilterOperator, FlatMapOperator, MapOperator};

/// A pipeline being declared: a graph of operators, each with a stable uid.
///
/// # Examples
///
/// ```
/// use tidewater_core::{AggregateSpec, GeneratorSource, Pipeline};
///
/// let pipeline = Pipeline::new("daily-rollup").with_parallelism(2);
/// pipeline
///     .source("generator", GeneratorSource::new(1_000, 10))
///     .key_by(["k"])
///     .aggregate("per-key", AggregateSpec::new().count("count").sum("v", "sum_v"));
/// // ... then `.sink(uid, sink)`, `pipeline.build()?` and `job.run(config).await?`.
/// ```
pub struct Pipeline {
    name: String,
    default_parallelism: usize,
    graph: Rc<RefCell<Vec<Node>>>,
}

impl Pipeline {
    /// A new pipeline; `name` names the job's folder in the state store.
    pub fn new(name: impl Into<String>) -> Self {
        Pipeline {
            name: name.into(),
            default_parallelism: 1,
            graph: Rc::default(),
        }
    }

    /// The parallelism of operators that do not set their own (default 1).
    pub fn with_parallelism(mut self, parallelism: usize) -> Self {
        self.default_parallelism = parallelism;
        self
    }

    /// Adds a source.
    pub fn source(&self, uid: impl Into<String>, source: impl Source) -> Stream {
        self.add(uid.into(), NodeBody::Source(Arc::new(source)), vec![])
    }

    fn add(&self, uid: String, body: NodeBody, inputs: Vec<Edge>) -> Stream {
        let mut graph = self.graph.borrow_mut();
        graph.push(Node {
            uid,
            body,
            parallelism: None,
            parallelism_of: None,
            single_subtask_form: None,
            inputs,
            throttles: Vec::new(),
        });
        Stream {
            graph: self.graph.clone(),
            node: graph.len() - 1,
            next_partitioning: Partitioning::Forward,
        }
    }

    /// Validates the pipeline and freezes it into a runnable [`Job`](crate::Job).
    pub fn build(self) -> Result<crate::Job> {
        let nodes = Rc::try_unwrap(self.graph)
            .map_err(|_| {
                Error::InvalidPipeline(
                    "build() was called while a handle of this pipeline is still \
                     alive (a Stream, KeyedStream or SinkRef): drop every such handle, or end its statement with `;`, before calling build()"
                        .into(),
                )
            })?
            .into_inner();
        if self.name.is_empty() || self.name.contains('/') {
            return Err(Error::InvalidPipeline(format!(
                "job name '{}' must be non-empty and contain no '/'",
                self.name
            )));
        }
        graph::validate_uid(&self.name)?;
        if self.default_parallelism == 0 {
            return Err(Error::InvalidPipeline(
                "parallelism must be at least 1".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut consumed = vec![false; nodes.len()];
        for node in &nodes {
            graph::validate_uid(&node.uid)?;
            if !seen.insert(node.uid.as_str()) {
                return Err(Error::InvalidPipeline(format!(
                    "uid '{}' is used twice: every operator needs its own stable uid",
                    node.uid
                )));
            }
            if !node.throttles.is_empty() && !matches!(node.body, NodeBody::Source(_)) {
                return Err(Error::InvalidPipeline(format!(
                    "'{}' is not a source: throttles apply to sources, call .throttle() right after .source()",
                    node.uid
                )));
            }
            if node.parallelism == Some(0) {
                return Err(Error::InvalidPipeline(format!(
                    "operator '{}': parallelism must be at least 1",
                    node.uid
                )));
            }
            for edge in &node.inputs {
                consumed[edge.from] = true;
            }
        }
        if !nodes.iter().any(|n| matches!(n.body, NodeBody::Source(_))) {
            return Err(Error::InvalidPipeline("the pipeline has no source".into()));
        }
        for (node, consumed) in nodes.iter().zip(&consumed) {
            if !consumed && !matches!(node.body, NodeBody::Sink(_)) {
                return Err(Error::InvalidPipeline(format!(
                    "the output of '{}' goes nowhere: end every branch with a sink",
                    node.uid
                )));
            }
        }
        crate::Job::new(self.name, self.default_parallelism, nodes)
    }
}

/// A stream of record batches: the output of one operator.
pub struct Stream {
    graph: Rc<RefCell<Vec<Node>>>,
    node: usize,
    next_partitioning: Partitioning,
}

impl Stream {
    /// Sets the parallelism of the operator that produces this stream.
    pub fn parallelism(self, parallelism: usize) -> Self {
        self.graph.borrow_mut()[self.node].parallelism = Some(parallelism);
        self
    }

    /// Makes the source of this stream wait on `throttle` before each fetch
    /// (e.g. [`RateLimit`](crate::RateLimit), or a replica-lag throttle).
    /// Only sources fetch: on another operator it is refused by `build`.
    pub fn throttle(self, throttle: impl crate::throttle::Throttle) -> Self {
        self.graph.borrow_mut()[self.node]
            .throttles
            .push(Arc::new(throttle));
        self
    }

    /// Sends whole batches round-robin to the next operator's subtasks.
    pub fn rebalance(mut self) -> Self {
        self.next_partitioning = Partitioning::Rebalance;
        self
    }

    fn then(&self, uid: String, body: NodeBody) -> Stream {
        let mut graph = self.graph.borrow_mut();
        graph.push(Node {
            uid,
            body,
            parallelism: None,
            parallelism_of: None,
            single_subtask_form: None,
            throttles: Vec::new(),
            inputs: vec![Edge {
                from: self.node,
                partitioning: self.next_partitioning.clone(),
            }],
        });
        Stream {
            graph: self.graph.clone(),
            node: graph.len() - 1,
            next_partitioning: Partitioning::Forward,
        }
    }

    /// Transforms each batch into another.
    pub fn map<F>(self, uid: impl Into<String>, f: F) -> Stream
    where
        F: Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.then(
            uid.into(),
            NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                Ok(Box::new(MapOperator::new(f.clone())) as Box<dyn Operator>)
            })),
        )
    }

    /// Keeps the rows for which `predicate` returns true (nulls drop the row).
    pub fn filter<F>(self, uid: impl Into<String>, predicate: F) -> Stream
    where
        F: Fn(&RecordBatch) -> Result<BooleanArray> + Send + Sync + 'static,
    {
        let predicate = Arc::new(predicate);
        self.then(
            uid.into(),
            NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                Ok(Box::new(FilterOperator::new(predicate.clone())) as Box<dyn Operator>)
            })),
        )
    }

    /// Transforms each batch into any number of batches.
    pub fn flat_map<F>(self, uid: impl Into<String>, f: F) -> Stream
    where
        F: Fn(RecordBatch) -> Result<Vec<RecordBatch>> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.then(
            uid.into(),
            NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                Ok(Box::new(FlatMapOperator::new(f.clone())) as Box<dyn Operator>)
            })),
        )
    }

    /// Adds a user operator; `factory` builds one instance per subtask.
    pub fn transform<O, F>(self, uid: impl Into<String>, factory: F) -> Stream
    where
        O: Operator,
        F: Fn(&TaskContext) -> Result<O> + Send + Sync + 'static,
    {
        let factory: OperatorFactory =
            Arc::new(move |ctx: &TaskContext| Ok(Box::new(factory(ctx)?) as Box<dyn Operator>));
        self.then(uid.into(), NodeBody::Operator(factory))
    }

    /// Partitions the stream by the hash of `columns`: every row with the same
    /// key reaches the same subtask of the next operator.
    pub fn key_by<I, S>(self, columns: I) -> KeyedStream
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        KeyedStream {
            keys: columns.into_iter().map(Into::into).collect(),
            stream: self,
        }
    }

    /// Ends the stream in a sink.
    pub fn sink(self, uid: impl Into<String>, sink: impl Sink) -> SinkRef {
        let stream = self.then(uid.into(), NodeBody::Sink(Arc::new(sink)));
        SinkRef { stream }
    }
}

/// A stream partitioned by key columns.
pub struct KeyedStream {
    stream: Stream,
    keys: Vec<String>,
}

impl KeyedStream {
    fn keyed(mut self) -> Stream {
        self.stream.next_partitioning = Partitioning::Hash(self.keys);
        self.stream
    }

    /// Aggregates per key; emits one row per key when the input ends. The
    /// partial aggregates are checkpointed.
    ///
    /// Runs in two phases: beside each upstream subtask, an operator with
    /// uid `{uid}.local` aggregates that subtask's rows (at most 1Mi keys or
    /// 64 MiB at a time; 1Mi Int64 keys with three aggregates take ~45 MiB)
    /// and checkpoints its partial aggregates; it hands
    /// them to `uid` across the shuffle when its table is full and at the
    /// end of input, so only partial aggregates cross the shuffle. When its
    /// table fills with fewer than two rows per key, it passes rows on
    /// unaggregated instead. `uid` merges the partials. Both keep state, so
    /// both uids must stay in the pipeline across a restore. With one
    /// subtask on each side of the shuffle, `{uid}.local` only reshapes rows
    /// for `uid`.
    pub fn aggregate(self, uid: impl Into<String>, spec: AggregateSpec) -> Stream {
        let uid = uid.into();
        let keys = self.keys.clone();
        let spec = Arc::new(spec);
        let upstream = self.stream.node;
        let local = {
            let (keys, spec) = (keys.clone(), spec.clone());
            self.stream.then(
                format!("{uid}.local"),
                NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                    Ok(
                        Box::new(LocalAggregateOperator::new(keys.clone(), spec.clone())?)
                            as Box<dyn Operator>,
                    )
                })),
            )
        };
        {
            let mut graph = local.graph.borrow_mut();
            graph[local.node].parallelism_of = Some(upstream);
            let (keys, spec) = (keys.clone(), spec.clone());
            graph[local.node].single_subtask_form = Some(Arc::new(move |_: &TaskContext| {
                Ok(Box::new(LocalAggregateOperator::passing_on(
                    keys.clone(),
                    spec.clone(),
                )?) as Box<dyn Operator>)
            }));
        }
        local.key_by(keys.clone()).keyed().then(
            uid,
            NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                Ok(
                    Box::new(AggregateOperator::merging(keys.clone(), spec.clone())?)
                        as Box<dyn Operator>,
                )
            })),
        )
    }

    /// Adds a user operator that sees every row of a key in one subtask.
    pub fn transform<O, F>(self, uid: impl Into<String>, factory: F) -> Stream
    where
        O: Operator,
        F: Fn(&TaskContext) -> Result<O> + Send + Sync + 'static,
    {
        self.keyed().transform(uid, factory)
    }
}

/// The end of a branch: a sink.
pub struct SinkRef {
    stream: Stream,
}

impl SinkRef {
    /// Sets the sink's parallelism.
    pub fn parallelism(self, parallelism: usize) -> Self {
        SinkRef {
            stream: self.stream.parallelism(parallelism),
        }
    }
}
