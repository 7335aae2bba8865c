//! Physical planning: from the logical graph the builder made to the tasks
//! that run. A pure function of the graph's shape (no operator is built, no
//! I/O), table-tested:
//!
//! 1. Every node gets its parallelism: its own, else that of the node it was
//!    inserted beside (e.g. a pre-aggregation beside its input), else the
//!    pipeline's default.
//! 2. A forward edge between unequal parallelism becomes round-robin.
//! 3. A node that offers a single-subtask form (an operator that only pays
//!    across a shuffle, e.g. a pre-aggregation) runs that form when it and
//!    every consumer of it have one subtask.
//! 4. The graph is cut into chains, run as one task per subtask with no
//!    channel between their nodes.

use super::graph::{ChainPlan, Edge, Partitioning};

/// What the planner needs to know of a logical node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeShape {
    /// Its inputs.
    pub inputs: Vec<Edge>,
    /// Its own parallelism, if set.
    pub parallelism: Option<usize>,
    /// Without one of its own, take this node's.
    pub parallelism_of: Option<usize>,
    /// Whether it has another form for one subtask feeding one subtask.
    pub has_single_subtask_form: bool,
    /// Whether it is a sink (nothing chains after a sink).
    pub is_sink: bool,
}

/// The physical graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PhysicalPlan {
    /// Per node.
    pub parallelism: Vec<usize>,
    /// Per node, its inputs' partitioning after the rewrites.
    pub inputs: Vec<Vec<Edge>>,
    /// Per node: run its single-subtask form.
    pub single_subtask_form: Vec<bool>,
    /// The tasks.
    pub chains: Vec<ChainPlan>,
}

/// Plans `nodes` (in insertion order: a node comes after its inputs).
pub(crate) fn plan(nodes: &[NodeShape], default_parallelism: usize) -> PhysicalPlan {
    let mut parallelism: Vec<usize> = Vec::with_capacity(nodes.len());
    for node in nodes {
        let inherited = node.parallelism_of.map(|of| parallelism[of]);
        parallelism.push(
            node.parallelism
                .or(inherited)
                .unwrap_or(default_parallelism),
        );
    }
    let inputs: Vec<Vec<Edge>> = nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            node.inputs
                .iter()
                .map(|edge| Edge {
                    from: edge.from,
                    partitioning: match &edge.partitioning {
                        Partitioning::Forward if parallelism[edge.from] != parallelism[id] => {
                            Partitioning::Rebalance
                        }
                        other => other.clone(),
                    },
                })
                .collect()
        })
        .collect();
    let consumers: Vec<Vec<usize>> = (0..nodes.len())
        .map(|id| {
            (0..nodes.len())
                .filter(|c| inputs[*c].iter().any(|e| e.from == id))
                .collect()
        })
        .collect();
    let single_subtask_form: Vec<bool> = nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            node.has_single_subtask_form
                && parallelism[id] == 1
                && consumers[id].iter().all(|c| parallelism[*c] == 1)
        })
        .collect();
    let chains = plan_chains(nodes, &inputs, &parallelism, &consumers);
    PhysicalPlan {
        parallelism,
        inputs,
        single_subtask_form,
        chains,
    }
}

