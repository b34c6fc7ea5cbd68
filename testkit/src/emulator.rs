//! Google's Cloud Bigtable emulator (`cbtemulator`, from Debian's
//! `google-cloud-cli-bigtable-emulator`, which `tests/setup.sh` installs) on
//! loopback, on a free port: the oracle of the differential test and the peer
//! of `bigtable-bench grpc`. It keeps everything in memory; dropping it kills
//! the server by pid.

// A server that cannot start fails the test that asked for it, saying why.
#![allow(clippy::expect_used)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where the Google Cloud CLI's Debian package puts the emulator.
const PACKAGED: &str = "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator";

/// The `cbtemulator` binary: `BIGTABLE_CBTEMULATOR`, else the packaged one,
/// else `cbtemulator` on PATH.
pub fn emulator_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BIGTABLE_CBTEMULATOR") {
        return PathBuf::from(p);
    }
    if std::path::Path::new(PACKAGED).exists() {
        return PathBuf::from(PACKAGED);
    }
    PathBuf::from("cbtemulator")
}

/// A running emulator.
pub struct Emulator {
    child: Child,
    /// `127.0.0.1:PORT`, what `BIGTABLE_EMULATOR_HOST` is set to.
    pub addr: String,
    log: tempfile::NamedTempFile,
}

impl Emulator {
    /// Starts one; panics, saying why, if it does not answer within a minute.
    pub fn start() -> Emulator {
        // A free port can be taken between the probe and the emulator's bind:
        // then it exits at once, and another port is tried.
        for _ in 0..4 {
            let mut e = Emulator::spawn();
            if e.ready() {
                return e;
            }
            if !e.log().contains("address already in use") {
                panic!(
                    "cbtemulator was not ready within a minute; its output:\n{}",
                    e.log()
                );
            }
        }
        let mut e = Emulator::spawn();
        assert!(e.ready(), "cbtemulator was not ready:\n{}", e.log());
        e
    }

    fn spawn() -> Emulator {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let out = log.reopen().expect("log");
        let child = Command::new(emulator_bin())
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): run tests/setup.sh, which installs \
                     google-cloud-cli-bigtable-emulator",
                    emulator_bin().display()
                )
            });
        Emulator {
            child,
            addr: format!("127.0.0.1:{port}"),
            log,
        }
    }

    /// Whether it accepts connections within a minute (false at once if it
    /// exited).
    fn ready(&mut self) -> bool {
        let addr = self.addr.clone();
        crate::wait_until(Duration::from_secs(60), || {
            self.exited() || TcpStream::connect(&addr).is_ok()
        }) && !self.exited()
    }

    /// Whether the process has ended (the emulator dies on some requests).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id, for measuring it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
