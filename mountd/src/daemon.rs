//! Becoming a daemon that returns to its caller only once the mount is live.
//!
//! The process forks before it starts any thread (the engine and FUSE start
//! many); the parent waits on a pipe until the child writes "ready" (or an
//! error message) and exits with the matching status, so `bigtable-mountd`
//! and `mount -t bigtable` return when the filesystem can be used.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// The child's end of the readiness pipe.
pub struct Ready {
    pipe: Option<std::fs::File>,
}

impl Ready {
    /// No parent is waiting (foreground mode).
    pub fn none() -> Ready {
        Ready { pipe: None }
    }

    /// Tells the parent the mount is live.
    pub fn ready(&mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(b"ready\n");
        }
    }

    /// Tells the parent why the daemon could not start.
    pub fn fail(&mut self, msg: &str) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(format!("error: {msg}\n").as_bytes());
        }
    }
}

pub use crate::logfile::default_log_file;

/// Forks. In the parent, waits for the child's word and exits (never
/// returns). In the child, detaches from the terminal, sends stdout/stderr to
/// `log_file` and returns the pipe to report readiness on.
pub fn daemonize(log_file: &Path) -> Result<Ready, String> {
    let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: called before any thread is started, so the child is a copy of
    // a single-threaded process and may run arbitrary code.
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Parent { child } => {
            drop(w);
            let mut msg = String::new();
            let _ = std::fs::File::from(r).read_to_string(&mut msg);
            if msg.starts_with("ready") {
                std::process::exit(0);
            }
            let msg = msg.trim();
            if msg.is_empty() {
                eprintln!(
                    "bigtable-mountd: the daemon (pid {child}) exited before the mount was live; see {}",
                    log_file.display()
                );
            } else {
                eprintln!("bigtable-mountd: {}", msg.trim_start_matches("error: "));
            }
            std::process::exit(1);
        }
        nix::unistd::ForkResult::Child => {
            drop(r);
            nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
            let _ = std::env::set_current_dir("/");
            let log = crate::logfile::open_log(log_file)?;
            let null = OpenOptions::new()
                .read(true)
                .open("/dev/null")
                .map_err(|e| format!("/dev/null: {e}"))?;
            // SAFETY: dup2 onto the standard descriptors; the sources are valid open files.
            unsafe {
                libc::dup2(null.as_raw_fd(), 0);
                libc::dup2(log.as_raw_fd(), 1);
                libc::dup2(log.as_raw_fd(), 2);
            }
            Ok(Ready {
                pipe: Some(std::fs::File::from(w)),
            })
        }
    }
}

/// Sets up logging to stderr with timestamps at `level`.
pub fn init_logging(level: log::LevelFilter) {
    let _ = env_logger::Builder::new()
        .filter_level(level)
        // fuser logs every unsupported request at warn; keep it quieter.
        .filter_module("fuser", level.min(log::LevelFilter::Warn))
        .format_timestamp_millis()
        .try_init();
}

/// Writes the pid file.
pub fn write_pid_file(path: &Path) -> Result<(), String> {
    std::fs::write(path, format!("{}\n", std::process::id()))
        .map_err(|e| format!("pid file {}: {e}", path.display()))
}
