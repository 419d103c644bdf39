//! Conversions between generated types and the scheduling core's domain types, so core logic never
//! takes a prost struct. (The shuffle crate converts its own partition ids: it sits below this one's
//! users and uses the generated Shuffle service.)

use floe_scheduler::ExecutionState;

use crate::v1;

impl From<ExecutionState> for v1::ExecutionStateProto {
    fn from(s: ExecutionState) -> Self {
        use v1::ExecutionStateProto as P;
        match s {
            ExecutionState::Created => P::Created,
            ExecutionState::Scheduled => P::Scheduled,
            ExecutionState::Deploying => P::Deploying,
            ExecutionState::Initializing => P::Initializing,
            ExecutionState::Running => P::Running,
            ExecutionState::Finished => P::Finished,
            ExecutionState::Canceling => P::Canceling,
            ExecutionState::Canceled => P::Canceled,
            ExecutionState::Failed => P::Failed,
        }
    }
}

/// The domain state of a wire value; `None` for UNSPECIFIED or a value this build does not know.
pub fn execution_state(value: i32) -> Option<ExecutionState> {
    use v1::ExecutionStateProto as P;
    Some(match P::try_from(value).ok()? {
        P::ExecutionStateUnspecified => return None,
        P::Created => ExecutionState::Created,
        P::Scheduled => ExecutionState::Scheduled,
        P::Deploying => ExecutionState::Deploying,
        P::Initializing => ExecutionState::Initializing,
        P::Running => ExecutionState::Running,
        P::Finished => ExecutionState::Finished,
        P::Canceling => ExecutionState::Canceling,
        P::Canceled => ExecutionState::Canceled,
        P::Failed => ExecutionState::Failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_states_round_trip() {
        for s in ExecutionState::ALL {
            let wire = v1::ExecutionStateProto::from(s) as i32;
            assert_eq!(execution_state(wire), Some(s));
        }
        assert_eq!(execution_state(0), None);
        assert_eq!(execution_state(99), None);
    }
}
