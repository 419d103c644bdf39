//! Leader election (issue 13, item 11): with several operator replicas (for a fast takeover when
//! a node goes), one reconciles at a time. The replicas compete for a Lease in the operator's
//! namespace (`kube-lease-manager`: server-side apply, so two replicas never both take it); the
//! holder runs the controller, and a holder that loses the Lease stops at once and exits, so the
//! Deployment restarts it as a candidate. [`while_leading`] is that rule, apart from the API.
//!
//! A holder cut off from the API server cannot renew, and its Lease ends for the others after
//! `LEASE_DURATION_S`; `kube-lease-manager` keeps saying "leading" meanwhile (its renewal
//! errors are retried, never reported), so a cut-off holder would go on reconciling beside its
//! successor. [`renewal_watchdog`] is the renew deadline Kubernetes' own leader election has: the
//! holder reads its Lease every [`CHECK_EVERY`], and stops once it has not seen it held by itself
//! and renewed for [`RENEW_DEADLINE`] (before the Lease can have ended), or at once when it sees
//! another holder.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
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
/// A holder that has not seen its Lease held and renewed for this long stops: before the Lease can
/// have ended for the other replicas (`LEASE_DURATION_S`), with the grace to spare. (10 s: the
/// [`LostLeadership::NotRenewed`] message says so.)
pub const RENEW_DEADLINE: Duration = Duration::from_secs(LEASE_DURATION_S - LEASE_GRACE_S);
/// How often a holder reads its Lease.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Why a replica stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum LostLeadership {
    #[error("another operator replica holds the Lease now: stopping this one")]
    Lost,
    #[error("the election ended: {0}")]
    ElectionEnded(String),
    #[error("the Lease could not be confirmed within the renew deadline (10 s): {0}; stopping this replica")]
    NotRenewed(String),
}

/// Runs `work` only while `leading` says this replica holds the Lease: waits until it does, then
/// runs `work` to its end, or until the Lease is lost or `guard` (started once leading: the
/// [`renewal_watchdog`]) says it is (`work` is dropped then: nothing of it runs on).
pub async fn while_leading<F: Future<Output = ()>, G: Future<Output = LostLeadership>>(
    mut leading: watch::Receiver<bool>,
    work: F,
    guard: G,
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
    tokio::pin!(guard);
    loop {
        tokio::select! {
            () = &mut work => return Ok(()),
            lost = &mut guard => return Err(lost),
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
    let manager = LeaseManagerBuilder::new(client.clone(), lease)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_S)
        .with_grace(LEASE_GRACE_S)
        .build()
        .await?;
    tracing::info!(lease, namespace, identity, "waiting to lead");
    let (leading, election) = manager.watch().await;
    let leases: Api<Lease> = Api::namespaced(client, namespace);
    let result = while_leading(leading, work, renewal_watchdog(leases, lease, identity)).await;
    // The receiver is gone: the election task releases the Lease and ends.
    if let Ok(Err(e)) = election.await {
        tracing::warn!(error = %e, "releasing the Lease");
    }
    result.map_err(|e| anyhow::anyhow!("Lease {namespace}/{lease}: {e}"))
}

/// What a look at the Lease says of this replica's leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// Held by this replica, renewed recently enough that it has not ended for the others.
    Renewed,
    /// Another replica holds it: leadership is lost.
    HeldByAnother(String),
    /// This replica's, or nobody's, but not renewed in time (or not readable): lost once that
    /// lasts for the renew deadline.
    Unconfirmed(String),
}

/// What `lease`, read at `now`, says of the replica `identity`.
pub fn holding(lease: &Lease, identity: &str, now: Timestamp) -> Holding {
    let spec = lease.spec.as_ref();
    match spec.and_then(|s| s.holder_identity.as_deref()) {
        Some(holder) if holder == identity => {}
        Some(holder) if !holder.is_empty() => {
            return Holding::HeldByAnother(format!("the Lease is held by {holder:?} now"));
        }
        _ => return Holding::Unconfirmed("the Lease has no holder".into()),
    }
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .map_or(LEASE_DURATION_S as i64, i64::from);
    match spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0) {
        Some(t) if now.as_millisecond() - t.as_millisecond() <= duration * 1000 => Holding::Renewed,
        Some(t) => Holding::Unconfirmed(format!(
            "the Lease was last renewed at {t}, more than {duration}s ago"
        )),
        None => Holding::Unconfirmed("the Lease has no renew time".into()),
    }
}

