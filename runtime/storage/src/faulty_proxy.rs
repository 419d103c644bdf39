//! An HTTP proxy in front of a test S3 server (moto) that makes it a slow, failing server: every
//! byte in either direction passes a shared rate limit, and chosen multipart parts fail with a 500
//! or stall past the client's part deadline, once each. Requests are real HTTP on real sockets;
//! only the server's speed and failures are made up, which is what a test of streamed transfers
//! needs (a whole-object PUT under one deadline fails behind it, a part-by-part upload does not).
//!
//! Each request is forwarded on a fresh upstream connection that it closes, and the response is
//! read to its end before it is passed on, so the proxy needs no HTTP framing beyond a request's
//! `Content-Length` (every request opendal's S3 service sends has one).
#![allow(clippy::unwrap_used)] // test support: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes moved between two checks of the rate limit.
const SLICE: usize = 64 << 10;

#[derive(Debug)]
struct Plan {
    upstream: String,
    bytes_per_second: u64,
    /// When the shared link is next free.
    link_free_at: Mutex<Instant>,
    fail_parts: Mutex<BTreeSet<u32>>,
    stall_parts: Mutex<BTreeMap<u32, Duration>>,
    failed: AtomicU64,
    stalled: AtomicU64,
    /// Largest request body seen (a whole-object PUT shows here as the object's size).
    largest_body: AtomicU64,
}

impl Plan {
    /// Waits until `len` bytes may pass.
    fn pace(&self, len: usize) {
        let cost = Duration::from_secs_f64(len as f64 / self.bytes_per_second as f64);
        let ready = {
            let mut free = self.link_free_at.lock().unwrap();
            let start = (*free).max(Instant::now());
            *free = start + cost;
            *free
        };
        std::thread::sleep(ready.saturating_duration_since(Instant::now()));
    }

    fn copy_paced(&self, from: &mut impl Read, to: &mut impl Write, mut len: u64) -> std::io::Result<()> {
        let mut buf = vec![0u8; SLICE];
        while len > 0 {
            let want = (len as usize).min(SLICE);
            from.read_exact(&mut buf[..want])?;
            self.pace(want);
            to.write_all(&buf[..want])?;
            len -= want as u64;
        }
        Ok(())
    }
}

/// A running proxy; it stops accepting when dropped.
#[derive(Debug)]
pub struct FaultyProxy {
    /// `http://127.0.0.1:PORT`, to use as the S3 endpoint.
    pub endpoint: String,
    plan: Arc<Plan>,
}

impl FaultyProxy {
    /// A proxy to `upstream` (`http://host:port`) moving at most `bytes_per_second` in all.
    pub fn start(upstream: &str, bytes_per_second: u64) -> FaultyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let plan = Arc::new(Plan {
            upstream: upstream.trim_start_matches("http://").to_string(),
            bytes_per_second,
            link_free_at: Mutex::new(Instant::now()),
            fail_parts: Mutex::default(),
            stall_parts: Mutex::default(),
            failed: AtomicU64::new(0),
            stalled: AtomicU64::new(0),
            largest_body: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&plan);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Some(plan)) = (client, weak.upgrade()) else {
                    return;
                };
                std::thread::spawn(move || {
                    let _ = serve(&plan, client);
                });
            }
        });
        FaultyProxy { endpoint, plan }
    }

    /// The first upload of part `number` (of any multipart upload) fails with a 500.
    pub fn fail_part_once(&self, number: u32) {
        self.plan.fail_parts.lock().unwrap().insert(number);
    }

    /// The first upload of part `number` gets no answer for `stall`, then its connection closes.
    pub fn stall_part_once(&self, number: u32, stall: Duration) {
        self.plan.stall_parts.lock().unwrap().insert(number, stall);
    }

    /// Parts failed so far.
    pub fn failed_parts(&self) -> u64 {
        self.plan.failed.load(Ordering::Relaxed)
    }

    /// Parts stalled so far.
    pub fn stalled_parts(&self) -> u64 {
        self.plan.stalled.load(Ordering::Relaxed)
    }

    /// The largest request body that passed, in bytes.
    pub fn largest_request_body(&self) -> u64 {
        self.plan.largest_body.load(Ordering::Relaxed)
    }
}

/// The request head up to its blank line, or `None` at the end of the connection.
fn read_head(client: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(None);
        }
        head.push(byte[0]);
    }
    Ok(Some(head))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `partNumber` of a request target, if it has one.
fn part_number(target: &str) -> Option<u32> {
    let query = target.split_once('?')?.1;
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("partNumber="))
        .and_then(|n| n.parse().ok())
}

fn serve(plan: &Plan, mut client: TcpStream) -> std::io::Result<()> {
    while let Some(head) = read_head(&mut client)? {
        let head = String::from_utf8_lossy(&head).into_owned();
        let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
        let length: u64 = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        plan.largest_body.fetch_max(length, Ordering::Relaxed);
        let part = part_number(&target);
        if let Some(stall) = part.and_then(|n| plan.stall_parts.lock().unwrap().remove(&n)) {
            plan.stalled.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(stall);
            return Ok(());
        }
        let mut body = Vec::with_capacity(length as usize);
        plan.copy_paced(&mut client, &mut body, length)?;
        if part.is_some_and(|n| plan.fail_parts.lock().unwrap().remove(&n)) {
            plan.failed.fetch_add(1, Ordering::Relaxed);
            let xml =
                "<Error><Code>InternalError</Code><Message>injected by the test proxy</Message></Error>";
            write!(
                client,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                xml.len()
            )?;
            return Ok(());
        }
        // The request on its own upstream connection, which the server closes after answering.
        let mut forwarded: String = head
            .trim_end_matches("\r\n")
            .lines()
            .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
            .map(|l| format!("{l}\r\n"))
            .collect();
        forwarded.push_str("Connection: close\r\n\r\n");
        let mut upstream = TcpStream::connect(&plan.upstream)?;
        upstream.write_all(forwarded.as_bytes())?;
        upstream.write_all(&body)?;
        drop(body);
        let mut response = Vec::new();
        upstream.read_to_end(&mut response)?;
        let closes = !String::from_utf8_lossy(&response[..response.len().min(4096)])
            .to_ascii_lowercase()
            .contains("content-length:");
        plan.copy_paced(&mut response.as_slice(), &mut client, response.len() as u64)?;
        if closes {
            return Ok(());
        }
    }
    Ok(())
}
