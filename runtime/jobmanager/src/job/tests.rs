//! The JobMaster's reactions, event by event, on the seed example (Source(4) -> Map(4) ->
//! Reduce(3)) and its streaming variant.

use super::*;
use floe_scheduler::BatchShuffleMode;

pub(super) fn seed_job() -> JobMaster {
    let graph = JobGraph::seed_example().with_shuffle_mode(BatchShuffleMode::AllExchangesBlocking);
    let mut conf = BTreeMap::new();
    conf.insert(
        "restart-strategy.fixed-delay.attempts".to_string(),
        "2".to_string(),
    );
    let args = JobArgs {
        name: "seed".into(),
        args: Vec::new(),
        configuration: conf,
    };
    JobMaster::new("job".into(), args, graph, "fp".into(), 0).unwrap()
}

pub(super) fn slots() -> Vec<SlotRef> {
    (0..2)
        .flat_map(|tm| {
            (0..3).map(move |slot| SlotRef {
                taskmanager: format!("tm{tm}"),
                address: format!("addr{tm}"),
                slot,
            })
        })
        .collect()
}

fn deployed(actions: &[Action], job: &JobMaster) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deploy { deployment, .. } => Some(job.graph.task_name(deployment.id.vertex)),
            _ => None,
        })
        .collect()
}

pub(super) fn report(job: &mut JobMaster, v: ExecutionVertexId, state: ExecutionState) -> Vec<Action> {
    let id = job.attempt_id(v);
    job.on_task_state(&id, state, None, Vec::new(), None)
}

fn finish(job: &mut JobMaster, v: ExecutionVertexId) -> Vec<Action> {
    report(job, v, ExecutionState::Initializing);
    report(job, v, ExecutionState::Running);
    report(job, v, ExecutionState::Finished)
}

fn ev(v: u32, s: u32) -> ExecutionVertexId {
    ExecutionVertexId::new(v, s)
}

/// Issue 11, scenario 4: heartbeats carry what a TaskManager holds; the JobMaster fails what
/// vanished without a report and cancels what should not run there.
#[test]
fn heartbeats_reconcile_executions_both_ways() {
    let mut job = seed_job();
    job.start(&slots()).unwrap();
    // source#0..2 on tm0 (slots 0..2), source#3 on tm1. source#0 and #1 started.
    for k in [0, 1] {
        report(&mut job, ev(0, k), ExecutionState::Initializing);
    }
    let held = |job: &JobMaster, ks: &[u32]| {
        ks.iter()
            .map(|&k| (job.attempt_id(ev(0, k)), ExecutionState::Initializing))
            .collect::<Vec<_>>()
    };
    // source#2 has not started yet (its deployment may be in flight): never failed for missing.
    let all = held(&job, &[0, 1]);
    assert!(job.reconcile("tm0", "addr0", &all).is_empty());
    // source#1's final report was lost and its task is gone: one miss is tolerated...
    let only0 = held(&job, &[0]);
    assert!(job.reconcile("tm0", "addr0", &only0).is_empty());
    assert_eq!(job.status, JobStatus::Running);
    // ...the second fails it, and the failure restarts its region.
    let actions = job.reconcile("tm0", "addr0", &only0);
    assert!(
        actions.iter().any(|a| matches!(a, Action::RestartAfter { .. })),
        "{actions:?}"
    );
    assert_eq!(
        job.graph.execution_vertex(ev(0, 1)).unwrap().current.state,
        ExecutionState::Failed
    );
    // source#0's final report is being applied (its log append in flight) and its TaskManager
    // already let it go: not missing.
    let source0 = job.attempt_id(ev(0, 0));
    assert!(job.claim_final_report(&source0));
    assert!(!job.claim_final_report(&source0), "one final report applies");
    for _ in 0..3 {
        assert!(job.reconcile("tm0", "addr0", &[]).is_empty());
    }
    // source#3's INITIALIZING and RUNNING reports were lost: the heartbeat catches up.
    let running3 = (job.attempt_id(ev(0, 3)), ExecutionState::Running);
    assert!(job.reconcile("tm1", "addr1", &[running3]).is_empty());
    assert_eq!(
        job.graph.execution_vertex(ev(0, 3)).unwrap().current.state,
        ExecutionState::Running
    );
    // An attempt tm1 holds that this JobMaster never deployed there (an older attempt) is
    // cancelled there.
    let stale = AttemptId {
        job_id: "job".into(),
        vertex: ev(0, 3),
        attempt: 99,
    };
    let actions = job.reconcile("tm1", "addr1", &[(stale.clone(), ExecutionState::Running)]);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Cancel { address, id } if address == "addr1" && *id == stale)),
        "{actions:?}"
    );
}

