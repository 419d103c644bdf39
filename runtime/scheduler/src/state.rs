//! The two lifecycles of seed 002: a job's status and each execution attempt's state. Each is an enum
//! with one `transition` function; a move that is not in the diagram is an error, never ignored.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Status of a job on its JobManager (Flink's `JobStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    Created,
    Running,
    Failing,
    Failed,
    Cancelling,
    Canceled,
    Finished,
    Restarting,
    Suspended,
}

impl JobStatus {
    pub const ALL: [JobStatus; 9] = [
        JobStatus::Created,
        JobStatus::Running,
        JobStatus::Failing,
        JobStatus::Failed,
        JobStatus::Cancelling,
        JobStatus::Canceled,
        JobStatus::Finished,
        JobStatus::Restarting,
        JobStatus::Suspended,
    ];

    /// The moves seed 002 describes:
    /// - created → running; running → finished when every task finished;
    /// - on a failure: running → failing (running tasks are cancelled), then failing → failed when the job
    ///   cannot restart, or failing → restarting → created when it can;
    /// - on a user's cancel (from any status that is not terminal and not already cancelling):
    ///   → cancelling → canceled once every task is terminal;
    /// - suspended from any non-terminal status: this JobManager stopped running the job (lost leadership
    ///   or shut down) but another one may pick it up from HA storage.
    // One arm per line of the diagram reads better than a single `matches!`.
    #[allow(clippy::match_like_matches_macro)]
    pub fn can_transition_to(self, to: JobStatus) -> bool {
        use JobStatus::*;
        match (self, to) {
            (Created, Running) => true,
            (Running, Finished | Failing) => true,
            (Failing, Failed | Restarting) => true,
            (Restarting, Created) => true,
            (Created | Running | Failing | Restarting, Cancelling) => true,
            (Cancelling, Canceled) => true,
            (Created | Running | Failing | Restarting | Cancelling, Suspended) => true,
            _ => false,
        }
    }

    /// Checks a move and returns the new status.
    pub fn transition(self, to: JobStatus) -> Result<JobStatus> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(Error::IllegalJobTransition { from: self, to })
        }
    }

    /// FINISHED, CANCELED and FAILED end the job everywhere and trigger cleanup.
    pub fn is_globally_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Canceled | JobStatus::Failed
        )
    }

    /// Terminal on this JobManager; SUSPENDED is terminal here only, the job lives on in storage.
    pub fn is_terminal(self) -> bool {
        self.is_globally_terminal() || self == JobStatus::Suspended
    }

    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Created => "CREATED",
            JobStatus::Running => "RUNNING",
            JobStatus::Failing => "FAILING",
            JobStatus::Failed => "FAILED",
            JobStatus::Cancelling => "CANCELLING",
            JobStatus::Canceled => "CANCELED",
            JobStatus::Finished => "FINISHED",
            JobStatus::Restarting => "RESTARTING",
            JobStatus::Suspended => "SUSPENDED",
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// State of one execution attempt of a subtask (Flink's `ExecutionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ExecutionState {
    Created,
    Scheduled,
    Deploying,
    Initializing,
    Running,
    Finished,
    Canceling,
    Canceled,
    Failed,
}

impl ExecutionState {
    pub const ALL: [ExecutionState; 9] = [
        ExecutionState::Created,
        ExecutionState::Scheduled,
        ExecutionState::Deploying,
        ExecutionState::Initializing,
        ExecutionState::Running,
        ExecutionState::Finished,
        ExecutionState::Canceling,
        ExecutionState::Canceled,
        ExecutionState::Failed,
    ];

    /// Flink's task lifecycle: CREATED → SCHEDULED → DEPLOYING → INITIALIZING → RUNNING → FINISHED.
    /// Any non-terminal state may fail. A deployed attempt is cancelled through CANCELING; one that was
    /// never deployed (CREATED, SCHEDULED) goes straight to CANCELED, since there is nothing to stop.
    #[allow(clippy::match_like_matches_macro)]
    pub fn can_transition_to(self, to: ExecutionState) -> bool {
        use ExecutionState::*;
        match (self, to) {
            (Created, Scheduled) | (Scheduled, Deploying) | (Deploying, Initializing) => true,
            (Initializing, Running) | (Running, Finished) => true,
            (Created | Scheduled | Deploying | Initializing | Running, Canceling) => true,
            (Created | Scheduled | Canceling, Canceled) => true,
            (Created | Scheduled | Deploying | Initializing | Running | Canceling, Failed) => true,
            _ => false,
        }
    }

    /// FINISHED, CANCELED and FAILED: the attempt will not change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecutionState::Finished | ExecutionState::Canceled | ExecutionState::Failed
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            ExecutionState::Created => "CREATED",
            ExecutionState::Scheduled => "SCHEDULED",
            ExecutionState::Deploying => "DEPLOYING",
            ExecutionState::Initializing => "INITIALIZING",
            ExecutionState::Running => "RUNNING",
            ExecutionState::Finished => "FINISHED",
            ExecutionState::Canceling => "CANCELING",
            ExecutionState::Canceled => "CANCELED",
            ExecutionState::Failed => "FAILED",
        }
    }
}

impl fmt::Display for ExecutionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_status_legal_transitions_are_exactly_the_seeds() {
        use JobStatus::*;
        let legal = [
            (Created, Running),
            (Running, Finished),
            (Running, Failing),
            (Failing, Failed),
            (Failing, Restarting),
            (Restarting, Created),
            (Created, Cancelling),
            (Running, Cancelling),
            (Failing, Cancelling),
            (Restarting, Cancelling),
            (Cancelling, Canceled),
            (Created, Suspended),
            (Running, Suspended),
            (Failing, Suspended),
            (Restarting, Suspended),
            (Cancelling, Suspended),
        ];
        for from in JobStatus::ALL {
            for to in JobStatus::ALL {
                let expected = legal.contains(&(from, to));
                match from.transition(to) {
                    Ok(s) => {
                        assert!(expected, "{from} -> {to} must be illegal");
                        assert_eq!(s, to);
                    }
                    Err(e) => {
                        assert!(!expected, "{from} -> {to} must be legal");
                        assert_eq!(
                            e.to_string(),
                            format!("illegal job status transition {from} -> {to}")
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn terminal_job_statuses() {
        for s in JobStatus::ALL {
            let no_way_out = JobStatus::ALL.iter().all(|&t| !s.can_transition_to(t));
            assert_eq!(s.is_terminal(), no_way_out, "{s}");
        }
        assert!(!JobStatus::Suspended.is_globally_terminal());
        assert!(JobStatus::Suspended.is_terminal());
    }

    #[test]
    fn execution_state_legal_transitions() {
        use ExecutionState::*;
        let legal = [
            (Created, Scheduled),
            (Scheduled, Deploying),
            (Deploying, Initializing),
            (Initializing, Running),
            (Running, Finished),
            (Created, Canceling),
            (Scheduled, Canceling),
            (Deploying, Canceling),
            (Initializing, Canceling),
            (Running, Canceling),
            (Created, Canceled),
            (Scheduled, Canceled),
            (Canceling, Canceled),
            (Created, Failed),
            (Scheduled, Failed),
            (Deploying, Failed),
            (Initializing, Failed),
            (Running, Failed),
            (Canceling, Failed),
        ];
        for from in ExecutionState::ALL {
            for to in ExecutionState::ALL {
                assert_eq!(
                    from.can_transition_to(to),
                    legal.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
            let no_way_out = ExecutionState::ALL.iter().all(|&t| !from.can_transition_to(t));
            assert_eq!(from.is_terminal(), no_way_out, "{from}");
        }
    }
}
