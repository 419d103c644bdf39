use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::pace::{Pacer, Stride};

/// A text source over `dir` for subtask `(index, parallelism)`, reading `chunk` bytes at a time.
fn text_source<T>(
    dir: &std::path::Path,
    (subtask, parallelism): (u32, u32),
    chunk: usize,
    whole_files: bool,
    parse: Parser<T>,
) -> TextSource<T> {
    TextSource {
        url: dir.to_string_lossy().into_owned(),
        conf: BTreeMap::new(),
        subtask,
        parallelism,
        chunk,
        whole_files,
        reader: None,
        restored: None,
        parse,
    }
}

fn write_inputs(dir: &std::path::Path) -> Vec<String> {
    let mut rng = SplitMix::new(7);
    let mut expected = Vec::new();
    for f in 0..4 {
        let mut text = String::new();
        let lines = 1 + rng.next_u64() % 40;
        for l in 0..lines {
            let len = rng.next_u64() % 30;
            let line: String = (0..len).map(|i| (b'a' + ((i + l) % 26) as u8) as char).collect();
            let line = format!("f{f}l{l}:{line}");
            text.push_str(&line);
            expected.push(line);
            if l + 1 < lines || f % 2 == 0 {
                text.push('\n');
            }
        }
        std::fs::write(dir.join(format!("in-{f}.txt")), text).expect("write input");
    }
    // Empty lines and an empty file are part of the input too.
    std::fs::write(dir.join("in-4.txt"), "\n\nx\r\n\n").expect("write");
    expected.extend(["", "", "x", ""].map(String::from));
    std::fs::write(dir.join("in-5.txt"), "").expect("write");
    std::fs::write(dir.join("_hidden"), "not input\n").expect("write");
    expected.sort();
    expected
}

