//! mount.bigtable: the mount(8) helper, installed as /sbin/mount.bigtable.
//!
//! `mount -t bigtable DATA_DIR MOUNTPOINT -o opts` (or an /etc/fstab line)
//! runs `mount.bigtable DATA_DIR MOUNTPOINT [-sfnv] -o opts`; this drops
//! mount(8)'s generic options and flags and execs `bigtable-mountd`, which
//! returns once the mount is live.

use mountd::mountopts::parse_helper_args;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

const DAEMON: &str = "bigtable-mountd";

/// Where bigtable-mountd is: $BIGTABLE_MOUNTD, next to this program, the
/// usual install directories, then $PATH.
fn find_daemon() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BIGTABLE_MOUNTD") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        dirs.push(d);
    }
    dirs.extend(
        [
            "/usr/local/bin",
            "/usr/local/sbin",
            "/usr/bin",
            "/usr/sbin",
            "/sbin",
            "/bin",
        ]
        .map(PathBuf::from),
    );
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(DAEMON))
        .find(|p| p.is_file())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let call = match parse_helper_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mount.bigtable: {e}");
            std::process::exit(1);
        }
    };
    if call.fake {
        return;
    }
    let Some(daemon) = find_daemon() else {
        eprintln!("mount.bigtable: cannot find {DAEMON} (set BIGTABLE_MOUNTD or install it in /usr/local/bin)");
        std::process::exit(32);
    };
    let mut cmd = std::process::Command::new(&daemon);
    cmd.arg(&call.data_dir).arg(&call.mountpoint);
    if !call.options.is_empty() {
        cmd.arg("-o").arg(call.options.join(","));
    }
    let err = cmd.exec();
    eprintln!("mount.bigtable: cannot run {}: {err}", daemon.display());
    std::process::exit(32);
}
