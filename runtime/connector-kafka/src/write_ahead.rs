//! The exactly-once sink's write-ahead objects in the job's storage. The records after each
//! checkpoint barrier stream into an object as they come (a few parts in memory, not the
//! interval): `kafka-sink/{transactional id}/{run}/a{after}-{writer}`, named by the barrier they
//! follow (`after`, 0 at the start) since the checkpoint they will belong to is known only at the
//! next barrier. The object is complete at that barrier, named in the checkpoint's state, and
//! removed once its transaction committed (its marker then says it was written, and a restore
//! that finds the object gone reads it as empty). Objects of earlier versions are named by their
//! checkpoint, `{checkpoint}-{writer}`, and are read and cleaned the same way.
//!
//! An attempt that dies before a checkpoint completes leaves the objects after that checkpoint's
//! barrier behind, and nothing names them: the run restores from its latest completed
//! checkpoint, whose snapshot names only objects of records up to its barrier. The next attempt
//! of the subtask removes such orphans of its run when it starts: every object of records after
//! the restored checkpoint's barrier. Objects of earlier runs are left alone (a savepoint of
//! theirs may name them).

/// Where every write-ahead object lives, under the job's storage.
pub(crate) const ROOT: &str = "kafka-sink/";

/// A run's directory of the objects written through `transactional_id`.
pub(crate) fn run_dir(transactional_id: &str, run: &str) -> String {
    let run = if run.is_empty() { "-" } else { run };
    format!("{ROOT}{transactional_id}/{run}/")
}

/// The object of the records after barrier `after` (0: from the start), written by `writer`
/// (one attempt of the subtask).
pub(crate) fn object(transactional_id: &str, run: &str, after: u64, writer: &str) -> String {
    format!("{}a{after:020}-{writer}", run_dir(transactional_id, run))
}

/// Whether an object (its name in its run's directory) holds records after the barrier of
/// checkpoint `restored`: one after barrier `a` holds those of a checkpoint after `a`, an older
/// object named by checkpoint `c` those of `c`.
fn after_restored(name: &str, restored: u64) -> bool {
    let Some((head, _writer)) = name.split_once('-') else {
        return false;
    };
    match head.strip_prefix('a') {
        Some(after) => after.parse::<u64>().is_ok_and(|a| a >= restored),
        None => head.parse::<u64>().is_ok_and(|c| c > restored),
    }
}

/// The objects (names in a run's directory) of records after the barrier of `restored`, which
/// nothing names; `restored` 0 for a start without a checkpoint of the run.
pub(crate) fn orphans(names: &[String], restored: u64) -> Vec<String> {
    names
        .iter()
        .filter(|n| after_restored(n, restored))
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
    fn orphans_are_the_objects_of_records_after_the_restored_barrier() {
        let a = object("floe-j-t-0", "run1", 9, "w1");
        assert_eq!(a, "kafka-sink/floe-j-t-0/run1/a00000000000000000009-w1");
        assert_eq!(run_dir("p-0", ""), "kafka-sink/p-0/-/");
        // Records after barriers 0, 9, 10 and 12, and two objects of an earlier version, named by
        // checkpoints 10 and 11.
        let names: Vec<String> = [0, 9, 10, 12]
            .iter()
            .map(|c| {
                object("p-0", "r", *c, "w")
                    .trim_start_matches("kafka-sink/p-0/r/")
                    .to_string()
            })
            .chain([
                "00000000000000000010-w".to_string(),
                "00000000000000000011-w".to_string(),
                "not-ours".to_string(),
                "sub/".to_string(),
            ])
            .collect();
        assert_eq!(
            orphans(&names, 10),
            [
                "a00000000000000000010-w".to_string(),
                "a00000000000000000012-w".to_string(),
                "00000000000000000011-w".to_string(),
            ]
        );
        assert_eq!(
            orphans(&names, 0).len(),
            6,
            "no checkpoint restored: every object of the run"
        );
        assert_eq!(orphans(&names, 13), Vec::<String>::new());
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
