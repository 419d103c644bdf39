//! How Floe's processes open gRPC channels to each other.
//!
//! Every channel sends HTTP/2 keep-alive pings, also while idle. A network partition kills a TCP
//! connection silently: no reset arrives, and a call on it waits as long as the partition lasts.
//! When the peer was replaced meanwhile (a JobManager that took over at the same Service address,
//! a pod rescheduled) the old connection never comes back, and without pings a TaskManager would
//! heartbeat into it for ever. A ping that goes unanswered for the keep-alive's timeout closes the
//! connection; the channel then connects anew, to whatever answers at the address now.
//!
//! The control plane (heartbeats, registration, deployments, checkpoint calls) uses
//! [`CONTROL_KEEP_ALIVE`]: short, so a TaskManager finds a JobManager that took over well within
//! a heartbeat timeout. Shuffle streams pass their own, longer one: a short partition between two
//! TaskManagers only stalls them (backpressure), it does not fail their tasks.

use std::time::Duration;

use tonic::transport::Endpoint;

/// Keep-alive pings of a channel.
#[derive(Debug, Clone, Copy)]
pub struct KeepAlive {
    /// How often a connection is pinged, idle or not.
    pub interval: Duration,
    /// How long a ping may go unanswered before the connection counts as dead.
    pub timeout: Duration,
}

/// JobManager <-> TaskManager calls.
pub const CONTROL_KEEP_ALIVE: KeepAlive = KeepAlive {
    interval: Duration::from_secs(2),
    timeout: Duration::from_secs(4),
};

/// The endpoint for `address`: connect timeout, no Nagle delay, keep-alive pings; over mutual
/// TLS (`https://`) when the process set up internal TLS ([`crate::tls::install`]), else
/// `http://`.
pub fn endpoint(
    address: &str,
    connect_timeout: Duration,
    keep_alive: KeepAlive,
) -> Result<Endpoint, tonic::transport::Error> {
    let tls = crate::tls::installed();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(keep_alive.interval)
        .keep_alive_timeout(keep_alive.timeout)
        .keep_alive_while_idle(true);
    match tls {
        Some(tls) => endpoint.tls_config(tls.client()),
        None => Ok(endpoint),
    }
}
