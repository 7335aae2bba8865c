//! The shape of a spec's components as a graph: every `inputs` entry names a
//! component, nothing reads a sink, there are no cycles, every source and
//! transform is read, and there is a sink. Pure, so it is table-tested.

use std::collections::HashMap;

use super::diagnostic::Diagnostic;
use super::model::{Component, Role};
use super::reader::{Located, nearest};

/// A component as the graph sees it: also those whose settings could not be
/// read, so that one bad setting does not make its readers look dangling.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its id.
    pub id: Located<String>,
    /// Source, transform or sink.
    pub role: Role,
    /// What it reads.
    pub inputs: Vec<Located<String>>,
}

/// Every problem with how the components connect.
pub fn check(components: &[Node]) -> Vec<Diagnostic> {
    let mut problems = Vec::new();
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, c) in components.iter().enumerate() {
        if let Some(&first) = by_id.get(c.id.value.as_str()) {
            let other = &components[first];
            problems.push(
                Diagnostic::at(
                    c.id.span.clone(),
                    format!(
                        "two components are called '{}' ([{}.{0}] and [{}.{0}])",
                        c.id.value,
                        other.role.table(),
                        c.role.table()
                    ),
                )
                .help("ids name operators in checkpoints: give each component its own"),
            );
        } else {
            by_id.insert(&c.id.value, i);
        }
    }
    let mut read = vec![false; components.len()];
    for c in components {
        for input in &c.inputs {
            match by_id.get(input.value.as_str()) {
                Some(&i) if components[i].role == Role::Sink => problems.push(Diagnostic::at(
                    input.span.clone(),
                    format!(
                        "'{}' reads '{}', which is a sink; sinks have no output",
                        c.id.value, input.value
                    ),
                )),
                Some(&i) => read[i] = true,
                None => {
                    let mut d = Diagnostic::at(
                        input.span.clone(),
                        format!(
                            "'{}' reads '{}', but no component is called that",
                            c.id.value, input.value
                        ),
                    );
                    let readable = components
                        .iter()
                        .filter(|o| o.role != Role::Sink)
                        .map(|o| o.id.value.as_str());
                    if let Some(near) = nearest(&input.value, readable) {
                        d = d.help(format!("did you mean '{near}'?"));
                    }
                    problems.push(d);
                }
            }
        }
    }
    if let Some(cycle) = find_cycle(components, &by_id) {
        let names: Vec<&str> = cycle
            .iter()
            .map(|&i| components[i].id.value.as_str())
            .collect();
        problems.push(
            Diagnostic::at(
                components[cycle[0]].id.span.clone(),
                format!(
                    "the components form a cycle: {} -> {}",
                    names.join(" -> "),
                    names[0]
                ),
            )
            .help("rows must flow from sources to sinks; remove one of these inputs"),
        );
    }
    for (i, c) in components.iter().enumerate() {
        if c.role != Role::Sink && !read[i] {
            problems.push(
                Diagnostic::at(
                    c.id.span.clone(),
                    format!(
                        "nothing reads [{}.{}]; its rows would go nowhere",
                        c.role.table(),
                        c.id.value
                    ),
                )
                .help(format!(
                    "add '{}' to the `inputs` of a transform or sink, or remove it",
                    c.id.value
                )),
            );
        }
    }
    if !components.iter().any(|c| c.role == Role::Sink) {
        problems.push(
            Diagnostic::whole_file("the spec has no sink, so the job would write nothing")
                .help("add a [sinks.ID] table with `type` and `inputs`"),
        );
    }
    if !components.iter().any(|c| c.role == Role::Source) {
        problems.push(
            Diagnostic::whole_file("the spec has no source, so the job would read nothing")
                .help("add a [sources.ID] table with `type`"),
        );
    }
    problems
}

/// The components in an order where each comes after everything it reads.
/// Call after [`check`] found nothing.
pub fn order(components: &[Component]) -> Vec<usize> {
    let by_id: HashMap<&str, usize> = components
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id.value.as_str(), i))
        .collect();
    let mut done = vec![false; components.len()];
    let mut out = Vec::with_capacity(components.len());
    while out.len() < components.len() {
        let before = out.len();
        for (i, c) in components.iter().enumerate() {
            if !done[i]
                && c.inputs
                    .iter()
                    .all(|input| by_id.get(input.value.as_str()).is_some_and(|&j| done[j]))
            {
                done[i] = true;
                out.push(i);
            }
        }
        if out.len() == before {
            break; // a cycle or a dangling input: `check` reports it
        }
    }
    out
}

