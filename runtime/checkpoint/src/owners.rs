//! Which operator owns which part of a task's snapshot (Flink's operator uids): a savepoint's state
//! goes to the operator that saved it in whatever vertex that operator is now, not to a vertex of
//! the same name. Vertex ids follow the graph's shape (a `reduce` becomes `reduce-2` when another
//! reduce is added before it; a sink chained into its input's vertex today may be a vertex of its
//! own tomorrow), operator uids do not.
//!
//! A task's snapshot has two owners at most. Its chain's head owns the keyed state, the source
//! position, the broadcast state and an async operator's records in flight (a keyed, two-input
//! or async operator always heads its chain, and a source has no input); the sink that ends the
//! chain owns the committer state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::TaskSnapshot;

/// The operators of one vertex that own its tasks' state, by uid.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StateOwners {
    /// The chain's head: keyed state, source positions, broadcast state.
    pub head: String,
    /// The sink ending the chain (its committer state), if it ends in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
}

/// A part of a task's snapshot, by the operator that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatePart {
    /// Keyed state, source position, broadcast state, records in flight: the chain head's.
    Head,
    /// The sink's committer state.
    Sink,
}

impl StatePart {
    pub const ALL: [StatePart; 2] = [StatePart::Head, StatePart::Sink];

    /// Whether `snapshot` holds anything of this part.
    pub fn held_by(self, snapshot: &TaskSnapshot) -> bool {
        match self {
            StatePart::Head => {
                !snapshot.files.is_empty()
                    || snapshot.position.is_some()
                    || snapshot.broadcast.is_some()
                    || snapshot.in_flight.is_some()
            }
            StatePart::Sink => snapshot.sink.is_some(),
        }
    }

    /// `snapshot` without this part.
    pub fn remove_from(self, snapshot: &mut TaskSnapshot) {
        match self {
            StatePart::Head => {
                snapshot.files.clear();
                snapshot.schemas.clear();
                snapshot.position = None;
                snapshot.broadcast = None;
                snapshot.in_flight = None;
            }
            StatePart::Sink => snapshot.sink = None,
        }
    }
}

impl StateOwners {
    /// The uid of the operator owning `part`, if any operator of the vertex does.
    pub fn owner(&self, part: StatePart) -> Option<&str> {
        match part {
            StatePart::Head => Some(&self.head),
            StatePart::Sink => self.sink.as_deref(),
        }
    }
}

/// The vertex of a checkpoint (whose vertices' owners are `then`) that held `part` of what the
/// job's vertex `vertex` (owners `now`) restores: the one whose owner of `part` is the same
/// operator; `None` when no vertex of the checkpoint had that operator (its state is new). By
/// vertex id when either side names no owners (a checkpoint written before they were recorded).
pub fn predecessor(
    then: &BTreeMap<String, StateOwners>,
    now: Option<&StateOwners>,
    vertex: &str,
    part: StatePart,
) -> Option<String> {
    let Some(now) = now.filter(|_| !then.is_empty()) else {
        return Some(vertex.to_string());
    };
    let operator = now.owner(part)?;
    then.iter()
        .find(|(_, o)| o.owner(part) == Some(operator))
        .map(|(v, _)| v.clone())
}

/// The job's vertex (owners `now`; `has_vertex` says which vertex ids the job has) that takes over
/// `part` of the checkpoint's vertex `old` (owners `then`): the one whose owner of `part` is the
/// same operator; `None` when the job has no such operator (the state is unclaimed). By vertex id
/// when either side names no owners.
pub fn successor(
    then: &BTreeMap<String, StateOwners>,
    now: &BTreeMap<String, StateOwners>,
    old: &str,
    part: StatePart,
    has_vertex: impl Fn(&str) -> bool,
) -> Option<String> {
    match (then.get(old), now.is_empty()) {
        (Some(owners), false) => {
            let operator = owners.owner(part)?;
            now.iter()
                .find(|(_, o)| o.owner(part) == Some(operator))
                .map(|(v, _)| v.clone())
        }
        _ => has_vertex(old).then(|| old.to_string()),
    }
}

