//! A local S3 server for tests: `moto_server` from PyPI (`pip install "moto[server]"`), started on a
//! free loopback port and stopped on drop. It honours conditional creates (`If-None-Match: *`), which
//! fencing needs.
//!
//! A server never outlives its test process: a harness that ends with `std::process::exit` (as
//! libtest-mimic's does) runs no destructors, and a test killed by a signal none, so the server is
//! started through a few lines of Python that also exit when their stdin, a pipe only this process
//! holds, reaches end of file (the way `floe --exit-on-stdin-eof` children do).
#![allow(clippy::unwrap_used)] // test support: a panic is the failure report

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// `moto_server -H HOST -p PORT` that also exits when stdin reaches end of file.
const MOTO_UNTIL_STDIN_EOF: &str = r#"
import os, sys, threading
def parent_gone():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=parent_gone, daemon=True).start()
from moto.server import main
host, port = sys.argv[1], sys.argv[2]
sys.argv = ["moto_server", "-H", host, "-p", port]
sys.exit(main())
"#;

/// A running moto server with one bucket.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    /// The server exits when this closes (this process ended, however it ended).
    stdin: Option<ChildStdin>,
    pub endpoint: String,
    pub bucket: String,
}

impl MotoServer {
    /// Whether moto's server can be started here (`python3` imports it).
    pub fn available() -> bool {
        Command::new("python3")
            .args(["-c", "import moto.server"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The server a test binary's S3 cases share: started when `moto_server` exists or
    /// `FLOE_REQUIRE_MOTO` is set (CI: then a missing server fails the cases); otherwise `None`, after
    /// printing `SKIPPED: {what} ...`, so the caller reports those cases as ignored, not passed.
    pub fn for_tests(what: &str, bucket: &str) -> Option<std::sync::Arc<MotoServer>> {
        Self::for_tests_on(what, bucket, "127.0.0.1")
    }

    /// [`MotoServer::for_tests`] listening on `host` (an address other network namespaces reach).
    pub fn for_tests_on(what: &str, bucket: &str, host: &str) -> Option<std::sync::Arc<MotoServer>> {
        let required = std::env::var_os("FLOE_REQUIRE_MOTO").is_some();
        if !Self::available() && !required {
            eprintln!("SKIPPED: {what} (moto_server not found: pip install \"moto[server]\")");
            return None;
        }
        Some(std::sync::Arc::new(MotoServer::start_on(bucket, host)))
    }

    /// Starts moto on loopback and creates `bucket`.
    pub fn start(bucket: &str) -> MotoServer {
        Self::start_on(bucket, "127.0.0.1")
    }

    /// Starts moto on `host` and creates `bucket`.
    pub fn start_on(bucket: &str, host: &str) -> MotoServer {
        let port = std::net::TcpListener::bind((host, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("python3")
            .args(["-c", MOTO_UNTIL_STDIN_EOF, host, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with moto's server (pip install \"moto[server]\")");
        let stdin = child.stdin.take();
        let address = format!("{host}:{port}");
        let started = Instant::now();
        while TcpStream::connect(&address).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto_server did not start on {address}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        create_bucket(&address, bucket);
        MotoServer {
            child,
            stdin,
            endpoint: format!("http://{address}"),
            bucket: bucket.to_string(),
        }
    }

    /// Configuration for [`crate::ObjectStore::open`] of `s3://{bucket}/...` on this server.
    pub fn conf(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("s3.endpoint".into(), self.endpoint.clone()),
            ("s3.region".into(), "us-east-1".into()),
            ("s3.access-key".into(), "test".into()),
            ("s3.secret-key".into(), "test".into()),
        ])
    }

    /// Closes this process's end of the server's stdin pipe, as the kernel does when this process
    /// ends, however it ends; returns the server's process id, for a test that it then exits alone.
    pub fn close_stdin(&mut self) -> u32 {
        self.stdin.take();
        self.child.id()
    }

    /// [`open_multipart_uploads`] of this server's bucket.
    pub fn open_multipart_uploads(&self) -> usize {
        open_multipart_uploads(self.endpoint.trim_start_matches("http://"), &self.bucket)
    }

    /// `s3://{bucket}/{prefix}`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request without a body to the S3 server at `address` (moto does not check signatures);
/// the reply, which must be `200` (else a panic naming `what`).
fn request(address: &str, method: &str, target: &str, what: &str) -> String {
    let mut s = TcpStream::connect(address).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{what}: {reply}");
    reply
}

/// The multipart uploads begun in `bucket` and neither completed nor aborted (S3's
/// ListMultipartUploads): each is storage a bucket pays for until a lifecycle rule removes it.
pub fn open_multipart_uploads(address: &str, bucket: &str) -> usize {
    request(
        address,
        "GET",
        &format!("/{bucket}?uploads"),
        "ListMultipartUploads",
    )
    .matches("<UploadId>")
    .count()
}

/// CreateBucket on the moto server at `address`.
pub fn create_bucket(address: &str, bucket: &str) {
    request(address, "PUT", &format!("/{bucket}"), "CreateBucket");
}