/// Reads the Lease `name` every [`CHECK_EVERY`] while this replica leads; returns why it must stop
/// leading: another holder (at once), or no confirmation that it holds a renewed Lease for
/// [`RENEW_DEADLINE`] (an API server it cannot reach, a renewal that keeps failing).
pub async fn renewal_watchdog(leases: Api<Lease>, name: &str, identity: &str) -> LostLeadership {
    let mut confirmed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let why = match tokio::time::timeout(CHECK_EVERY, leases.get(name)).await {
            Ok(Ok(lease)) => match holding(&lease, identity, Timestamp::now()) {
                Holding::Renewed => {
                    confirmed = tokio::time::Instant::now();
                    continue;
                }
                Holding::HeldByAnother(why) => return LostLeadership::NotRenewed(why),
                Holding::Unconfirmed(why) => why,
            },
            Ok(Err(e)) => format!("reading the Lease: {e}"),
            Err(_) => format!("reading the Lease: no answer within {CHECK_EVERY:?}"),
        };
        if confirmed.elapsed() >= RENEW_DEADLINE {
            return LostLeadership::NotRenewed(why);
        }
        tracing::warn!(lease = name, "{why}");
    }
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
        let run = tokio::spawn(while_leading(
            leading,
            work(started.clone()),
            std::future::pending(),
        ));
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

    /// A mock API server answering reads of the Lease `floe-system/floe-operator-leader`: the
    /// `n`-th read gets `answer(n)` (a status code and body).
    fn leases(
        answer: impl Fn(usize) -> (u16, serde_json::Value) + Send + 'static,
    ) -> (Api<Lease>, tokio::task::JoinHandle<usize>) {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut reads = 0;
            while let Some((request, send)) = handle.next_request().await {
                assert_eq!(
                    (request.method().as_str(), request.uri().path()),
                    (
                        "GET",
                        "/apis/coordination.k8s.io/v1/namespaces/floe-system/leases/floe-operator-leader"
                    )
                );
                let (code, body) = answer(reads);
                reads += 1;
                send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
            reads
        });
        let client = Client::new(service, "floe-system");
        (Api::namespaced(client, "floe-system"), server)
    }

    fn lease(holder: &str, renewed: Timestamp) -> (u16, serde_json::Value) {
        (
            200,
            serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": { "name": "floe-operator-leader", "namespace": "floe-system" },
                "spec": {
                    "holderIdentity": holder,
                    "leaseDurationSeconds": LEASE_DURATION_S,
                    "renewTime": renewed.to_string(),
                },
            }),
        )
    }

    fn unavailable() -> (u16, serde_json::Value) {
        (
            503,
            serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server is currently unable to handle the request",
                "reason": "ServiceUnavailable", "code": 503,
            }),
        )
    }

    /// Issue 32, item 8: a leader cut off from the API server (its renewals fail; the election
    /// library keeps saying "leading") stops within the renew deadline of its last confirmed
    /// renewal, before its Lease can have ended for the other replicas.
    #[tokio::test(start_paused = true)]
    async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_ends() {
        let (api, _server) = leases(|n| {
            if n < 2 {
                lease("floe-operator-a", Timestamp::now())
            } else {
                unavailable()
            }
        });
        let start = tokio::time::Instant::now();
        let lost = renewal_watchdog(api, "floe-operator-leader", "floe-operator-a").await;
        let confirmed_last = CHECK_EVERY * 2;
        let stopped = start.elapsed();
        assert!(
            stopped >= confirmed_last + RENEW_DEADLINE
                && stopped < confirmed_last + Duration::from_secs(LEASE_DURATION_S),
            "stopped {stopped:?} after the start, last confirmed at {confirmed_last:?}"
        );
        let message = lost.to_string();
        assert!(message.contains("reading the Lease"), "{message}");
        assert!(message.contains("unable to handle the request"), "{message}");
        let deadline = format!("renew deadline ({} s)", RENEW_DEADLINE.as_secs());
        assert!(message.contains(&deadline), "{message}");
    }

    /// A renewal that no longer lands (the Lease's renew time falls behind) stops it the same way;
    /// another holder stops it at the first look.
    #[tokio::test(start_paused = true)]
    async fn a_stale_renewal_or_another_holder_stops_the_leader() {
        let stale = Timestamp::now() - std::time::Duration::from_secs(LEASE_DURATION_S + 1);
        let (api, _server) = leases(move |_| lease("floe-operator-a", stale));
        let start = tokio::time::Instant::now();
        let lost = renewal_watchdog(api, "floe-operator-leader", "floe-operator-a").await;
        assert!(start.elapsed() >= RENEW_DEADLINE, "{:?}", start.elapsed());
        assert!(lost.to_string().contains("last renewed"), "{lost}");

        let (api, _server) = leases(|_| lease("floe-operator-b", Timestamp::now()));
        let start = tokio::time::Instant::now();
        let lost = renewal_watchdog(api, "floe-operator-leader", "floe-operator-a").await;
        assert_eq!(start.elapsed(), CHECK_EVERY, "at the first look");
        assert!(lost.to_string().contains("held by \"floe-operator-b\""), "{lost}");
    }

    /// A leader whose Lease is renewed leads on; a watchdog that fires ends the work.
    #[tokio::test(start_paused = true)]
    async fn a_renewed_lease_keeps_the_leader_and_a_lost_one_stops_its_work() {
        let (api, server) = leases(|_| lease("floe-operator-a", Timestamp::now()));
        let watchdog = renewal_watchdog(api, "floe-operator-leader", "floe-operator-a");
        let watched = tokio::time::timeout(Duration::from_secs(121), watchdog).await;
        assert!(watched.is_err(), "still leading after 121 s: {watched:?}");
        drop(watched);
        assert_eq!(server.await.unwrap(), 60, "a read every {CHECK_EVERY:?}");

        let (_lease, leading) = watch::channel(true);
        let started = Arc::new(AtomicBool::new(false));
        let ended = while_leading(leading, work(started.clone()), async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            LostLeadership::NotRenewed("the API server is gone".into())
        })
        .await;
        assert!(started.load(Ordering::SeqCst));
        assert!(matches!(ended, Err(LostLeadership::NotRenewed(_))), "{ended:?}");
    }

    #[tokio::test]
    async fn a_controller_that_ends_while_leading_ends_the_run() {
        let (lease, leading) = watch::channel(true);
        let ended = while_leading(leading, async {}, std::future::pending()).await;
        assert!(ended.is_ok(), "{ended:?}");
        drop(lease);
        // An election that ends before this replica led is an error, not a silent exit.
        let (lease, leading) = watch::channel(false);
        drop(lease);
        let ended = while_leading(leading, async {}, std::future::pending()).await;
        assert!(
            matches!(ended, Err(LostLeadership::ElectionEnded(_))),
            "{ended:?}"
        );
    }
}
