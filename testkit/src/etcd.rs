//! A real etcd for tests: Debian's `etcd` (3.4, from `etcd-server`, which
//! `tests/setup.sh` installs) on loopback, on free ports (never 2379/2380),
//! in a fresh data directory. Dropping it kills the server by pid.

// A server that cannot start fails the test that asked for it, saying why.
#![allow(clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `etcd` binary: `BIGTABLE_ETCD`, else `etcd` on PATH.
pub fn etcd_bin() -> PathBuf {
    std::env::var_os("BIGTABLE_ETCD").map_or_else(|| PathBuf::from("etcd"), PathBuf::from)
}

/// A running single-member etcd.
pub struct Etcd {
    /// Behind a mutex so that a test can kill and restart a server it
    /// shares (through an `Arc`) with the mounts that use it.
    child: std::sync::Mutex<Option<Child>>,
    /// The client endpoint, `HOST:PORT` (no scheme; HOST 127.0.0.1 unless
    /// started with [`Etcd::start_on`]).
    pub endpoint: String,
    dir: tempfile::TempDir,
    args: Vec<String>,
}

/// A port that is free now (the kernel's choice, so never 2379/2380 in use
/// by a real cluster).
fn free_port(host: &str) -> u16 {
    loop {
        let l = TcpListener::bind((host, 0)).expect("bind a free port");
        let p = l.local_addr().expect("local address").port();
        if p != 2379 && p != 2380 {
            return p;
        }
    }
}

impl Etcd {
    /// Starts a server; panics, saying why, if it does not answer within a minute.
    pub fn start() -> Etcd {
        Etcd::start_on("127.0.0.1")
    }

    /// The same, listening on address `host` (one of this machine's, such
    /// as a bridge that other network namespaces reach it by).
    pub fn start_on(host: &str) -> Etcd {
        // A free port can be taken by another process between the probe
        // and etcd's bind: then etcd exits at once, and new ports are tried.
        for _ in 0..4 {
            let e = Etcd::spawn_on(host);
            if e.ready() {
                return e;
            }
            if !e.log().contains("address already in use") {
                panic!("etcd was not ready within a minute; its log:\n{}", e.log());
            }
        }
        let e = Etcd::spawn_on(host);
        e.wait_ready();
        e
    }

    /// A server started on fresh free ports, not yet known to be ready.
    fn spawn_on(host: &str) -> Etcd {
        let dir = tempfile::tempdir().expect("temp dir");
        let (client, peer) = (free_port(host), free_port(host));
        let data = dir.path().join("data");
        let args = vec![
            "--name=test".to_string(),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls=http://{host}:{client}"),
            format!("--advertise-client-urls=http://{host}:{client}"),
            format!("--listen-peer-urls=http://{host}:{peer}"),
            format!("--initial-advertise-peer-urls=http://{host}:{peer}"),
            format!("--initial-cluster=test=http://{host}:{peer}"),
            "--initial-cluster-state=new".into(),
            // Short elections: a restarted member leads again quickly.
            "--heartbeat-interval=50".into(),
            "--election-timeout=500".into(),
        ];
        let e = Etcd {
            child: std::sync::Mutex::new(None),
            endpoint: format!("{host}:{client}"),
            dir,
            args,
        };
        e.spawn();
        e
    }

    fn spawn(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd.log");
        let child = Command::new(etcd_bin())
            .args(&self.args)
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): run tests/setup.sh, which installs etcd-server",
                    etcd_bin().display()
                )
            });
        *self.child.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
    }

    fn wait_ready(&self) {
        assert!(
            self.ready(),
            "etcd was not ready within a minute; its log:\n{}",
            self.log()
        );
    }

    /// Whether the server answers within a minute (false at once if it
    /// exited).
    fn ready(&self) -> bool {
        crate::wait_until(Duration::from_secs(60), || {
            self.exited()
                // etcdctl 3.4 prints the health on stderr: its status says it.
                || self.etcdctl(&["endpoint", "health"]).is_some()
        }) && !self.exited()
    }

    fn exited(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        child
            .as_mut()
            .is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }

    /// Runs `etcdctl` (API v3) against this server; its standard output if
    /// it succeeded.
    pub fn etcdctl(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=http://{}", self.endpoint))
            .arg("--dial-timeout=2s")
            .arg("--command-timeout=5s")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// Every key under `prefix` (`etcdctl get --prefix --keys-only`).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.etcdctl(&["get", "--prefix", "--keys-only", prefix])
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Where the server keeps its data.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the server the hard way (SIGKILL).
    pub fn kill(&self) {
        let child = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same directory and ports.
    pub fn restart(&self) {
        self.kill();
        self.spawn();
        self.wait_ready();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
