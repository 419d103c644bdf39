//! A PostgreSQL server for one test (Debian's `postgresql`, installed by `.ci/setup`): a fresh
//! cluster in the test's directory, on a free loopback port (TCP only), `fsync` off, trust authentication
//! for user `floe`. Where the server binaries are missing the tests report themselves ignored
//! with SKIPPED, unless `FLOE_REQUIRE_POSTGRES` is set (CI), where they fail. The table is read
//! back with `psql`, independent of the sink under test.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The directory of `initdb`, `postgres` and `psql` (the newest installed version).
pub fn server_binaries() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("FLOE_POSTGRES_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// The binaries, or `None` with a SKIPPED line (a panic where `FLOE_REQUIRE_POSTGRES` is set).
pub fn server_or_skip(what: &str) -> Option<PathBuf> {
    match server_binaries() {
        Some(b) => Some(b),
        None if std::env::var_os("FLOE_REQUIRE_POSTGRES").is_some() => {
            panic!("{what}: no PostgreSQL server (run .ci/setup, or set FLOE_POSTGRES_BIN)")
        }
        None => {
            eprintln!("SKIPPED {what}: no PostgreSQL server (run .ci/setup, or set FLOE_POSTGRES_BIN)");
            None
        }
    }
}

/// A running server; stopped (immediate shutdown) when dropped.
pub struct Postgres {
    child: Child,
    bin: PathBuf,
    pub port: u16,
}

/// The server refuses to run as root: as root, it runs as the `postgres` user Debian's package
/// creates, in a directory handed to that user.
fn as_server_user(program: &Path, dir: &Path) -> Command {
    let root = std::env::var("USER").is_ok_and(|u| u == "root")
        || Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if root {
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(chown.success(), "chown {} to postgres", dir.display());
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    pub fn start(bin: &Path, dir: &Path) -> Postgres {
        let dir = dir.join("postgres");
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        let init = as_server_user(&bin.join("initdb"), &dir)
            .args(["-U", "floe", "--auth=trust", "-E", "UTF8", "--no-sync", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let child = as_server_user(&bin.join("postgres"), &dir)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            // TCP on loopback only: no Unix socket (a test directory's path can pass the
            // 107-byte limit of a socket's).
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", "fsync=off"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let server = Postgres {
            child,
            bin: bin.to_path_buf(),
            port,
        };
        super::wait_for(
            "PostgreSQL to accept connections",
            Duration::from_secs(60),
            || server.try_sql("SELECT 1").ok(),
        );
        server
    }

    /// The connection string the sink takes.
    pub fn connection(&self) -> String {
        format!("host=127.0.0.1 port={} user=floe dbname=postgres", self.port)
    }

    fn try_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "floe",
                "-d",
                "postgres",
            ])
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-F",
                "\t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs `sql`; its rows, a line each, columns TAB-separated.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown (the cluster is thrown away).
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
