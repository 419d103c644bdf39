//! Addresses as Floe's processes bind and advertise them, IPv4 or IPv6 (issue 13, item 11).
//!
//! In a cluster the processes bind `[::]`: one dual-stack socket takes IPv6 and IPv4 connections,
//! so the same pod spec works in IPv4, IPv6 and dual-stack clusters. A kernel without IPv6 refuses
//! that socket; [`bind`] then takes `0.0.0.0` on the same port. A peer's address is `host:port`
//! with an IPv6 host in brackets ([`host_port`]), as URIs and socket addresses need it.

use std::net::{Ipv4Addr, SocketAddr};

/// Linux's EAFNOSUPPORT: the kernel has no IPv6.
const ADDRESS_FAMILY_NOT_SUPPORTED: i32 = 97;

/// Binds `address`; the IPv6 wildcard falls back to the IPv4 one where the kernel has no IPv6.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(address).await {
        Err(e) if address.ip().is_unspecified() && address.is_ipv6() && no_ipv6(&e) => {
            tokio::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, address.port())).await
        }
        bound => bound,
    }
}

fn no_ipv6(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(ADDRESS_FAMILY_NOT_SUPPORTED) || e.kind() == std::io::ErrorKind::AddrNotAvailable
}

/// `host:port`, with an IPv6 address in brackets (`[fd00::5]:6121`); a host already in brackets
/// or a name is left as it is.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(host_port("fd00::5", 6121), "[fd00::5]:6121");
        assert_eq!(host_port("[fd00::5]", 6121), "[fd00::5]:6121");
        assert_eq!(host_port("10.244.0.5", 6121), "10.244.0.5:6121");
        assert_eq!(host_port("tm-0.jobs.svc", 6121), "tm-0.jobs.svc:6121");
        let parsed: SocketAddr = host_port("fd00::5", 6121).parse().unwrap();
        assert_eq!(parsed.port(), 6121);
    }

    /// The wildcard a pod binds takes connections over IPv4 (and IPv6 where the machine has it).
    #[tokio::test]
    async fn the_ipv6_wildcard_takes_ipv4_connections() {
        let listener = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = tokio::spawn(async move { listener.accept().await.map(|(_, peer)| peer) });
        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .unwrap();
        accepted.await.unwrap().unwrap();
    }
}
