//! Hosts of a test's own, to cut the network between processes: each host is a network namespace
//! with one address, wired by a veth pair to a bridge in a "switch" namespace (a namespace of its
//! own, so the host's firewall, which may filter bridged traffic, never sees it). The test
//! process reaches every host through one more veth from its own namespace (the gateway address).
//!
//! A partition is `iptables DROP` inside the hosts, so packets vanish as on a real network: no
//! reset, no error, a connection just stops. A Service address (`point_service`) is a DNAT rule in
//! every host, as kube-proxy makes one: moving it moves new connections, while established ones
//! stay with the old backend until they break.
//!
//! Needs root and iproute2/iptables; [`Network::create`] says why it cannot be had otherwise.

use std::process::Command;

use floe::local_cluster::Host;

#[derive(Debug)]
pub struct Network {
    tag: String,
    /// The first three octets of the /24.
    subnet: String,
    hosts: usize,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

impl Network {
    /// `hosts` hosts at `{subnet}.10`, `.11`, ...; the test process is `{subnet}.1`.
    pub fn create(hosts: usize) -> Result<Network, String> {
        if !Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        {
            return Err("network namespaces need root".into());
        }
        let pid = std::process::id();
        let net = Network {
            tag: format!("fl{pid}"),
            subnet: format!("10.213.{}", pid % 250 + 1),
            hosts,
        };
        net.wire().inspect_err(|_| net.remove())?;
        Ok(net)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    fn netns(&self, i: usize) -> String {
        format!("{}-{i}", self.tag)
    }

    fn wire(&self) -> Result<(), String> {
        let sw = self.switch();
        run(&["ip", "netns", "add", &sw])?;
        run(&[
            "ip", "netns", "exec", &sw, "ip", "link", "add", "br0", "type", "bridge",
        ])?;
        run(&["ip", "netns", "exec", &sw, "ip", "link", "set", "br0", "up"])?;
        let plug = |outer: &str, inner: &str| -> Result<(), String> {
            run(&["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])?;
            run(&["ip", "link", "set", inner, "netns", &sw])?;
            run(&[
                "ip", "netns", "exec", &sw, "ip", "link", "set", inner, "master", "br0",
            ])?;
            run(&["ip", "netns", "exec", &sw, "ip", "link", "set", inner, "up"])
        };
        for i in 0..self.hosts {
            let ns = self.netns(i);
            let (outer, inner) = (format!("{}h{i}", self.tag), format!("{}s{i}", self.tag));
            run(&["ip", "netns", "add", &ns])?;
            plug(&outer, &inner)?;
            run(&["ip", "link", "set", &outer, "netns", &ns])?;
            let ip = format!("{}/24", self.ip(i));
            run(&[
                "ip", "netns", "exec", &ns, "ip", "addr", "add", &ip, "dev", &outer,
            ])?;
            run(&["ip", "netns", "exec", &ns, "ip", "link", "set", &outer, "up"])?;
            run(&["ip", "netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        }
        let (outer, inner) = (format!("{}r", self.tag), format!("{}q", self.tag));
        plug(&outer, &inner)?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", self.gateway()),
            "dev",
            &outer,
        ])?;
        run(&["ip", "link", "set", &outer, "up"])
    }

    fn remove(&self) {
        for i in 0..self.hosts {
            let _ = run(&["ip", "netns", "del", &self.netns(i)]);
        }
        let _ = run(&["ip", "netns", "del", &self.switch()]);
        let _ = run(&["ip", "link", "del", &format!("{}r", self.tag)]);
    }

    pub fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, 10 + i)
    }

    pub fn host(&self, i: usize) -> Host {
        Host {
            netns: self.netns(i),
            ip: self.ip(i),
        }
    }

    /// The test process's address on the network (servers it runs for the hosts bind here).
    pub fn gateway(&self) -> String {
        format!("{}.1", self.subnet)
    }

    /// An address no host has, for [`Network::point_service`].
    pub fn service_ip(&self) -> String {
        format!("{}.100", self.subnet)
    }

    fn iptables(&self, i: usize, rule: &[&str]) {
        let ns = self.netns(i);
        let mut args = vec!["ip", "netns", "exec", &ns, "iptables", "-w"];
        args.extend_from_slice(rule);
        if let Err(e) = run(&args) {
            panic!("{e}");
        }
    }

    /// Packets between hosts `a` and `b` are dropped, both ways.
    pub fn cut(&self, a: usize, b: usize) {
        for (x, y) in [(a, b), (b, a)] {
            let peer = self.ip(y);
            self.iptables(x, &["-A", "INPUT", "-s", &peer, "-j", "DROP"]);
            self.iptables(x, &["-A", "OUTPUT", "-d", &peer, "-j", "DROP"]);
        }
    }

    /// Host `a` is cut off from every other host and from the test process.
    pub fn isolate(&self, a: usize) {
        self.iptables(a, &["-A", "INPUT", "!", "-i", "lo", "-j", "DROP"]);
        self.iptables(a, &["-A", "OUTPUT", "!", "-o", "lo", "-j", "DROP"]);
    }

    /// Every cut and isolation ends.
    pub fn heal(&self) {
        for i in 0..self.hosts {
            self.iptables(i, &["-F", "INPUT"]);
            self.iptables(i, &["-F", "OUTPUT"]);
        }
    }

    /// New connections to `{service_ip}:port` from any host go to host `to` on the same port.
    pub fn point_service(&self, port: u16, to: usize) {
        let (service, target) = (self.service_ip(), format!("{}:{port}", self.ip(to)));
        let port = port.to_string();
        for i in 0..self.hosts {
            self.iptables(i, &["-t", "nat", "-F", "OUTPUT"]);
            self.iptables(
                i,
                &[
                    "-t",
                    "nat",
                    "-A",
                    "OUTPUT",
                    "-d",
                    &service,
                    "-p",
                    "tcp",
                    "--dport",
                    &port,
                    "-j",
                    "DNAT",
                    "--to-destination",
                    &target,
                ],
            );
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.remove();
    }
}
