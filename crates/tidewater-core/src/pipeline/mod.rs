//! Declaring a pipeline: sources, transforms, keyed aggregation and sinks.

pub(crate) mod graph;
pub(crate) mod plan;

use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::BooleanArray;
use arrow::datatypes::SchemaRef;
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
///
/// A stream can feed several operators (clone it), and an operator can read
/// several streams of one schema ([`Stream::union`]). The pipeline and its
/// streams are `Send`: a pipeline can be declared on one thread and built on
/// another.
pub struct Pipeline {
    name: String,
    default_parallelism: usize,
    graph: Graph,
}

/// The graph being declared, shared by the pipeline and its streams.
type Graph = Arc<Mutex<Vec<Node>>>;

fn lock(graph: &Graph) -> MutexGuard<'_, Vec<Node>> {
    // Nodes are only pushed or have a field set under the lock: a panic
    // elsewhere leaves the graph usable.
    graph.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pipeline {
    /// A new pipeline; `name` names the job's folder in the state store.
    pub fn new(name: impl Into<String>) -> Self {
        Pipeline {
            name: name.into(),
            default_parallelism: 1,
            graph: Graph::default(),
        }
    }

    /// The parallelism of operators that do not set their own (default 1).
    pub fn with_parallelism(mut self, parallelism: usize) -> Self {
        self.default_parallelism = parallelism;
        self
    }

    /// Adds a source.
    pub fn source(&self, uid: impl Into<String>, source: impl Source) -> Stream {
        let schema = Some(source.schema());
        let uid = uid.into();
        let problem = source.validate().err().map(|e| match e {
            Error::InvalidPipeline(why) => format!("source '{uid}': {why}"),
            other => format!("source '{uid}': {other}"),
        });
        let mut graph = lock(&self.graph);
        let mut node = Node::new(uid, NodeBody::Source(Arc::new(source)), Vec::new(), schema);
        node.problems.extend(problem);
        graph.push(node);
        Stream {
            graph: self.graph.clone(),
            producers: vec![graph.len() - 1],
            next_partitioning: Partitioning::Forward,
        }
    }

    /// Validates the pipeline and freezes it into a runnable [`Job`](crate::Job).
    pub fn build(self) -> Result<crate::Job> {
        let nodes = Arc::try_unwrap(self.graph)
            .map_err(|_| {
                Error::InvalidPipeline(
                    "build() was called while a handle of this pipeline is still \
                     alive (a Stream, KeyedStream or SinkRef): drop every such handle, or end its statement with `;`, before calling build()"
                        .into(),
                )
            })?
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
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
            if let Some(problem) = node.problems.first() {
                return Err(Error::InvalidPipeline(problem.clone()));
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

/// A stream of record batches: the output of one operator (or, after
/// [`union`](Stream::union), of several). Clone it to feed several operators:
/// each receives every batch.
#[derive(Clone)]
pub struct Stream {
    graph: Graph,
    /// The operators whose output this is.
    producers: Vec<usize>,
    next_partitioning: Partitioning,
}

impl Stream {
    /// Sets the parallelism of the operator that produces this stream (of
    /// each, after a union).
    pub fn parallelism(self, parallelism: usize) -> Self {
        let mut graph = lock(&self.graph);
        for producer in &self.producers {
            graph[*producer].parallelism = Some(parallelism);
        }
        drop(graph);
        self
    }

    /// One stream of the batches of this one and of `others`: the next
    /// operator reads all of them (barriers are aligned across them). They
    /// must have one schema; where their schemas are known when the
    /// pipeline is built (sources, filters), a difference is refused then.
    ///
    /// ```
    /// use tidewater_core::{GeneratorSource, Pipeline};
    ///
    /// let pipeline = Pipeline::new("two-inputs");
    /// let a = pipeline.source("a", GeneratorSource::new(100, 10));
    /// let b = pipeline.source("b", GeneratorSource::new(100, 10));
    /// let both = a.union([b]).filter("all", |batch| {
    ///     Ok(arrow::array::BooleanArray::from(vec![true; batch.num_rows()]))
    /// });
    /// # drop(both);
    /// ```
    pub fn union(mut self, others: impl IntoIterator<Item = Stream>) -> Stream {
        for other in others {
            for producer in other.producers {
                if !self.producers.contains(&producer) {
                    self.producers.push(producer);
                }
            }
        }
        self
    }

    /// The schema of this stream's batches, where the builder knows it
    /// (sources, filters, aggregates and operators added with
    /// [`transform_to`](Self::transform_to) declare theirs).
    pub fn schema(&self) -> Option<SchemaRef> {
        let graph = lock(&self.graph);
        let first = graph[self.producers[0]].schema.clone()?;
        self.producers[1..]
            .iter()
            .all(|p| graph[*p].schema.as_ref() == Some(&first))
            .then_some(first)
    }

    /// Records a problem found while declaring, reported by `build`.
    fn problem(&self, problem: String) {
        lock(&self.graph)[self.producers[0]].problems.push(problem);
    }

    fn producer_names(&self) -> String {
        self.producer_names_locked(&lock(&self.graph))
    }

    /// Makes the source of this stream wait on `throttle` before each fetch
    /// (e.g. [`RateLimit`](crate::RateLimit), or a replica-lag throttle).
    /// Only sources fetch: on another operator it is refused by `build`.
    pub fn throttle(self, throttle: impl crate::throttle::Throttle) -> Self {
        let throttle: Arc<dyn crate::throttle::Throttle> = Arc::new(throttle);
        let mut graph = lock(&self.graph);
        for producer in &self.producers {
            graph[*producer].throttles.push(throttle.clone());
        }
        drop(graph);
        self
    }

    /// Sends whole batches round-robin to the next operator's subtasks.
    pub fn rebalance(mut self) -> Self {
        self.next_partitioning = Partitioning::Rebalance;
        self
    }

    /// Adds an operator reading this stream; `schema` is its output's, if known.
    fn then_with(&self, uid: String, body: NodeBody, schema: Option<SchemaRef>) -> Stream {
        let mut problems = Vec::new();
        {
            let graph = lock(&self.graph);
            let known: Vec<&SchemaRef> = self
                .producers
                .iter()
                .filter_map(|p| graph[*p].schema.as_ref())
                .collect();
            if let Some(first) = known.first()
                && let Some(other) = known.iter().find(|s| s.fields() != first.fields())
            {
                problems.push(format!(
                    "'{uid}' reads a union of {} whose schemas differ: ({}) and ({}); every \
                     stream of a union must have the same columns and types",
                    self.producer_names_locked(&graph),
                    crate::error::field_list(first),
                    crate::error::field_list(other)
                ));
            }
        }
        let inputs = self
            .producers
            .iter()
            .map(|p| Edge {
                from: *p,
                partitioning: self.next_partitioning.clone(),
            })
            .collect();
        let mut node = Node::new(uid, body, inputs, schema);
        node.problems = problems;
        let mut graph = lock(&self.graph);
        graph.push(node);
        Stream {
            graph: self.graph.clone(),
            producers: vec![graph.len() - 1],
            next_partitioning: Partitioning::Forward,
        }
    }

    /// Adds an operator whose output schema the builder does not know.
    fn then(&self, uid: String, body: NodeBody) -> Stream {
        self.then_with(uid, body, None)
    }

    fn producer_names_locked(&self, graph: &[Node]) -> String {
        self.producers
            .iter()
            .map(|p| format!("'{}'", graph[*p].uid))
            .collect::<Vec<_>>()
            .join(", ")
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
        let schema = self.schema();
        self.then_with(
            uid.into(),
            NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                Ok(Box::new(FilterOperator::new(predicate.clone())) as Box<dyn Operator>)
            })),
            schema,
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
        self.then(uid.into(), NodeBody::Operator(boxed(factory)))
    }

    /// Adds a user operator whose output schema is `schema`, so that what
    /// reads it is checked when the pipeline is built.
    pub fn transform_to<O, F>(self, uid: impl Into<String>, schema: SchemaRef, factory: F) -> Stream
    where
        O: Operator,
        F: Fn(&TaskContext) -> Result<O> + Send + Sync + 'static,
    {
        self.then_with(uid.into(), NodeBody::Operator(boxed(factory)), Some(schema))
    }

    /// Partitions the stream by the hash of `columns`: every row with the same
    /// key reaches the same subtask of the next operator.
    pub fn key_by<I, S>(self, columns: I) -> KeyedStream
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys: Vec<String> = columns.into_iter().map(Into::into).collect();
        if keys.is_empty() {
            self.problem(format!(
                "key_by after {} names no column: key by at least one column",
                self.producer_names()
            ));
        }
        if let Some(schema) = self.schema() {
            for key in &keys {
                match schema.field_with_name(key) {
                    Err(_) => self.problem(format!(
                        "key_by after {}: there is no column '{key}'; the columns are {}",
                        self.producer_names(),
                        crate::error::field_list(&schema)
                    )),
                    Ok(field) if !crate::partition::can_partition_by(field.data_type()) => self
                        .problem(format!(
                            "key_by after {}: column '{key}' is {}, which cannot be hashed; \
                             key by integer, floating-point, date, timestamp, string, binary or \
                             boolean columns",
                            self.producer_names(),
                            field.data_type()
                        )),
                    Ok(_) => {}
                }
            }
        }
        KeyedStream { keys, stream: self }
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
    /// aggregates are checkpointed.
    ///
    /// Runs in two phases: beside each upstream subtask, an operator with
    /// uid `{uid}.local` aggregates that subtask's rows (at most 1Mi keys or
    /// 64 MiB at a time; 1Mi Int64 keys with three aggregates take ~45 MiB)
    /// and hands its partial aggregates to `uid` across the shuffle before
    /// each checkpoint barrier (the keys changed since the last one), when
    /// its table is full and at the end of input, so only partial
    /// aggregates cross the shuffle and a checkpoint holds each key once. When its
    /// table fills with fewer than two rows per key, it passes rows on
    /// unaggregated instead. `uid` merges the partials. Both keep state, so
    /// both uids must stay in the pipeline across a restore. With one
    /// subtask on each side of the shuffle, `{uid}.local` only reshapes rows
    /// for `uid`.
    pub fn aggregate(self, uid: impl Into<String>, spec: AggregateSpec) -> Stream {
        let uid = uid.into();
        let output = self
            .stream
            .schema()
            .and_then(|input| spec.output_schema(&self.keys, &input).ok());
        if let Some(schema) = self.stream.schema() {
            for expr in spec.exprs() {
                if let Some(input) = &expr.column
                    && schema.field_with_name(input).is_err()
                {
                    self.stream.problem(format!(
                        "aggregate '{uid}': output '{}' reads column '{input}', which the input \
                         does not have; its columns are {}",
                        expr.output,
                        crate::error::field_list(&schema)
                    ));
                }
            }
        }
        let keys = self.keys.clone();
        let spec = Arc::new(spec);
        let upstream = match self.stream.producers.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
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
            let mut graph = lock(&local.graph);
            let node = local.producers[0];
            graph[node].parallelism_of = upstream;
            let (keys, spec) = (keys.clone(), spec.clone());
            graph[node].single_subtask_form = Some(Arc::new(move |_: &TaskContext| {
                Ok(Box::new(LocalAggregateOperator::passing_on(
                    keys.clone(),
                    spec.clone(),
                )?) as Box<dyn Operator>)
            }));
        }
        local.key_by(keys.clone()).keyed().then_with(
            uid,
            NodeBody::Operator(Arc::new(move |_: &TaskContext| {
                Ok(
                    Box::new(AggregateOperator::merging(keys.clone(), spec.clone())?)
                        as Box<dyn Operator>,
                )
            })),
            output,
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

/// A user's operator factory as the graph holds it.
fn boxed<O, F>(factory: F) -> OperatorFactory
where
    O: Operator,
    F: Fn(&TaskContext) -> Result<O> + Send + Sync + 'static,
{
    Arc::new(move |ctx: &TaskContext| Ok(Box::new(factory(ctx)?) as Box<dyn Operator>))
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
