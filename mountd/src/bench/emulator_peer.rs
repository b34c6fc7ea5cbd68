//! Google's Cloud Bigtable emulator (`cbtemulator`) as the peer of
//! `bigtable-bench grpc`: started on a free loopback port for one run and
//! killed by pid when dropped. It keeps everything in memory.

use anyhow::{anyhow, Context, Result};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Google Cloud CLI's Debian package
/// (`google-cloud-cli-bigtable-emulator`) installs it.
const PACKAGED: &str = "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator";

/// `BIGTABLE_CBTEMULATOR`, else the packaged binary if present, else
/// `cbtemulator` on PATH.
fn binary() -> PathBuf {
    std::env::var_os("BIGTABLE_CBTEMULATOR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(PACKAGED)).filter(|p| p.exists()))
        .unwrap_or_else(|| PathBuf::from("cbtemulator"))
}

pub struct EmulatorPeer {
    child: Child,
    pub addr: String,
}

impl EmulatorPeer {
    /// Starts one and waits (30 s at most) until it takes connections.
    pub fn start() -> Result<EmulatorPeer> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(binary())
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (Debian package google-cloud-cli-bigtable-emulator)",
                    binary().display()
                )
            })?;
        let mut peer = EmulatorPeer {
            child,
            addr: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&peer.addr).is_err() {
            if Instant::now() > deadline || !matches!(peer.child.try_wait(), Ok(None)) {
                return Err(anyhow!("cbtemulator did not start on {}", peer.addr));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(peer)
    }

    /// Its resident memory, from /proc.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }
}

impl Drop for EmulatorPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