/// One cycle, as component indices in the order the inputs run, if any.
fn find_cycle(components: &[Node], by_id: &HashMap<&str, usize>) -> Option<Vec<usize>> {
    // 0 unvisited, 1 on the current path, 2 finished.
    fn visit(
        i: usize,
        components: &[Node],
        by_id: &HashMap<&str, usize>,
        state: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        state[i] = 1;
        path.push(i);
        for input in &components[i].inputs {
            let Some(&j) = by_id.get(input.value.as_str()) else {
                continue;
            };
            if state[j] == 1 {
                let start = path.iter().position(|&p| p == j).expect("on the path");
                let mut cycle = path[start..].to_vec();
                cycle.reverse();
                return Some(cycle);
            }
            if state[j] == 0
                && let Some(cycle) = visit(j, components, by_id, state, path)
            {
                return Some(cycle);
            }
        }
        path.pop();
        state[i] = 2;
        None
    }
    let mut state = vec![0u8; components.len()];
    for i in 0..components.len() {
        if state[i] == 0
            && let Some(cycle) = visit(i, components, by_id, &mut state, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::{Kind, SqlSpec};

    fn at(value: &str) -> Located<String> {
        Located {
            value: value.to_string(),
            span: 0..0,
        }
    }

    fn c(id: &str, role: Role, inputs: &[&str]) -> Component {
        Component {
            id: at(id),
            role,
            inputs: inputs.iter().map(|i| at(i)).collect(),
            parallelism: None,
            kind: Kind::Sql(SqlSpec {
                filter: None,
                columns: Vec::new(),
                select: None,
                dead_letter: None,
                max_bad_rows: None,
            }),
        }
    }

    fn messages(components: &[Component]) -> Vec<String> {
        let nodes: Vec<Node> = components
            .iter()
            .map(|c| Node {
                id: c.id.clone(),
                role: c.role,
                inputs: c.inputs.clone(),
            })
            .collect();
        check(&nodes).into_iter().map(|d| d.message).collect()
    }

    #[test]
    fn graphs_and_their_problems() {
        use Role::*;
        let cases: Vec<(&str, Vec<Component>, Vec<&str>)> = vec![
            (
                "a line",
                vec![
                    c("a", Source, &[]),
                    c("t", Transform, &["a"]),
                    c("s", Sink, &["t"]),
                ],
                vec![],
            ),
            (
                "fan-out and union",
                vec![
                    c("a", Source, &[]),
                    c("b", Source, &[]),
                    c("t", Transform, &["a", "b"]),
                    c("s1", Sink, &["t"]),
                    c("s2", Sink, &["a"]),
                ],
                vec![],
            ),
            (
                "a dangling input",
                vec![c("gen", Source, &[]), c("s", Sink, &["gne"])],
                vec![
                    "'s' reads 'gne', but no component is called that",
                    "nothing reads [sources.gen]",
                ],
            ),
            (
                "a cycle",
                vec![
                    c("a", Source, &[]),
                    c("t1", Transform, &["a", "t2"]),
                    c("t2", Transform, &["t1"]),
                    c("s", Sink, &["t2"]),
                ],
                vec!["the components form a cycle: t2 -> t1 -> t2"],
            ),
            (
                "no sink",
                vec![c("a", Source, &[]), c("t", Transform, &["a"])],
                vec!["nothing reads [transforms.t]", "the spec has no sink"],
            ),
            (
                "reading a sink",
                vec![
                    c("a", Source, &[]),
                    c("s", Sink, &["a"]),
                    c("s2", Sink, &["s"]),
                ],
                vec!["'s2' reads 's', which is a sink"],
            ),
            (
                "one id twice",
                vec![c("a", Source, &[]), c("a", Sink, &["a"])],
                vec!["two components are called 'a' ([sources.a] and [sinks.a])"],
            ),
        ];
        for (name, components, expected) in cases {
            let got = messages(&components);
            assert_eq!(got.len(), expected.len(), "{name}: {got:?}");
            for (g, e) in got.iter().zip(&expected) {
                assert!(g.starts_with(e), "{name}: '{g}' should start with '{e}'");
            }
        }
    }

    #[test]
    fn the_order_puts_inputs_first() {
        use Role::*;
        let components = vec![
            c("s", Sink, &["t2"]),
            c("t2", Transform, &["t1", "b"]),
            c("t1", Transform, &["a"]),
            c("a", Source, &[]),
            c("b", Source, &[]),
        ];
        let order = order(&components);
        let pos = |id: &str| {
            order
                .iter()
                .position(|&i| components[i].id.value == id)
                .unwrap()
        };
        assert_eq!(order.len(), 5);
        assert!(pos("a") < pos("t1") && pos("t1") < pos("t2") && pos("b") < pos("t2"));
        assert!(pos("t2") < pos("s"));
    }
}
