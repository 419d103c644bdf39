//! The exactly-once sink's write-ahead objects in the job's storage: one per checkpoint with
//! records, `kafka-sink/{transactional id}/{run}/{checkpoint}-{writer}`, written at the barrier
//! and removed once its transaction committed (its marker then says it was written, and a
//! restore that finds the object gone reads it as empty).
//!
//! An attempt that dies between a barrier and its checkpoint's completion leaves that
//! checkpoint's object behind, and nothing names it: the run restores from its latest completed
//! checkpoint, whose snapshot names only objects of that checkpoint or earlier ones. The next
//! attempt of the subtask removes such orphans of its run when it starts: every object of the
//! run's checkpoints after the one restored. Objects of earlier runs are left alone (a savepoint
//! of theirs may name them).

/// Where every write-ahead object lives, under the job's storage.
pub(crate) const ROOT: &str = "kafka-sink/";

/// A run's directory of the objects written through `transactional_id`.
pub(crate) fn run_dir(transactional_id: &str, run: &str) -> String {
    let run = if run.is_empty() { "-" } else { run };
    format!("{ROOT}{transactional_id}/{run}/")
}

/// The object of `checkpoint`'s records, written by `writer` (one attempt of the subtask).
pub(crate) fn object(transactional_id: &str, run: &str, checkpoint: u64, writer: &str) -> String {
    format!("{}{checkpoint:020}-{writer}", run_dir(transactional_id, run))
}

/// The checkpoint an object (its name in its run's directory) holds the records of.
fn checkpoint_of(name: &str) -> Option<u64> {
    name.split_once('-')?.0.parse().ok()
}

/// The objects (names in a run's directory) of checkpoints after `restored`, which nothing
/// names; `restored` 0 for a start without a checkpoint of the run.
pub(crate) fn orphans(names: &[String], restored: u64) -> Vec<String> {
    names
        .iter()
        .filter(|n| checkpoint_of(n).is_some_and(|c| c > restored))
        .cloned()
        .collect()
}

/// The transactional ids (directories under [`ROOT`], `name/`) whose orphans subtask `subtask` of
/// `parallelism` removes: its own, and those of subtasks a rescale removed (`{prefix}-{j}`,
/// j >= parallelism) that fall to it (j mod parallelism), so no two subtasks clean one directory.
pub(crate) fn cleaned_by(dirs: &[String], prefix: &str, subtask: u32, parallelism: u32) -> Vec<String> {
    let own = format!("{prefix}-{subtask}");
    dirs.iter()
        .filter_map(|d| d.strip_suffix('/'))
        .filter(|d| {
            *d == own
                || d.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .and_then(|j| j.parse::<u32>().ok())
                    .is_some_and(|j| j >= parallelism && j % parallelism.max(1) == subtask)
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_sort_by_checkpoint_and_orphans_are_those_after_the_restored_one() {
        let a = object("floe-j-t-0", "run1", 9, "w1");
        assert_eq!(a, "kafka-sink/floe-j-t-0/run1/00000000000000000009-w1");
        assert_eq!(run_dir("p-0", ""), "kafka-sink/p-0/-/");
        let names: Vec<String> = [9, 10, 11, 12]
            .iter()
            .map(|c| {
                object("p-0", "r", *c, "w")
                    .trim_start_matches("kafka-sink/p-0/r/")
                    .to_string()
            })
            .chain(["not-ours".to_string(), "sub/".to_string()])
            .collect();
        assert_eq!(
            orphans(&names, 10),
            [
                "00000000000000000011-w".to_string(),
                "00000000000000000012-w".to_string()
            ]
        );
        assert_eq!(
            orphans(&names, 0).len(),
            4,
            "no checkpoint restored: every object of the run"
        );
        assert!(orphans(&names, 12).is_empty());
    }

    #[test]
    fn each_directory_is_cleaned_by_one_subtask() {
        let dirs: Vec<String> = ["p-0/", "p-1/", "p-2/", "p-3/", "p-4/", "other-0/", "p-x/"]
            .iter()
            .map(|d| d.to_string())
            .collect();
        // Rescaled from 5 subtasks to 2: 2 and 4 fall to subtask 0, 3 to subtask 1.
        assert_eq!(cleaned_by(&dirs, "p", 0, 2), ["p-0", "p-2", "p-4"]);
        assert_eq!(cleaned_by(&dirs, "p", 1, 2), ["p-1", "p-3"]);
        assert_eq!(cleaned_by(&dirs, "p", 1, 5), ["p-1"]);
    }
}