#[tokio::test]
async fn every_line_is_read_exactly_once_for_any_parallelism_and_chunk_size() {
    let dir = std::env::temp_dir().join(format!("floe-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let expected = write_inputs(&dir);
    let loc = locate(&dir.to_string_lossy(), &BTreeMap::new()).expect("locate");
    let files = list_files(&loc).await.expect("list");
    assert_eq!(files.len(), 6, "hidden files are skipped: {files:?}");
    for p in 1..=5u32 {
        for chunk in [1usize, 3, 7, 64, 1 << 20] {
            let mut got = Vec::new();
            for s in 0..p {
                let mut r = SplitReader::new(loc.clone(), &files, s, p, chunk);
                while r
                    .next_chunk(&mut |l| {
                        got.push(String::from_utf8_lossy(l).into_owned());
                        Ok(())
                    })
                    .await
                    .expect("read")
                {}
            }
            got.sort();
            assert_eq!(got, expected, "p={p} chunk={chunk}");
        }
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Issue 11, scenario 10: a source restored from a checkpoint reads exactly the lines it had not
/// emitted, although a file was added to the input directory since (it sorts first, so a file
/// index into a new listing would point at the wrong file and every split would shift).
#[tokio::test]
async fn a_restored_text_source_continues_its_split_when_the_directory_changed() {
    use crate::operators::tests::VecSink;
    let dir = std::env::temp_dir().join(format!("floe-split-restore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let expected = write_inputs(&dir);
    let source = |subtask, parallelism| text_source(&dir, (subtask, parallelism), 5, false, lines());
    let p = 3;
    let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut positions = Vec::new();
    for s in 0..p {
        let mut first = source(s, p);
        let mut out = VecSink(lines.clone());
        for _ in 0..4 {
            first.produce(&mut out).await.expect("read");
        }
        positions.push(first.position());
    }
    std::fs::write(dir.join("a-added-later.txt"), "not in the checkpointed input\n").expect("write");
    for (s, position) in positions.iter().enumerate() {
        let mut restored = source(s as u32, p);
        restored.restore(position).expect("a valid position");
        let mut out = VecSink(lines.clone());
        while restored.produce(&mut out).await.expect("read") {}
    }
    let mut got = lines.lock().expect("lock").clone();
    got.sort();
    assert_eq!(
        got, expected,
        "every checkpointed line exactly once, nothing of the new file"
    );

    // A file of the split that changed since the checkpoint is an error naming it.
    std::fs::write(dir.join("in-0.txt"), "rewritten\n").expect("write");
    let mut restored = source(0, p);
    restored.restore(&positions[0]).expect("a valid position");
    let mut out = VecSink(lines.clone());
    let error = restored
        .produce(&mut out)
        .await
        .expect_err("changed input")
        .to_string();
    assert!(error.contains("in-0.txt changed since the checkpoint"), "{error}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

fn sink_context(restore: Option<crate::checkpoint::TaskRestore>) -> crate::operators::OpContext {
    sink_context_of(0, restore)
}

fn sink_context_of(
    subtask: u32,
    restore: Option<crate::checkpoint::TaskRestore>,
) -> crate::operators::OpContext {
    sink_context_in("job1", subtask, restore)
}

/// A checkpointing sink's context in job run `job`.
pub(crate) fn sink_context_in(
    job: &str,
    subtask: u32,
    restore: Option<crate::checkpoint::TaskRestore>,
) -> crate::operators::OpContext {
    crate::operators::OpContext {
        job_id: job.into(),
        operator_name: "Sink".into(),
        subtask,
        parallelism: 1,
        attempt: 0,
        configuration: BTreeMap::new(),
        metrics: Arc::default(),
        key_groups: 0..128,
        max_parallelism: 128,
        keyed_state: Arc::default(),
        restore,
        checkpointing: true,
        time: None,
        side_outputs: Arc::default(),
    }
}

/// A sink's restore from `checkpoint` with these sink states.
fn restore(checkpoint: u64, sinks: Vec<String>) -> Option<crate::checkpoint::TaskRestore> {
    Some(crate::checkpoint::TaskRestore {
        checkpoint,
        sources: Vec::new(),
        sinks,
        ..Default::default()
    })
}

/// The committed files of a sink directory and their contents, by name.
fn committed(dir: &std::path::Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part-"))
        .map(|n| (n.clone(), std::fs::read_to_string(dir.join(&n)).expect("read")))
        .collect()
}

/// The hidden in-progress parts of a sink directory, by name, sorted.
fn in_progress(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".inprogress"))
        .collect();
    names.sort();
    names
}

/// Issue 11, scenario 5: two attempts of one subtask restored from the same checkpoint (the
/// older one on a TaskManager declared lost that still runs) write at the same time. The
/// current attempt's commit makes exactly its own data visible.
#[tokio::test]
async fn two_attempts_of_a_sink_subtask_never_touch_each_others_parts() {
    let dir = std::env::temp_dir().join(format!("floe-sink-attempts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    // Checkpoint 1 of a first attempt: one part pending.
    let mut first = Box::new(FileSinkIo::new(url.clone(), &sink_context(None)));
    first
        .write(Bytes::from_static(b"before 1\n"))
        .await
        .expect("write");
    let state = first.pre_commit(1).await.expect("pre-commit").expect("state");
    let mut zombie = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context(restore(1, vec![state.clone()])),
    ));
    let mut current = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context(restore(1, vec![state.clone()])),
    ));
    // Both attempts write the parts that follow the restored checkpoint at the same time.
    zombie
        .write(Bytes::from_static(b"zombie 1\n"))
        .await
        .expect("write");
    current
        .write(Bytes::from_static(b"current 1\n"))
        .await
        .expect("write");
    let _ = zombie.pre_commit(2).await;
    current.pre_commit(2).await.expect("pre-commit");
    let _ = zombie.write(Bytes::from_static(b"zombie 2, longer\n")).await;
    current
        .write(Bytes::from_static(b"current 2\n"))
        .await
        .expect("write");
    current.pre_commit(3).await.expect("pre-commit");
    let _ = zombie.pre_commit(3).await;
    current.commit(3).await.expect("commit");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(
        contents,
        vec!["before 1\n", "current 1\n", "current 2\n"],
        "checkpoint 1's part (committed by the restore) and the current attempt's parts only"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Issue 12: sink states restored into another parallelism. Two subtasks checkpoint a pending
/// part each, then commit one more each at an end of input that checkpoint does not cover.
/// Restored into one subtask, both pending parts are committed and both uncovered ones
/// deleted; restored from there into three, the two added subtasks number parts in lineages
/// of their own, and restoring one of them again removes only its own uncovered part.
#[tokio::test]
async fn sink_states_move_between_parallelisms_without_loss_or_duplicates() {
    let dir = std::env::temp_dir().join(format!("floe-sink-rescale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    let mut states = Vec::new();
    for k in 0..2u32 {
        let mut sink = Box::new(FileSinkIo::new(url.clone(), &sink_context_of(k, None)));
        sink.write(Bytes::from(format!("covered {k}\n")))
            .await
            .expect("write");
        states.push(sink.pre_commit(1).await.expect("pre-commit").expect("state"));
        sink.write(Bytes::from(format!("after {k}\n")))
            .await
            .expect("write");
        sink.close().await.expect("close");
    }
    let mut merged = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context_of(0, restore(1, states)),
    ));
    merged
        .write(Bytes::from_static(b"merged\n"))
        .await
        .expect("write");
    let state = merged.pre_commit(2).await.expect("pre-commit").expect("state");
    merged.commit(2).await.expect("commit");
    // An attempt of old subtask 1 cancelled by the rescale left a part in progress.
    std::fs::write(dir.join(".part-job1-1-9-cancelled.inprogress"), "abandoned\n").expect("write");
    assert!(state.contains("\"taken_over\":[\"job1-1\"]"), "{state}");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(contents, vec!["covered 0\n", "covered 1\n", "merged\n"]);

    // Into three: subtask 0 continues, subtasks 1 and 2 are new (no state).
    let mut added = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context_of(2, restore(2, Vec::new())),
    ));
    added
        .write(Bytes::from_static(b"added, uncovered\n"))
        .await
        .expect("write");
    added.close().await.expect("close");
    let names: Vec<String> = committed(&dir).into_keys().collect();
    assert!(
        names.iter().any(|n| n.starts_with("part-job1-2c2-0-")),
        "{names:?}"
    );
    // The added subtask restored from checkpoint 2 again: its uncovered part goes, nothing else.
    let again = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context_of(2, restore(2, Vec::new())),
    ));
    again.close().await.expect("close");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(contents, vec!["covered 0\n", "covered 1\n", "merged\n"]);
    assert!(state.contains("\"lineage\":\"job1-0\""), "{state}");
    // Subtask 0 of three continues lineage 0 and, at its end, removes what old subtask 1's
    // cancelled attempt left in progress: no hidden part is left behind.
    let last = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context_of(0, restore(2, vec![state.clone()])),
    ));
    last.close().await.expect("close");
    let hidden = in_progress(&dir);
    assert!(hidden.is_empty(), "{hidden:?}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Issue 31, item 2: a second run into the same directory (a stateless redeploy, a resubmit)
/// and a run started from the first one's savepoint keep everything the first run committed,
/// including what it committed after that savepoint; the savepoint's pending part is committed
/// once, and a failover within the second run still removes that run's own uncovered part.
#[tokio::test]
async fn later_runs_never_remove_what_earlier_runs_committed() {
    let dir = std::env::temp_dir().join(format!("floe-sink-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    // Run 1: a savepoint (checkpoint 1) with a part pending, then a checkpoint 2 committed after
    // it, then output committed at its end of input.
    let mut first = Box::new(FileSinkIo::new(url.clone(), &sink_context_in("run1", 0, None)));
    first.write(Bytes::from_static(b"run1 a\n")).await.expect("write");
    let savepoint = first.pre_commit(1).await.expect("pre-commit").expect("state");
    first.write(Bytes::from_static(b"run1 b\n")).await.expect("write");
    first.pre_commit(2).await.expect("pre-commit");
    first.commit(2).await.expect("commit");
    first.write(Bytes::from_static(b"run1 c\n")).await.expect("write");
    first.close().await.expect("close");
    let run1 = vec!["run1 a\n", "run1 b\n", "run1 c\n"];
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(contents, run1);

    // Run 2, a fresh start (a stateless redeploy): beside run 1's output, not instead of it.
    let mut second = Box::new(FileSinkIo::new(url.clone(), &sink_context_in("run2", 0, None)));
    second.write(Bytes::from_static(b"run2\n")).await.expect("write");
    second.pre_commit(1).await.expect("pre-commit");
    second.commit(1).await.expect("commit");
    second.close().await.expect("close");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(contents, vec!["run1 a\n", "run1 b\n", "run1 c\n", "run2\n"]);

    // Run 1's attempt that was still writing after the savepoint when it was killed.
    std::fs::write(dir.join(".part-run1-0-9-killed.inprogress"), "never committed\n").expect("write");
    // Run 3 from run 1's savepoint: its parts go into a lineage of run 3; run 1's parts stay.
    let mut ctx = sink_context_in("run3", 0, restore(1, vec![savepoint.clone()]));
    ctx.configuration
        .insert(crate::RUNS_LATEST_CHECKPOINT_KEY.into(), "run1:2,run2:1".into());
    let mut third = Box::new(FileSinkIo::new(url.clone(), &ctx));
    third.write(Bytes::from_static(b"run3 x\n")).await.expect("write");
    let own = third.pre_commit(2).await.expect("pre-commit").expect("state");
    third.commit(2).await.expect("commit");
    third
        .write(Bytes::from_static(b"run3 uncovered\n"))
        .await
        .expect("write");
    third.close().await.expect("close");
    assert!(own.contains("\"lineage\":\"run3-0\""), "{own}");
    // A failover within run 3 to its checkpoint 2 rolls back only run 3's uncovered part.
    let again = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context_in("run3", 0, restore(2, vec![own])),
    ));
    again.close().await.expect("close");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(
        contents,
        vec!["run1 a\n", "run1 b\n", "run1 c\n", "run2\n", "run3 x\n"]
    );
    // Run 1's checkpoint 2 is newer than the savepoint: what run 1 left in progress may be
    // pending in it, so it stays (see the next test).
    assert_eq!(in_progress(&dir), vec![".part-run1-0-9-killed.inprogress"]);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Issue 31 (a `floe verify` run, seed 4: a suspend, then a TaskManager paused): a redeploy
/// from another run's checkpoint whose first attempt fails before its end. The failover restores
/// the new run's own checkpoint, and its end must still remove what the restored run left in
/// progress (its state lists that lineage as taken over): no hidden part outlives the job.
#[tokio::test]
async fn a_failover_after_a_redeploy_still_removes_what_the_earlier_run_left_in_progress() {
    let dir = std::env::temp_dir().join(format!("floe-sink-redeploy-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    // Run 1 checkpoints a part, writes on, and is killed (a suspend): its open part stays.
    let mut first = Box::new(FileSinkIo::new(url.clone(), &sink_context_in("run1", 0, None)));
    first
        .write(Bytes::from_static(b"run1 covered\n"))
        .await
        .expect("write");
    let latest = first.pre_commit(1).await.expect("pre-commit").expect("state");
    first
        .write(Bytes::from_static(b"run1 lost\n"))
        .await
        .expect("write");
    // Killed: no drop runs.
    std::mem::forget(first);
    // Run 2 restores run 1's latest checkpoint (last-state), checkpoints, and its attempt fails.
    let run2 = |restore| {
        let mut ctx = sink_context_in("run2", 0, restore);
        ctx.configuration
            .insert(crate::RUNS_LATEST_CHECKPOINT_KEY.into(), "run1:1".into());
        ctx
    };
    let mut second = Box::new(FileSinkIo::new(url.clone(), &run2(restore(1, vec![latest]))));
    second
        .write(Bytes::from_static(b"run2 covered\n"))
        .await
        .expect("write");
    let own = second.pre_commit(2).await.expect("pre-commit").expect("state");
    second.commit(2).await.expect("commit");
    std::mem::forget(second);
    assert!(own.contains("\"taken_over\":[\"run1-0\"]"), "{own}");
    assert!(
        in_progress(&dir).iter().any(|n| n.starts_with(".part-run1-0-")),
        "run 1's killed attempt left its open part: {:?}",
        in_progress(&dir)
    );
    // Run 2's failover to its checkpoint 2 runs to its end.
    let again = Box::new(FileSinkIo::new(url.clone(), &run2(restore(2, vec![own]))));
    again.close().await.expect("close");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(contents, vec!["run1 covered\n", "run2 covered\n"]);
    assert!(in_progress(&dir).is_empty(), "{:?}", in_progress(&dir));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Issue 31 (review): a run restored from an older savepoint of run 1 must not remove the parts
/// run 1's newer checkpoint lists as pending (run 1 was killed before that checkpoint's commit
/// reached its sink): a later restore of that checkpoint commits them. Once a run restores run
/// 1's latest checkpoint, what run 1 left in progress is garbage, and goes at that run's end.
#[tokio::test]
async fn a_restore_of_an_older_savepoint_keeps_the_parts_a_newer_checkpoint_has_pending() {
    let dir = std::env::temp_dir().join(format!("floe-sink-older-savepoint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    let ctx = |run: &str, restore, latest: &str| {
        let mut ctx = sink_context_in(run, 0, restore);
        ctx.configuration
            .insert(crate::RUNS_LATEST_CHECKPOINT_KEY.into(), latest.into());
        ctx
    };
    // Run 1: savepoint 1 (committed), then checkpoint 2 completes but run 1 is killed before
    // its commit reaches the sink: "run1 b" is pending in checkpoint 2, in progress.
    let mut first = Box::new(FileSinkIo::new(url.clone(), &sink_context_in("run1", 0, None)));
    first.write(Bytes::from_static(b"run1 a\n")).await.expect("write");
    let savepoint = first.pre_commit(1).await.expect("pre-commit").expect("state");
    first.commit(1).await.expect("commit");
    first.write(Bytes::from_static(b"run1 b\n")).await.expect("write");
    let newer = first.pre_commit(2).await.expect("pre-commit").expect("state");
    std::mem::forget(first);
    // Run 2 from the older savepoint runs to its end.
    let mut second = Box::new(FileSinkIo::new(
        url.clone(),
        &ctx("run2", restore(1, vec![savepoint]), "run1:2"),
    ));
    second.write(Bytes::from_static(b"run2\n")).await.expect("write");
    second.pre_commit(3).await.expect("pre-commit");
    second.commit(3).await.expect("commit");
    second.close().await.expect("close");
    assert!(
        in_progress(&dir).iter().any(|n| n.starts_with(".part-run1-0-1-")),
        "run 1's part pending in its checkpoint 2 was removed: {:?}",
        in_progress(&dir)
    );
    // Run 3 restores run 1's checkpoint 2, its latest: the pending part is committed.
    let third = Box::new(FileSinkIo::new(
        url.clone(),
        &ctx("run3", restore(2, vec![newer]), "run1:2,run2:3"),
    ));
    third.close().await.expect("close");
    let mut contents: Vec<String> = committed(&dir).into_values().collect();
    contents.sort();
    assert_eq!(contents, vec!["run1 a\n", "run1 b\n", "run2\n"]);
    assert!(in_progress(&dir).is_empty(), "{:?}", in_progress(&dir));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// An attempt aborted with a part open (its task cancelled, or dropped by a TaskManager the
/// JobManager declared lost, after the job's other attempts may have ended) removes that part:
/// it covers only output after the last barrier, which nothing will commit. What its checkpoint
/// covers stays, in progress, for the restore to commit.
#[tokio::test]
async fn an_aborted_attempt_removes_its_open_part_and_keeps_what_its_checkpoint_covers() {
    let dir = std::env::temp_dir().join(format!("floe-sink-aborted-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    let mut sink = Box::new(FileSinkIo::new(url.clone(), &sink_context_in("run1", 0, None)));
    sink.write(Bytes::from_static(b"covered\n")).await.expect("write");
    let state = sink.pre_commit(1).await.expect("pre-commit").expect("state");
    sink.write(Bytes::from_static(b"after the barrier\n"))
        .await
        .expect("write");
    assert_eq!(in_progress(&dir).len(), 2, "{:?}", in_progress(&dir));
    drop(sink);
    // The removal runs in the background: wait for it (a minute at most, then fail).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while in_progress(&dir).len() > 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(in_progress(&dir).len(), 1, "{:?}", in_progress(&dir));
    // The restore commits the covered part: nothing was lost.
    let restored = Box::new(FileSinkIo::new(
        url.clone(),
        &sink_context_in("run1", 0, restore(1, vec![state])),
    ));
    restored.close().await.expect("close");
    let contents: Vec<String> = committed(&dir).into_values().collect();
    assert_eq!(contents, vec!["covered\n"]);
    assert!(in_progress(&dir).is_empty(), "{:?}", in_progress(&dir));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Issue 31: a run killed before its first checkpoint leaves parts in progress that no restore
/// will ever commit. The next run of the lineage, told of it (`SUPERSEDED_RUNS_KEY`, which the
/// JobManager sets from its operation log), removes them at its end, every subtask's; another
/// run's (not superseded: it may have a checkpoint to restore) stay.
#[tokio::test]
async fn a_new_run_removes_what_runs_without_a_checkpoint_left_in_progress() {
    let dir = std::env::temp_dir().join(format!("floe-sink-superseded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = dir.to_string_lossy().into_owned();
    for k in 0..2u32 {
        let mut killed = Box::new(FileSinkIo::new(url.clone(), &sink_context_in("early", k, None)));
        killed
            .write(Bytes::from(format!("never covered {k}\n")))
            .await
            .expect("write");
        std::mem::forget(killed);
    }
    std::fs::write(dir.join(".part-kept-0-0-w.inprogress"), "another run's\n").expect("write");
    let mut ctx = sink_context_in("next", 0, None);
    ctx.configuration
        .insert(crate::SUPERSEDED_RUNS_KEY.into(), "early, next".into());
    let mut next = Box::new(FileSinkIo::new(url.clone(), &ctx));
    next.write(Bytes::from_static(b"next\n")).await.expect("write");
    next.pre_commit(1).await.expect("pre-commit");
    next.commit(1).await.expect("commit");
    assert_eq!(in_progress(&dir).len(), 3, "{:?}", in_progress(&dir));
    next.close().await.expect("close");
    assert_eq!(in_progress(&dir), vec![".part-kept-0-0-w.inprogress"]);
    let contents: Vec<String> = committed(&dir).into_values().collect();
    assert_eq!(contents, vec!["next\n"]);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[tokio::test]
async fn whole_file_splits_give_each_file_to_one_subtask_in_order() {
    let dir = std::env::temp_dir().join(format!("floe-whole-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut expected = write_inputs(&dir);
    let mut got = Vec::new();
    for subtask in 0..2 {
        let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let mut source = text_source(&dir, (subtask, 2), 7, true, super::lines());
        let mut out = crate::operators::tests::VecSink(lines.clone());
        while source.produce(&mut out).await.expect("produce") {}
        let lines = lines.lock().expect("lock").clone();
        // Files in-0, in-2, in-4 (subtask 0) or in-1, in-3, in-5, each whole and in order.
        let files: Vec<u32> = lines
            .iter()
            .filter_map(|l| l.strip_prefix('f')?.split('l').next()?.parse().ok())
            .collect();
        assert!(files.iter().all(|f| f % 2 == subtask), "{files:?}");
        assert!(files.windows(2).all(|w| w[0] <= w[1]), "file by file: {files:?}");
        for f in files.iter().collect::<std::collections::BTreeSet<_>>() {
            let numbers: Vec<u64> = lines
                .iter()
                .filter_map(|l| l.strip_prefix(&format!("f{f}l"))?.split(':').next()?.parse().ok())
                .collect();
            assert_eq!(
                numbers,
                (0..numbers.len() as u64).collect::<Vec<_>>(),
                "file {f} in order"
            );
        }
        got.extend(lines);
    }
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "every line once");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[tokio::test]
async fn a_source_restored_from_several_splits_reads_each_once() {
    // Two generator streams of another parallelism's subtasks, taken over by one subtask.
    let make = || GeneratorSource {
        seed: 3,
        stride: Stride::of_subtask(0, 1, Some(0)),
        pacer: Pacer::default(),
        vocabulary: generator_vocabulary(),
        metrics: Arc::default(),
    };
    let mut a = make();
    a.restore("next=10,step=1,end=2000").expect("restore");
    let mut b = make();
    b.restore("next=2500,step=1,end=4000").expect("restore");
    let mut multi = MultiSource::new(vec![a, b]);
    assert_eq!(
        multi.position(),
        r#"["next=10,step=1,end=2000","next=2500,step=1,end=4000"]"#
    );
    let items: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut out = crate::operators::tests::VecSink(items.clone());
    while multi.produce(&mut out).await.expect("produce") {}
    let (cdf, words) = generator_vocabulary();
    let mut expected: Vec<String> = (10..2000)
        .chain(2500..4000)
        .map(|i| generator_line(3, i, &cdf, &words))
        .collect();
    let mut got = items.lock().expect("lock").clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(multi.position(), "next=4000,step=1,end=4000");
    assert_eq!(
        crate::checkpoint::source_positions(r#"["a","b"]"#),
        vec!["a".to_string(), "b".to_string()]
    );
    assert_eq!(
        crate::checkpoint::source_positions("next=1"),
        vec!["next=1".to_string()]
    );
}

#[test]
fn generator_is_deterministic_and_zipf_skewed() {
    let (cdf, words) = generator_vocabulary();
    let a = generator_line(1, 5, &cdf, &words);
    assert_eq!(a, generator_line(1, 5, &cdf, &words));
    let mut top = 0;
    let mut total = 0;
    for i in 0..2000 {
        for w in generator_line(1, i, &cdf, &words).split(' ') {
            total += 1;
            top += usize::from(w == "kaka");
        }
    }
    // Rank 1 of Zipf(1.0) over 10,000 words has probability ~0.102.
    assert!(top * 20 > total && top * 6 < total, "{top} of {total}");
    assert_eq!(generator_word(0), "kaka");
    assert_eq!(generator_word(1025), "lokaka");
    let distinct: std::collections::HashSet<String> = (0..GENERATOR_VOCABULARY).map(generator_word).collect();
    assert_eq!(distinct.len(), GENERATOR_VOCABULARY);
}

/// Issue 34, item 4: a line that does not parse fails its source with a bad record naming the
/// file (as the user named the input, with the file's name under a directory), the line's number
/// counted from the file's start although the split began mid-file, and the field; no restart
/// can fix it. The other subtask's split, which does not hold the line, reads to its end.
#[tokio::test]
async fn a_line_that_does_not_parse_is_a_bad_record_naming_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("floe-bad-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let good = |n: u64| format!("[{n}, \"record {n}\"]\n");
    std::fs::write(dir.join("a.json"), (0..6).map(good).collect::<String>()).expect("write");
    let mut b: String = (10..14).map(good).collect();
    b.push_str("[14, 15]\n");
    b.push_str(&good(16));
    std::fs::write(dir.join("b.json"), b).expect("write");
    let mut failures = Vec::new();
    let mut read = 0;
    for subtask in 0..2 {
        let records: Arc<std::sync::Mutex<Vec<(u64, String)>>> = Arc::default();
        let parse: Parser<(u64, String)> = Arc::new(|line: &[u8]| json_record(line));
        let mut source = text_source(&dir, (subtask, 2), 7, false, parse);
        let mut out = crate::operators::tests::VecSink(records.clone());
        loop {
            match source.produce(&mut out).await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    failures.push(e);
                    break;
                }
            }
        }
        read += records.lock().expect("lock").len();
    }
    assert_eq!(failures.len(), 1, "{failures:?}");
    let e = &failures[0];
    assert!(e.is_non_recoverable(), "{e}");
    match e {
        Error::BadRecord { file, line, message } => {
            assert_eq!(file, &format!("{}/b.json", dir.display()));
            assert_eq!(*line, 5);
            assert!(message.contains("expected a string"), "{message}");
        }
        other => panic!("not a bad record: {other}"),
    }
    assert!(read >= 6, "the split without the bad line was read: {read}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
