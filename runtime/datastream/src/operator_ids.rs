//! Operator uids (Flink's `uid()` and its generated operator ids): what a checkpoint names each
//! operator's state by, so a savepoint restores into a changed job by operator, not by vertex
//! ([`floe_checkpoint::owners`]).
//!
//! An operator without a uid gets one derived from its place in the graph (as Flink generates
//! one): its kind, its inputs' ids and how many operators of the same kind on the same inputs came
//! before it. That is stable across parallelism and chaining changes, but an operator added
//! upstream changes it, and the saved state is then unclaimed (refused unless
//! `execution.state-recovery.ignore-unclaimed-state`); only an operator of the same kind added on
//! the same input before it would take its id, and its state. Stateful operators should set a
//! uid; the JobManager warns about those that do not.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use floe_checkpoint::StateOwners;
use serde::Serialize;

use crate::api::{NodeKind, StreamNode};
use crate::error::{Error, Result};

/// Each node's operator uid: its own (`uid()`), unique, or one derived from its place in the graph.
pub(crate) fn operator_uids(nodes: &[StreamNode]) -> Result<Vec<String>> {
    let mut ids: Vec<String> = Vec::with_capacity(nodes.len());
    let mut given: HashMap<&str, usize> = HashMap::new();
    let mut derived: HashMap<String, u32> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        if let Some(uid) = node.uid {
            if let Some(&j) = given.get(uid) {
                return Err(Error::Graph(format!(
                    "uid {uid:?} is set on two operators, {} and {}: a uid names an operator's state \
                     in checkpoints and savepoints, so each must be unique",
                    nodes[j].name, node.name
                )));
            }
            given.insert(uid, i);
            ids.push(uid.to_string());
            continue;
        }
        let mut key = node.id.to_string();
        for input in &node.inputs {
            let tag = input.tag.as_ref().map_or("", |(tag, _)| tag.as_str());
            let _ = write!(key, "|{}:{}:{tag}", ids[input.node], input.side);
        }
        let n = derived.entry(key.clone()).or_insert(0);
        *n += 1;
        let _ = write!(key, "#{n}");
        ids.push(format!(
            "{}-{:08x}",
            node.id,
            crate::graph::fnv64(key.as_bytes()) as u32
        ));
    }
    Ok(ids)
}

/// One operator as `floe plan` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorView {
    /// The vertex whose chain it is in.
    pub vertex: String,
    pub name: String,
    pub uid: String,
    /// Whether the job set the uid (`uid()`); otherwise it is derived from the graph.
    pub uid_set: bool,
    /// What state it keeps in checkpoints: `keyed`, `source`, `sink`, `broadcast`,
    /// `in-flight` (an async operator's records); empty for none.
    pub state: Vec<&'static str>,
}

/// The operators of each vertex's chain (`chains[k]` of vertex `vertices[k]`, head first), with
/// the state each keeps; `keyed[k]`: whether vertex k is fed by a hash exchange.
pub(crate) fn operator_views(
    nodes: &[StreamNode],
    uids: &[String],
    chains: &[(String, &[usize], bool)],
) -> Vec<OperatorView> {
    let mut views = Vec::new();
    for (vertex, chain, keyed) in chains {
        for (k, &i) in chain.iter().enumerate() {
            let node = &nodes[i];
            let mut state = Vec::new();
            match node.kind {
                NodeKind::Source(_) => state.push("source"),
                NodeKind::Sink(_) => state.push("sink"),
                _ => {}
            }
            if k == 0 && *keyed {
                state.push("keyed");
            }
            if k == 0 && node.id == "broadcast-process" {
                state.push("broadcast");
            }
            if k == 0 && node.id == "async-wait" {
                state.push("in-flight");
            }
            views.push(OperatorView {
                vertex: vertex.clone(),
                name: node.name.clone(),
                uid: uids[i].clone(),
                uid_set: node.uid.is_some(),
                state,
            });
        }
    }
    views
}

/// Each vertex's state owners: its chain's head, and the sink ending it if any.
pub(crate) fn state_owners(
    nodes: &[StreamNode],
    uids: &[String],
    chains: &[(String, &[usize], bool)],
) -> BTreeMap<String, StateOwners> {
    chains
        .iter()
        .filter_map(|(vertex, chain, _)| {
            let (&head, &last) = (chain.first()?, chain.last()?);
            let sink = matches!(nodes[last].kind, NodeKind::Sink(_)).then(|| uids[last].clone());
            Some((
                vertex.clone(),
                StateOwners {
                    head: uids[head].clone(),
                    sink,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::StreamExecutionEnvironment;

    /// Issue 31, item 5: a uid names an operator's state, so two operators with one uid are
    /// refused, naming both.
    #[test]
    fn a_uid_set_on_two_operators_is_refused_naming_both() {
        let env = StreamExecutionEnvironment::new();
        let words = env.from_collection(vec![("a".to_string(), 1u64)]).uid("words");
        words
            .key_by(|w: &(String, u64)| w.0.clone())
            .reduce(|a, b| (a.0, a.1 + b.1))
            .uid("words")
            .print();
        let e = env.build().expect_err("refused").to_string();
        assert!(e.contains("uid \"words\" is set on two operators"), "{e}");
        assert!(e.contains("each must be unique"), "{e}");
    }

    /// The operators the JobManager warns about: those that keep state with a uid derived from
    /// their place in the graph, not those with a uid of the job's or without state.
    #[test]
    fn stateful_operators_without_a_uid_are_the_ones_warned_about() {
        let env = StreamExecutionEnvironment::new();
        let words = env.from_collection(vec![("a".to_string(), 1u64)]).uid("words");
        let counted = words
            .key_by(|w: &(String, u64)| w.0.clone())
            .reduce(|a, b| (a.0, a.1 + b.1));
        let named = counted
            .key_by(|w: &(String, u64)| w.0.clone())
            .reduce(|a, b| (a.0, a.1.max(b.1)))
            .uid("max");
        named.map(|w: (String, u64)| w.1).print().uid("out");
        let built = env.build().expect("builds");
        let warned = built.stateful_operators_without_uid();
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert_eq!(warned, ["Reduce (vertex reduce)"]);
    }
}