/// Issue 11, scenario 8: a consumer that cannot read a finished blocking partition (its file is
/// gone, its TaskManager restarted) restarts with the partition's producer, not alone.
#[test]
fn a_consumer_that_cannot_read_its_input_restarts_the_producer_too() {
    let mut job = seed_job();
    job.start(&slots()).unwrap();
    for k in 0..4 {
        finish(&mut job, ev(0, k));
    }
    for k in 0..4 {
        finish(&mut job, ev(1, k));
    }
    report(&mut job, ev(2, 0), ExecutionState::Initializing);
    let lost = job.partition_id(PartitionId {
        result: floe_scheduler::job_graph::ResultIndex(1),
        partition: 2,
    });
    job.partitions_unavailable(std::slice::from_ref(&lost));
    let actions = report(&mut job, ev(2, 0), ExecutionState::Failed);
    let restarted: Vec<String> = actions
        .iter()
        .flat_map(|a| match a {
            Action::RestartAfter { vertices, .. } => vertices.clone(),
            _ => Vec::new(),
        })
        .map(|v| job.graph.task_name(v))
        .collect();
    assert!(
        restarted.contains(&"map#2".to_string()) && restarted.contains(&"reduce#0".to_string()),
        "{restarted:?}"
    );
}

/// A streaming seed job (everything pipelined: one region) checkpointing every second.
pub(super) fn checkpointing_job() -> JobMaster {
    let graph = JobGraph::seed_example().with_shuffle_mode(BatchShuffleMode::AllExchangesPipelined);
    let conf = [
        ("execution.checkpointing.interval", "1 s"),
        ("floe.job-storage.url", "memory://jobs"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into_iter()
    .collect();
    let args = JobArgs {
        name: "seed".into(),
        args: Vec::new(),
        configuration: conf,
    };
    let mut job = JobMaster::new("job".into(), args, graph, "fp".into(), 0).unwrap();
    job.resume_checkpoints(None);
    job
}

/// Issue 11, scenario 6: a checkpoint whose completing log append is in flight when a task
/// fails becomes the one the restarted attempts restore from; they do not restore from the
/// checkpoint before it.
#[test]
fn a_restart_waits_for_a_checkpoint_being_logged_and_restores_from_it() {
    let mut job = checkpointing_job();
    job.start(&slots()).unwrap();
    let all: Vec<ExecutionVertexId> = job.graph.execution_vertices().map(|e| e.id).collect();
    for &v in &all {
        report(&mut job, v, ExecutionState::Initializing);
        report(&mut job, v, ExecutionState::Running);
    }
    let id = job.trigger_checkpoint(10_000).expect("due").id;
    let mut completed = None;
    for &v in &all {
        let attempt = job.attempt_id(v);
        completed = job.acknowledge_checkpoint(&attempt, id, TaskSnapshot::default(), 10_100);
    }
    let completed = completed.expect("every task acknowledged");
    assert!(
        job.begin_checkpoint_completion(id),
        "no restart since the trigger"
    );
    // A task fails while the completion is being logged.
    let failure = report(&mut job, ev(2, 0), ExecutionState::Failed);
    let restart = failure
        .iter()
        .find_map(|a| match a {
            Action::RestartAfter { vertices, .. } => Some(vertices.clone()),
            _ => None,
        })
        .expect("a restart");
    let postponed = job.restart(&restart, &[], 0);
    assert!(
        matches!(postponed.as_slice(), [Action::RestartAfter { .. }]),
        "{postponed:?}"
    );
    job.checkpoint_completed(completed);
    let deployed = job.restart(&restart, &[], 0);
    let restores: Vec<Option<u64>> = deployed
        .iter()
        .filter_map(|a| match a {
            Action::Deploy { deployment, .. } => Some(deployment.restore.as_ref().map(|r| r.0)),
            _ => None,
        })
        .collect();
    assert!(!restores.is_empty());
    assert!(restores.iter().all(|r| *r == Some(id)), "{restores:?}");
}

#[test]
fn runs_stage_by_stage_to_finished() {
    let mut job = seed_job();
    assert_eq!(job.slots_needed(), 4);
    let err = job.start(&slots()[..3]).unwrap_err();
    assert_eq!(err.to_string(), "job needs 4 slots but the cluster offers 3");
    let actions = job.start(&slots()).unwrap();
    assert_eq!(job.status, JobStatus::Running);
    assert_eq!(
        deployed(&actions, &job),
        ["source#0", "source#1", "source#2", "source#3"]
    );
    // Slot 3 is the second TaskManager's first slot (the seed's placement).
    assert_eq!(job.location[3].as_ref().unwrap().taskmanager, "tm1");
    assert_eq!(deployed(&finish(&mut job, ev(0, 1)), &job), ["map#1"]);
    for k in [0, 2, 3] {
        finish(&mut job, ev(0, k));
    }
    for k in 0..3 {
        assert!(deployed(&finish(&mut job, ev(1, k)), &job).is_empty());
    }
    let a = finish(&mut job, ev(1, 3));
    assert_eq!(deployed(&a, &job), ["reduce#0", "reduce#1", "reduce#2"]);
    // Reducers read map partition k's subpartition r from map k's TaskManager.
    let Action::Deploy { deployment, .. } = &a[1] else {
        panic!("deploy")
    };
    assert_eq!(deployment.inputs[0].len(), 4);
    assert!(deployment.inputs[0].iter().all(|c| c.subpartitions == (1..2)));
    assert_eq!(deployment.inputs[0][3].address, "addr1");
    for k in 0..2 {
        finish(&mut job, ev(2, k));
    }
    let end = finish(&mut job, ev(2, 2));
    assert_eq!(job.status, JobStatus::Finished);
    assert!(matches!(end.last(), Some(Action::Release { .. })));
}

#[test]
fn a_failure_restarts_its_region_and_downstream_then_exhausts_the_strategy() {
    let mut job = seed_job();
    job.start(&slots()).unwrap();
    for k in 0..4 {
        finish(&mut job, ev(0, k));
    }
    report(&mut job, ev(1, 2), ExecutionState::Initializing);
    let a = report(&mut job, ev(1, 2), ExecutionState::Failed);
    let restart = a
        .iter()
        .find_map(|a| match a {
            Action::RestartAfter { vertices, .. } => Some(vertices.clone()),
            _ => None,
        })
        .unwrap();
    let names: Vec<String> = restart.iter().map(|&v| job.graph.task_name(v)).collect();
    // map#2's input (source#2) is still available; the reducers consume map#2's output.
    assert_eq!(names, ["map#2", "reduce#0", "reduce#1", "reduce#2"]);
    // Running maps elsewhere are untouched.
    assert_eq!(
        job.graph.execution_vertex(ev(1, 0)).unwrap().current.state,
        ExecutionState::Deploying
    );
    let again = job.restart(&restart, &[], 0);
    assert_eq!(deployed(&again, &job), ["map#2"]);
    assert_eq!(job.graph.execution_vertex(ev(1, 2)).unwrap().current.attempt, 1);
    // A report from the old attempt is ignored.
    let stale = AttemptId {
        job_id: "job".into(),
        vertex: ev(1, 2),
        attempt: 0,
    };
    assert!(
        job.on_task_state(&stale, ExecutionState::Finished, None, Vec::new(), None)
            .is_empty()
    );
    // Two more failures exhaust 2 attempts: the job fails with the cause.
    report(&mut job, ev(1, 2), ExecutionState::Failed);
    job.restart(&[ev(1, 2), ev(2, 0), ev(2, 1), ev(2, 2)], &[], 0);
    report(&mut job, ev(1, 2), ExecutionState::Failed);
    assert_eq!(job.status, JobStatus::Failed);
    assert!(
        job.failure
            .as_deref()
            .unwrap()
            .contains("restart strategy exhausted after 2 restarts")
    );
}

#[test]
fn a_lost_taskmanager_fails_its_executions_and_moves_their_slots() {
    let mut job = seed_job();
    job.start(&slots()[..4]).unwrap();
    let spare = vec![SlotRef {
        taskmanager: "tm2".into(),
        address: "addr2".into(),
        slot: 0,
    }];
    let a = job.on_taskmanager_lost("tm1", &spare);
    assert_eq!(
        job.graph.execution_vertex(ev(0, 3)).unwrap().current.state,
        ExecutionState::Failed
    );
    assert!(a.iter().any(|a| matches!(a, Action::RestartAfter { .. })));
    assert_eq!(job.slot_of_group[3].taskmanager, "tm2");
    let again = job.restart(&[ev(0, 3), ev(1, 3)], &[], 0);
    assert!(matches!(&again[0], Action::Deploy { address, .. } if address == "addr2"));
}

/// Issue 11, scenario 3: the only TaskManager is lost (its process restarted under the same
/// id): the restart waits for slots, then places the job on the new process's slots.
#[test]
fn a_restart_without_free_slots_waits_and_then_places_the_lost_slots() {
    let mut job = seed_job();
    let only: Vec<SlotRef> = (0..4)
        .map(|slot| SlotRef {
            taskmanager: "tm1".into(),
            address: "addr1".into(),
            slot,
        })
        .collect();
    job.start(&only).unwrap();
    job.on_taskmanager_lost("tm1", &[]);
    let restart = [ev(0, 3), ev(1, 3)];
    let waiting = job.restart(&restart, &[], 0);
    assert!(
        matches!(waiting.as_slice(), [Action::RestartAfter { .. }]),
        "{waiting:?}"
    );
    // Nobody offers slots for longer than the limit: the job fails, saying so.
    let mut waiting_job = {
        let mut j = seed_job();
        j.start(&only).unwrap();
        j.on_taskmanager_lost("tm1", &[]);
        j
    };
    for _ in 0..1000 {
        waiting_job.restart(&restart, &[], 0);
        if waiting_job.status.is_terminal() {
            break;
        }
    }
    assert_eq!(waiting_job.status, JobStatus::Failed);
    assert!(
        waiting_job.failure.as_deref().unwrap_or_default().starts_with(
            "NoResourceAvailableException: could not acquire the minimum required resources within \
                 slot.request.timeout (60 s): the job needs 4 slots"
        ),
        "{:?}",
        waiting_job.failure
    );
    assert_eq!(
        job.held_slots().count(),
        0,
        "slots waiting to be placed again hold nothing: the same TaskManager may offer them again"
    );
    let restarted: Vec<SlotRef> = (0..4)
        .map(|slot| SlotRef {
            taskmanager: "tm1".into(),
            address: "addr1-new".into(),
            slot,
        })
        .collect();
    let again = job.restart(&restart, &restarted, 0);
    assert!(
        matches!(&again[0], Action::Deploy { address, .. } if address == "addr1-new"),
        "{again:?}"
    );
}

#[test]
fn cancel_ends_canceled_and_restart_config_is_checked() {
    let mut job = seed_job();
    job.start(&slots()).unwrap();
    let a = job.cancel().unwrap();
    assert_eq!(a.iter().filter(|a| matches!(a, Action::Cancel { .. })).count(), 4);
    assert_eq!(job.status, JobStatus::Canceled);
    assert!(job.cancel().is_err(), "a canceled job cannot be cancelled again");
    let mut conf = BTreeMap::new();
    conf.insert("restart-strategy.type".to_string(), "exponential".to_string());
    let err = RestartStrategy::from_configuration(&conf).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid configuration restart-strategy.type")
    );
    assert_eq!(parse_duration("1 s"), Some(Duration::from_secs(1)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("soon"), None);
}

/// Issue 17: a failure the TaskManager marks as not recoverable (a missing input) fails the job at
/// once, with its restart budget untouched; a later attempt's ordinary failure would have restarted.
#[test]
fn a_failure_no_restart_can_fix_fails_the_job_without_restarting() {
    let mut job = seed_job();
    job.start(&slots()).unwrap();
    report(&mut job, ev(0, 1), ExecutionState::Initializing);
    // A mark for an attempt that is not current is ignored.
    job.next_failure_is_not_recoverable(&AttemptId {
        job_id: "job".into(),
        vertex: ev(0, 1),
        attempt: 7,
    });
    let id = job.attempt_id(ev(0, 1));
    job.next_failure_is_not_recoverable(&id);
    let actions = job.on_task_state(
        &id,
        ExecutionState::Failed,
        Some("storage /data/in.txt: NotFound".into()),
        Vec::new(),
        None,
    );
    assert!(
        !actions.iter().any(|a| matches!(a, Action::RestartAfter { .. })),
        "{actions:?}"
    );
    assert_eq!(job.restarts, 0);
    assert!(
        matches!(job.status, JobStatus::Failing | JobStatus::Failed),
        "{:?}",
        job.status
    );
    assert_eq!(
        job.failure.as_deref(),
        Some(
            "source#1 failed: storage /data/in.txt: NotFound (not recoverable: the job failed without restarting)"
        )
    );
}

/// An adaptive batch job: source(auto) -hash-> reduce(auto), every exchange blocking.
fn adaptive_job(conf: &[(&str, &str)]) -> JobMaster {
    let graph = JobGraph::test()
        .vertex("source", 0)
        .vertex("reduce", 0)
        .edge("source", "reduce", floe_scheduler::Partitioner::Hash)
        .build()
        .unwrap()
        .with_shuffle_mode(BatchShuffleMode::AllExchangesBlocking);
    let args = JobArgs {
        name: "auto".into(),
        args: Vec::new(),
        configuration: conf.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    JobMaster::new("job".into(), args, graph, "fp".into(), 0).unwrap()
}

fn decisions_of(actions: &[Action]) -> Vec<VertexDecision> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::DecideParallelism { decisions, .. } => Some(decisions.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn finish_with(job: &mut JobMaster, v: ExecutionVertexId, bytes: Vec<u64>) -> Vec<Action> {
    report(job, v, ExecutionState::Initializing);
    report(job, v, ExecutionState::Running);
    let id = job.attempt_id(v);
    job.on_task_state(
        &id,
        ExecutionState::Finished,
        None,
        vec![PartitionStats {
            bytes_per_subpartition: bytes,
        }],
        None,
    )
}

/// Issue 12, part 1: the source's parallelism from its input size, the reducer's from the bytes
/// the sources wrote, each proposed (to be logged) before it takes effect; the job finishes only
/// when every vertex was decided and ran.
#[test]
fn adaptive_batch_decides_sources_then_consumers_from_bytes() {
    const MIB: u64 = 1 << 20;
    let mut job = adaptive_job(&[(
        "execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task",
        "4 mb",
    )]);
    assert!(!job.ready_to_start(0), "the source's input size is not known yet");
    assert_eq!(job.undecided_sources(), vec![0]);
    job.set_source_bytes([(0, Some(10 * MIB))].into());
    assert!(job.ready_to_start(0));
    // Six free slots: the job starts on one and takes two more for the source's three subtasks.
    let actions = job.start(&slots()).unwrap();
    assert_eq!(job.held_slots().count(), 3);
    assert!(
        deployed(&actions, &job).is_empty(),
        "nothing runs before the source is decided"
    );
    let source = decisions_of(&actions);
    assert_eq!(source.len(), 1);
    assert_eq!(source[0].parallelism, 3, "ceil(10 MiB / 4 MiB)");
    assert_eq!(
        source[0].reason,
        "ceil(10.0 MiB / avg-data-volume-per-task 4.0 MiB) = 3"
    );
    // Proposed once while its log append is in flight.
    assert!(job.propose_decisions(&slots()).is_none());
    let actions = job.apply_decisions(&source);
    assert_eq!(deployed(&actions, &job), ["source#0", "source#1", "source#2"]);
    assert_eq!(job.progress(), (3, 0));

    // The sources write 128 subpartitions (the reducer's key groups): 24 MiB in all, skewed.
    let mut bytes = vec![MIB / 8; 128];
    bytes[5] = 8 * MIB;
    let per_source: Vec<u64> = bytes.iter().map(|b| b / 3).collect();
    let free = |job: &JobMaster| -> Vec<SlotRef> {
        slots()
            .into_iter()
            .filter(|s| !job.held_slots().any(|h| h == s))
            .collect()
    };
    for k in 0..2 {
        finish_with(&mut job, ev(0, k), per_source.clone());
        assert!(
            job.propose_decisions(&free(&job)).is_none(),
            "one source is still running"
        );
    }
    finish_with(&mut job, ev(0, 2), per_source.clone());
    assert_eq!(
        job.status,
        JobStatus::Running,
        "the reducer is not decided yet: not finished"
    );
    let reduce = decisions_of(&job.propose_decisions(&free(&job)).into_iter().collect::<Vec<_>>());
    // 24 MiB at 4 MiB per task wants 6 subtasks: the job takes the other three free slots.
    assert_eq!(job.held_slots().count(), 6);
    let total: u64 = per_source.iter().sum::<u64>() * 3;
    assert_eq!(reduce[0].input_bytes, Some(total));
    assert_eq!(reduce[0].parallelism as u64, total.div_ceil(4 * MIB));
    // No reducer reads more than the average plus the largest subpartition.
    let largest = per_source.iter().max().unwrap() * 3;
    assert_eq!(reduce[0].largest_subpartition_bytes, largest);
    for b in &reduce[0].bytes_per_subtask {
        assert!(
            *b <= total.div_ceil(reduce[0].parallelism as u64) + largest,
            "{b}"
        );
    }
    let actions = job.apply_decisions(&reduce);
    let reducers = deployed(&actions, &job);
    assert_eq!(reducers.len(), reduce[0].parallelism as usize);
    // Each reducer reads its range of every source's partition.
    let d = actions
        .iter()
        .find_map(|a| match a {
            Action::Deploy { deployment, .. } if deployment.id.vertex == ev(1, 1) => Some(deployment.clone()),
            _ => None,
        })
        .unwrap();
    let (s, e) = reduce[0].subpartition_ranges[1];
    assert_eq!(d.parallelism, reduce[0].parallelism);
    assert_eq!(d.inputs[0].len(), 3);
    assert!(d.inputs[0].iter().all(|c| c.subpartitions == (s..e)));
    for k in 0..reduce[0].parallelism {
        finish(&mut job, ev(1, k));
    }
    assert_eq!(job.status, JobStatus::Finished);
}

/// A JobManager that takes over applies the logged decisions before the job starts: the graph
/// it runs is the one decided, not one decided again.
#[test]
fn logged_decisions_are_kept_by_a_new_jobmaster() {
    let decision = VertexDecision {
        vertex: 0,
        parallelism: 2,
        subpartition_ranges: Vec::new(),
        input_bytes: Some(5),
        bytes_per_subtask: Vec::new(),
        largest_subpartition_bytes: 0,
        reason: "logged".into(),
        time_ms: 7,
    };
    let mut job = adaptive_job(&[]);
    assert!(
        job.apply_decisions(std::slice::from_ref(&decision)).is_empty(),
        "not started"
    );
    assert!(job.undecided_sources().is_empty());
    assert!(job.ready_to_start(0), "no source left to measure");
    assert_eq!(
        job.graph
            .job_vertex(floe_scheduler::job_graph::VertexIndex(0))
            .parallelism,
        2
    );
    assert_eq!(job.decisions()[&0].time_ms, 7);
}

#[test]
fn adaptive_settings_are_checked_naming_the_key() {
    let graph = JobGraph::test().vertex("source", 0).build().unwrap();
    let args = JobArgs {
        name: "auto".into(),
        args: Vec::new(),
        configuration: [(
            "execution.batch.adaptive.auto-parallelism.min-parallelism".to_string(),
            "none".to_string(),
        )]
        .into(),
    };
    let e = JobMaster::new("job".into(), args, graph, "fp".into(), 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid configuration execution.batch.adaptive.auto-parallelism.min-parallelism: expected a \
         positive integer, got \"none\""
    );
}

/// A TaskManager that ran only finished tasks is lost while their output is still to be read:
/// the producers run again (one restart), and no consumer is deployed on the lost output in the
/// meantime (a cluster test once saw a reducer deployed reading a partition whose TaskManager
/// was gone, failing until the restarts ran out).
#[test]
fn lost_output_of_finished_producers_is_produced_again_before_anyone_reads_it() {
    let mut job = seed_job();
    job.start(&slots()[..4]).unwrap();
    // source#3 and map#3 run on tm1 and finish; the other maps are still running.
    for k in 0..4 {
        finish(&mut job, ev(0, k));
    }
    finish(&mut job, ev(1, 3));
    let actions = job.on_taskmanager_lost("tm1", &slots()[..3]);
    let restart = actions
        .iter()
        .find_map(|a| match a {
            Action::RestartAfter { vertices, .. } => Some(vertices.clone()),
            _ => None,
        })
        .expect("the lost output's producers restart");
    assert!(
        restart.contains(&ev(1, 3)) && restart.contains(&ev(0, 3)),
        "{restart:?}"
    );
    assert_eq!(job.restarts, 1, "one lost TaskManager, one restart");
    // The other maps finish before the restart runs: the reducers wait for map#3 again.
    for k in 0..3 {
        assert!(deployed(&finish(&mut job, ev(1, k)), &job).is_empty());
    }
    let again = job.restart(&restart, &slots()[..3], 0);
    assert_eq!(deployed(&again, &job), ["source#3"]);
    finish(&mut job, ev(0, 3));
    assert_eq!(
        deployed(&finish(&mut job, ev(1, 3)), &job),
        ["reduce#0", "reduce#1", "reduce#2"]
    );
}

fn restarts_of(actions: &[Action]) -> Vec<ExecutionVertexId> {
    actions
        .iter()
        .flat_map(|a| match a {
            Action::RestartAfter { vertices, .. } => vertices.clone(),
            _ => Vec::new(),
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn one_restart_allowed(job: &mut JobMaster) {
    job.restart = RestartBackoff::new(RestartStrategy::FixedDelay {
        attempts: 1,
        delay: Duration::from_secs(1),
    });
}

fn spare_slots(tm: &str, n: u32) -> Vec<SlotRef> {
    (0..n)
        .map(|slot| SlotRef {
            taskmanager: tm.into(),
            address: format!("addr-{tm}"),
            slot,
        })
        .collect()
}

/// A TaskManager stopping on SIGTERM (an eviction, a scale-down) reports each of its tasks failed,
/// then is found lost when the restart's deployments cannot reach it: one failure for the restart
/// strategy, not one per report (three regions here) plus one for the loss. With one restart
/// allowed the job goes on; the next, unrelated failure is the one that exhausts the strategy.
#[test]
fn a_taskmanager_shutting_down_costs_one_restart() {
    let mut job = seed_job();
    one_restart_allowed(&mut job);
    job.start(&slots()).unwrap();
    for k in 0..4 {
        report(&mut job, ev(0, k), ExecutionState::Initializing);
        report(&mut job, ev(0, k), ExecutionState::Running);
    }
    // source#0..2 run on tm0, each its own region (every exchange blocking).
    let mut actions = Vec::new();
    for k in 0..3 {
        let id = job.attempt_id(ev(0, k));
        actions.extend(job.on_task_state(
            &id,
            ExecutionState::Failed,
            Some("the TaskManager is shutting down (SIGTERM)".into()),
            Vec::new(),
            None,
        ));
    }
    assert_eq!(job.status, JobStatus::Running, "{:?}", job.failure);
    assert_eq!(
        job.restart.attempts(),
        1,
        "three reports of one TaskManager: one failure"
    );
    let restart = restarts_of(&actions);
    assert!((0..3).all(|k| restart.contains(&ev(0, k))), "{restart:?}");
    // The restart runs before the loss is known: the new attempts go to tm0's slots again.
    let deployed_to_tm0 = job.restart(&restart, &[], 0);
    assert!(
        deployed_to_tm0
            .iter()
            .any(|a| matches!(a, Action::Deploy { taskmanager, .. } if taskmanager == "tm0")),
        "{deployed_to_tm0:?}"
    );
    // tm0 cannot be reached: lost. Its attempts never started; the loss is the same failure.
    let lost = job.on_taskmanager_lost("tm0", &spare_slots("tm2", 3));
    assert_eq!(job.status, JobStatus::Running, "{:?}", job.failure);
    assert_eq!(job.restart.attempts(), 1);
    let again = job.restart(&restarts_of(&lost), &[], 0);
    assert!(
        again
            .iter()
            .filter(|a| matches!(a, Action::Deploy { .. }))
            .all(|a| matches!(a, Action::Deploy { taskmanager, .. } if taskmanager == "tm2")),
        "{again:?}"
    );
    // A failure of its own (source#3 on tm1 crashes while running) is a new one: exhausted.
    job.on_task_state(
        &job.attempt_id(ev(0, 3)),
        ExecutionState::Failed,
        Some("boom".into()),
        Vec::new(),
        None,
    );
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(
        job.failure.as_deref(),
        Some("source#3 failed: boom (restart strategy exhausted after 1 restarts)")
    );
}

/// A TaskManager killed outright (SIGKILL): a task elsewhere that read from it fails first and
/// counts; the restart sends attempts to the dead TaskManager's slot before its heartbeat timed
/// out; its loss, found out then, joins that failure. A second loss of the same TaskManager, or a
/// loss of one whose tasks had started, counts.
#[test]
fn a_killed_taskmanager_found_lost_after_the_restart_counts_once() {
    let mut job = checkpointing_job();
    job.start(&slots()).unwrap();
    let all: Vec<ExecutionVertexId> = job.graph.execution_vertices().map(|e| e.id).collect();
    for &v in &all {
        report(&mut job, v, ExecutionState::Initializing);
        report(&mut job, v, ExecutionState::Running);
    }
    // The default with checkpointing: exponential-delay. Here one restart, to see the count.
    assert!(matches!(
        job.restart.strategy(),
        RestartStrategy::ExponentialDelay(_)
    ));
    one_restart_allowed(&mut job);
    // tm1 (source#3, map#3) is killed; reduce#0 on tm0 fails reading from it.
    let failed = report(&mut job, ev(2, 0), ExecutionState::Failed);
    assert_eq!(job.restart.attempts(), 1);
    let restart = restarts_of(&failed);
    assert_eq!(restart.len(), all.len(), "one pipelined region");
    job.restart(&restart, &[], 0);
    assert_eq!(
        job.location[job.graph.global_index(ev(0, 3))]
            .as_ref()
            .unwrap()
            .taskmanager,
        "tm1"
    );
    let lost = job.on_taskmanager_lost("tm1", &spare_slots("tm2", 1));
    assert_eq!(job.status, JobStatus::Running, "{:?}", job.failure);
    assert_eq!(
        job.restart.attempts(),
        1,
        "the kill and its discovery: one failure"
    );
    assert_eq!(job.restarts, 2, "two failovers, one restart counted");
    job.restart(&restarts_of(&lost), &[], 0);
    // Its replacement tm2 took tm1's slot; it is lost after its tasks started: a new failure.
    for &v in &all {
        report(&mut job, v, ExecutionState::Initializing);
        report(&mut job, v, ExecutionState::Running);
    }
    job.on_taskmanager_lost("tm2", &[]);
    assert!(
        matches!(job.status, JobStatus::Failing | JobStatus::Failed),
        "{:?}",
        job.status
    );
    assert!(
        job.failure.as_deref().unwrap_or_default().starts_with(
            "TaskManager tm2 was lost (heartbeat timed out) (restart strategy exhausted after 1 restarts)"
        ),
        "{:?}",
        job.failure
    );
}

/// A consumer can notice its producer's end before the producer's own report reaches the
/// JobManager (both are on one TaskManager, the producer's report sent after its partitions were
/// given up). The consumer's failure ("producer ... stopped before finishing its partition") does
/// not stay the job's cause: the producer's own failure, when it comes, does. Another task's
/// later failure does not replace a cause of its own.
#[test]
fn a_failure_that_followed_its_input_gives_way_to_the_producers_own() {
    let mut conf = BTreeMap::new();
    conf.insert("restart-strategy.type".to_string(), "none".to_string());
    let args = JobArgs {
        name: "seed".into(),
        args: Vec::new(),
        configuration: conf,
    };
    let mut job = JobMaster::new("job".into(), args, JobGraph::seed_example(), "fp".into(), 0).unwrap();
    job.start(&slots()).unwrap();
    let all: Vec<ExecutionVertexId> = job.graph.execution_vertices().map(|e| e.id).collect();
    for &v in &all {
        report(&mut job, v, ExecutionState::Initializing);
        report(&mut job, v, ExecutionState::Running);
    }
    let consumer = job.attempt_id(ev(1, 0));
    job.next_failure_followed_its_input(&consumer);
    job.on_task_state(
        &consumer,
        ExecutionState::Failed,
        Some("shuffle: producer of p0 stopped before finishing its partition".into()),
        Vec::new(),
        None,
    );
    // Its tasks are cancelled at once: the job is FAILED, for now naming the consumer.
    assert_eq!(job.status, JobStatus::Failed);
    assert!(
        job.failure
            .as_deref()
            .unwrap()
            .starts_with("map#0 failed: shuffle")
    );
    let producer = job.attempt_id(ev(0, 0));
    job.on_task_state(
        &producer,
        ExecutionState::Failed,
        Some("AsyncWait: async_invoke failed: boom".into()),
        Vec::new(),
        None,
    );
    let cause = job.failure.clone().unwrap();
    assert!(
        cause.starts_with("source#0 failed: AsyncWait: async_invoke failed: boom ("),
        "{cause}"
    );
    job.on_task_state(
        &job.attempt_id(ev(2, 0)),
        ExecutionState::Failed,
        Some("another".into()),
        Vec::new(),
        None,
    );
    assert_eq!(job.failure.as_deref(), Some(cause.as_str()));
}
