//! Leader election (issue 13, item 11): with several operator replicas (for a fast takeover when
//! a node goes), one reconciles at a time. The replicas compete for a Lease in the operator's
//! namespace (`kube-lease-manager`: server-side apply, so two replicas never both take it); the
//! holder runs the controller, and a holder that loses the Lease stops at once and exits, so the
//! Deployment restarts it as a candidate. [`while_leading`] is that rule, apart from the API.

use std::future::Future;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

/// The Lease the replicas compete for, unless told another (`--lease-name`: the chart names it
/// after its release, so two releases in one namespace never share one).
pub const DEFAULT_LEASE_NAME: &str = "floe-operator-leader";
/// How long a holder's Lease lasts without a renewal (seconds): a replica on a lost node is
/// replaced within this.
const LEASE_DURATION_S: u64 = 15;
/// A holder renews this long before its Lease ends (the clock skew the election tolerates).
const LEASE_GRACE_S: u64 = 5;

/// Why a replica stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum LostLeadership {
    #[error("another operator replica holds the Lease now: stopping this one")]
    Lost,
    #[error("the election ended: {0}")]
    ElectionEnded(String),
}

/// Runs `work` only while `leading` says this replica holds the Lease: waits until it does, then
/// runs `work` to its end, or until the Lease is lost (`work` is dropped then: nothing of it runs
/// on).
pub async fn while_leading<F: Future<Output = ()>>(
    mut leading: watch::Receiver<bool>,
    work: F,
) -> Result<(), LostLeadership> {
    while !*leading.borrow_and_update() {
        if leading.changed().await.is_err() {
            return Err(LostLeadership::ElectionEnded(
                "it stopped before this replica led".into(),
            ));
        }
    }
    tracing::info!("leading: reconciling FlinkJobs");
    tokio::pin!(work);
    loop {
        tokio::select! {
            () = &mut work => return Ok(()),
            changed = leading.changed() => match changed {
                Err(_) => return Err(LostLeadership::ElectionEnded("it stopped".into())),
                Ok(()) if !*leading.borrow_and_update() => return Err(LostLeadership::Lost),
                Ok(()) => {}
            },
        }
    }
}

/// Competes for the Lease `lease` in `namespace` as `identity` (the pod's name), and runs `work`
/// while leading. The Lease is released when this returns, so a successor takes over at once.
pub async fn run_elected<F: Future<Output = ()>>(
    client: Client,
    namespace: &str,
    lease: &str,
    identity: &str,
    work: F,
) -> anyhow::Result<()> {
    let manager = LeaseManagerBuilder::new(client, lease)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_S)
        .with_grace(LEASE_GRACE_S)
        .build()
        .await?;
    tracing::info!(lease, namespace, identity, "waiting to lead");
    let (leading, election) = manager.watch().await;
    let result = while_leading(leading, work).await;
    // The receiver is gone: the election task releases the Lease and ends.
    if let Ok(Err(e)) = election.await {
        tracing::warn!(error = %e, "releasing the Lease");
    }
    result.map_err(|e| anyhow::anyhow!("Lease {namespace}/{lease}: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    /// Work that marks that it started and then runs until dropped.
    async fn work(started: Arc<AtomicBool>) {
        started.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await
    }

    /// Two replicas never reconcile at once: a replica reconciles only after the Lease is its own,
    /// and stops the moment it is not.
    #[tokio::test]
    async fn a_replica_reconciles_only_while_it_holds_the_lease() {
        let (lease, leading) = watch::channel(false);
        let started = Arc::new(AtomicBool::new(false));
        let run = tokio::spawn(while_leading(leading, work(started.clone())));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!started.load(Ordering::SeqCst), "no reconcile before leading");
        lease.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(started.load(Ordering::SeqCst), "reconciling once leading");
        lease.send(false).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("a replica that lost the Lease stops")
            .unwrap();
        assert!(matches!(ended, Err(LostLeadership::Lost)), "{ended:?}");
    }

    #[tokio::test]
    async fn a_controller_that_ends_while_leading_ends_the_run() {
        let (lease, leading) = watch::channel(true);
        let ended = while_leading(leading, async {}).await;
        assert!(ended.is_ok(), "{ended:?}");
        drop(lease);
        // An election that ends before this replica led is an error, not a silent exit.
        let (lease, leading) = watch::channel(false);
        drop(lease);
        let ended = while_leading(leading, async {}).await;
        assert!(
            matches!(ended, Err(LostLeadership::ElectionEnded(_))),
            "{ended:?}"
        );
    }
}
