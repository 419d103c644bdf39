//! Leader-epoch fencing tokens on JobManager -> TaskManager calls (Flink's JobMasterId).
//!
//! Every call a JobManager makes to a TaskManager carries the JobManager's leader epoch (from its
//! operation log; 0 without one) in the `floe-leader-epoch` request header. A TaskManager
//! remembers the highest epoch it has seen (from calls, registration and heartbeat answers) and
//! refuses a call from an older one: a JobManager that was fenced but has not noticed yet cannot
//! deploy, cancel, trigger or commit anything on a TaskManager that works for its successor.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// The request header that carries the caller's leader epoch.
pub const LEADER_EPOCH_HEADER: &str = "floe-leader-epoch";

/// Client side: adds the JobManager's current leader epoch to every request.
#[derive(Debug, Clone, Default)]
pub struct LeaderEpoch(pub Arc<AtomicU64>);

impl tonic::service::Interceptor for LeaderEpoch {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let epoch = self.0.load(Ordering::Acquire);
        request
            .metadata_mut()
            .insert(LEADER_EPOCH_HEADER, MetadataValue::from(epoch));
        Ok(request)
    }
}

/// The leader epoch a request carries; a request without the header is from epoch 0.
pub fn epoch_of<T>(request: &Request<T>) -> Result<u64, Status> {
    match request.metadata().get(LEADER_EPOCH_HEADER) {
        None => Ok(0),
        Some(value) => value.to_str().ok().and_then(|v| v.parse().ok()).ok_or_else(|| {
            Status::invalid_argument(format!(
                "{LEADER_EPOCH_HEADER}: expected a non-negative integer, got {value:?}"
            ))
        }),
    }
}

/// Server side: the highest leader epoch seen, and the check every JobManager call passes.
#[derive(Debug, Default)]
pub struct EpochFence {
    highest: AtomicU64,
}

impl EpochFence {
    /// A JobManager of `epoch` spoke (a call, or an answer to registration or a heartbeat).
    /// Refused when a newer one has spoken already; otherwise `epoch` is the newest seen.
    pub fn admit(&self, epoch: u64) -> Result<(), Status> {
        self.admit_newer(epoch).map(|_| ())
    }

    /// [`EpochFence::admit`], saying whether `epoch` is newer than any seen before.
    pub fn admit_newer(&self, epoch: u64) -> Result<bool, Status> {
        let before = self.highest.fetch_max(epoch, Ordering::AcqRel);
        if epoch < before {
            return Err(Status::failed_precondition(format!(
                "fenced: this TaskManager works for the JobManager of leader epoch {before}; a call \
                 from leader epoch {epoch} is refused"
            )));
        }
        Ok(epoch > before)
    }

    pub fn highest(&self) -> u64 {
        self.highest.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    /// What a TaskManager does with a call: the fence, on the epoch the request carries.
    fn admit_request<T>(fence: &EpochFence, request: &Request<T>) -> Result<(), Status> {
        fence.admit(epoch_of(request)?)
    }

    #[test]
    fn a_call_from_an_older_epoch_is_refused_naming_both_epochs() {
        let fence = EpochFence::default();
        let epoch = LeaderEpoch::default();
        epoch.0.store(1, Ordering::Release);
        let call = |e: &LeaderEpoch| e.clone().call(Request::new(())).expect("intercepted");
        assert!(admit_request(&fence, &call(&epoch)).is_ok());
        // A newer JobManager takes over; the older one's calls are refused from then on.
        let newer = LeaderEpoch::default();
        newer.0.store(2, Ordering::Release);
        assert!(admit_request(&fence, &call(&newer)).is_ok());
        let refused = admit_request(&fence, &call(&epoch)).expect_err("older epoch");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            refused.message(),
            "fenced: this TaskManager works for the JobManager of leader epoch 2; a call from leader \
             epoch 1 is refused"
        );
        assert!(
            admit_request(&fence, &Request::new(())).is_err(),
            "no header: epoch 0"
        );
        let mut bad = Request::new(());
        bad.metadata_mut()
            .insert(LEADER_EPOCH_HEADER, MetadataValue::from_static("x1"));
        let message = admit_request(&fence, &bad)
            .expect_err("bad header")
            .message()
            .to_string();
        assert!(
            message.starts_with("floe-leader-epoch: expected a non-negative integer"),
            "{message}"
        );
        assert_eq!(fence.highest(), 2);
    }
}