/// Cuts the graph into chains: a node joins its input's chain when the edge is
/// Forward (or a hash edge between two single subtasks), the parallelism is
/// equal, and it is that input's only consumer.
fn plan_chains(
    nodes: &[NodeShape],
    inputs: &[Vec<Edge>],
    parallelism: &[usize],
    consumers: &[Vec<usize>],
) -> Vec<ChainPlan> {
    let mut chain_of = vec![usize::MAX; nodes.len()];
    let mut chains: Vec<ChainPlan> = Vec::new();
    for (id, edges) in inputs.iter().enumerate() {
        let chainable = match edges.as_slice() {
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
                    && consumers[edge.from].len() == 1
                    && !nodes[edge.from].is_sink
            }
            _ => false,
        };
        if chainable {
            let chain = chain_of[edges[0].from];
            chains[chain].nodes.push(id);
            chain_of[id] = chain;
        } else {
            chain_of[id] = chains.len();
            chains.push(ChainPlan {
                nodes: vec![id],
                parallelism: parallelism[id],
                inputs: edges
                    .iter()
                    .map(|e| (chain_of[e.from], e.partitioning.clone()))
                    .collect(),
            });
        }
    }
    chains
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(inputs: &[(usize, Partitioning)], parallelism: Option<usize>) -> NodeShape {
        NodeShape {
            inputs: inputs
                .iter()
                .map(|(from, partitioning)| Edge {
                    from: *from,
                    partitioning: partitioning.clone(),
                })
                .collect(),
            parallelism,
            parallelism_of: None,
            has_single_subtask_form: false,
            is_sink: false,
        }
    }

    fn hash() -> Partitioning {
        Partitioning::Hash(vec!["k".into()])
    }

    fn chains(plan: &PhysicalPlan) -> Vec<Vec<usize>> {
        plan.chains.iter().map(|c| c.nodes.clone()).collect()
    }

    /// source → pre-aggregation (beside the source) → hash → merge → sink,
    /// the shape `key_by(..).aggregate(..)` builds.
    fn aggregate_graph(source: Option<usize>, merge: Option<usize>) -> Vec<NodeShape> {
        let mut local = node(&[(0, Partitioning::Forward)], None);
        local.parallelism_of = Some(0);
        local.has_single_subtask_form = true;
        let mut sink = node(&[(2, Partitioning::Forward)], merge);
        sink.is_sink = true;
        vec![node(&[], source), local, node(&[(1, hash())], merge), sink]
    }

    #[test]
    fn plans() {
        use Partitioning::{Forward, Rebalance};
        // (name, graph, default parallelism, parallelism, chains, single-subtask forms)
        type Case = (
            &'static str,
            Vec<NodeShape>,
            usize,
            Vec<usize>,
            Vec<Vec<usize>>,
            Vec<bool>,
        );
        let cases: Vec<Case> = vec![
            (
                "forward edges of equal parallelism chain",
                vec![
                    node(&[], None),
                    node(&[(0, Forward)], None),
                    node(&[(1, Forward)], None),
                ],
                2,
                vec![2, 2, 2],
                vec![vec![0, 1, 2]],
                vec![false; 3],
            ),
            (
                "a shuffle cuts the chain",
                vec![node(&[], None), node(&[(0, hash())], None)],
                2,
                vec![2, 2],
                vec![vec![0], vec![1]],
                vec![false; 2],
            ),
            (
                "a hash edge between single subtasks chains",
                vec![node(&[], None), node(&[(0, hash())], None)],
                1,
                vec![1, 1],
                vec![vec![0, 1]],
                vec![false; 2],
            ),
            (
                "unequal parallelism: forward becomes round-robin, no chain",
                vec![node(&[], Some(1)), node(&[(0, Forward)], Some(3))],
                2,
                vec![1, 3],
                vec![vec![0], vec![1]],
                vec![false; 2],
            ),
            (
                "a node feeding two consumers ends its chain",
                vec![
                    node(&[], None),
                    node(&[(0, Forward)], None),
                    node(&[(0, Forward)], None),
                ],
                2,
                vec![2, 2, 2],
                vec![vec![0], vec![1], vec![2]],
                vec![false; 3],
            ),
            (
                "two inputs: a task of its own",
                vec![
                    node(&[], None),
                    node(&[], None),
                    node(&[(0, Forward), (1, Forward)], None),
                ],
                2,
                vec![2, 2, 2],
                vec![vec![0], vec![1], vec![2]],
                vec![false; 3],
            ),
            (
                "aggregate: the pre-aggregation runs beside its source",
                aggregate_graph(Some(2), Some(3)),
                1,
                vec![2, 2, 3, 3],
                vec![vec![0, 1], vec![2, 3]],
                vec![false; 4],
            ),
            (
                "aggregate at one subtask: its single-subtask form, one chain",
                aggregate_graph(None, None),
                1,
                vec![1, 1, 1, 1],
                vec![vec![0, 1, 2, 3]],
                vec![false, true, false, false],
            ),
            (
                "one source subtask feeding two merging subtasks: still two phases",
                aggregate_graph(Some(1), Some(2)),
                2,
                vec![1, 1, 2, 2],
                vec![vec![0, 1], vec![2, 3]],
                vec![false; 4],
            ),
        ];
        for (name, graph, default, parallelism, want_chains, forms) in cases {
            let plan = plan(&graph, default);
            assert_eq!(plan.parallelism, parallelism, "{name}: parallelism");
            assert_eq!(chains(&plan), want_chains, "{name}: chains");
            assert_eq!(
                plan.single_subtask_form, forms,
                "{name}: single-subtask forms"
            );
        }
        // The rewritten edge itself.
        let plan = plan(&[node(&[], Some(1)), node(&[(0, Forward)], Some(3))], 2);
        assert_eq!(plan.inputs[1][0].partitioning, Rebalance);
        assert_eq!(plan.chains[1].inputs, vec![(0, Rebalance)]);
    }
}