/// How a message names `part` of the checkpoint's vertex `vertex`: by its operator when the
/// checkpoint names one.
pub fn describe(then: &BTreeMap<String, StateOwners>, vertex: &str, part: StatePart) -> String {
    match then.get(vertex).and_then(|o| o.owner(part)) {
        Some(operator) if operator != vertex => format!("operator {operator} (vertex {vertex})"),
        Some(operator) => format!("operator {operator}"),
        None => format!("vertex {vertex}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(pairs: &[(&str, &str, Option<&str>)]) -> BTreeMap<String, StateOwners> {
        pairs
            .iter()
            .map(|(v, head, sink)| {
                (
                    v.to_string(),
                    StateOwners {
                        head: head.to_string(),
                        sink: sink.map(String::from),
                    },
                )
            })
            .collect()
    }

    /// Saved: `reduce` (operator counts, with the sink `out` chained) and `source`. Now a reduce
    /// was added before it (`reduce`, operator latest), so counts heads `reduce-2`, and the sink is
    /// a vertex of its own.
    #[test]
    fn state_follows_its_operator_across_renamed_and_rechained_vertices() {
        let then = owners(&[("source", "src", None), ("reduce", "counts", Some("out"))]);
        let now = owners(&[
            ("source", "src", None),
            ("reduce", "latest", None),
            ("reduce-2", "counts", None),
            ("sink", "out", Some("out")),
        ]);
        let pred = |v: &str, part| predecessor(&then, now.get(v), v, part);
        assert_eq!(pred("reduce-2", StatePart::Head).as_deref(), Some("reduce"));
        assert_eq!(pred("reduce", StatePart::Head), None, "latest is new");
        assert_eq!(pred("sink", StatePart::Sink).as_deref(), Some("reduce"));
        assert_eq!(pred("sink", StatePart::Head), None, "no vertex was headed by out");
        assert_eq!(
            pred("reduce-2", StatePart::Sink),
            None,
            "reduce-2 ends in no sink"
        );
        assert_eq!(pred("source", StatePart::Head).as_deref(), Some("source"));

        let has = |v: &str| now.contains_key(v);
        let succ = |v: &str, part| successor(&then, &now, v, part, has);
        assert_eq!(succ("reduce", StatePart::Head).as_deref(), Some("reduce-2"));
        assert_eq!(succ("reduce", StatePart::Sink).as_deref(), Some("sink"));
        let gone = owners(&[("source", "src", None)]);
        assert_eq!(successor(&then, &gone, "reduce", StatePart::Head, has), None);
        assert_eq!(
            describe(&then, "reduce", StatePart::Sink),
            "operator out (vertex reduce)"
        );
        assert_eq!(
            describe(&then, "source", StatePart::Head),
            "operator src (vertex source)"
        );
    }

    /// A checkpoint that names no owners (written before they were recorded), or a job that
    /// names none, maps by vertex id as before.
    #[test]
    fn without_owners_state_maps_by_vertex_id() {
        let none = BTreeMap::new();
        let now = owners(&[("reduce", "counts", Some("out"))]);
        assert_eq!(
            predecessor(&none, now.get("reduce"), "reduce", StatePart::Head).as_deref(),
            Some("reduce")
        );
        let then = owners(&[("reduce", "counts", None)]);
        assert_eq!(
            predecessor(&then, None, "reduce", StatePart::Sink).as_deref(),
            Some("reduce")
        );
        let has = |v: &str| v == "reduce";
        assert_eq!(
            successor(&none, &now, "reduce", StatePart::Head, has).as_deref(),
            Some("reduce")
        );
        assert_eq!(successor(&none, &now, "ghost", StatePart::Head, has), None);
        assert_eq!(describe(&none, "ghost", StatePart::Head), "vertex ghost");
    }
}
