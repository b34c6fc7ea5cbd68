//! Mounting: the kernel sees the filesystem as type `fuse.bigtable`.
//!
//! As root we call mount(2) ourselves with the type `fuse.bigtable` and hand
//! the /dev/fuse descriptor to fuser (fuser's own mount says plain `fuse`);
//! otherwise fuser mounts through fusermount3 with subtype `bigtable`.

use crate::mountopts::MountConfig;
use fs::fuser::{self, Config, MountOption, Session, SessionACL};
use nix::mount::MsFlags;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

/// The FUSE session configuration for a mount.
pub fn session_config(cfg: &MountConfig) -> Config {
    let mut c = Config::default();
    c.n_threads = Some(cfg.thread_count());
    c.clone_fd = true;
    c.uring_queue_depth = cfg.uring_depth;
    // The queue threads look for requests as long as busy polling would.
    c.uring_look_window = cfg.busy_poll;
    c.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    c.mount_options = vec![
        MountOption::FSName(cfg.data_dir.display().to_string()),
        MountOption::Subtype("bigtable".into()),
        MountOption::DefaultPermissions,
        if cfg.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    if cfg.noexec {
        c.mount_options.push(MountOption::NoExec);
    }
    if cfg.noatime {
        c.mount_options.push(MountOption::NoAtime);
    }
    c
}

/// mount(2) of a `fuse.bigtable` filesystem; returns the /dev/fuse descriptor.
fn mount_syscall(cfg: &MountConfig) -> std::io::Result<OwnedFd> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let root_mode = std::fs::metadata(&cfg.mountpoint)?.mode() & libc::S_IFMT;
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={},default_permissions",
        dev.as_raw_fd(),
        root_mode,
        nix::unistd::getuid(),
        nix::unistd::getgid()
    );
    if cfg.allow_other {
        data.push_str(",allow_other");
    }
    let mut flags = MsFlags::empty();
    for (on, f) in [
        (cfg.nosuid, MsFlags::MS_NOSUID),
        (cfg.nodev, MsFlags::MS_NODEV),
        (cfg.noexec, MsFlags::MS_NOEXEC),
        (cfg.noatime, MsFlags::MS_NOATIME),
        (cfg.read_only, MsFlags::MS_RDONLY),
    ] {
        if on {
            flags |= f;
        }
    }
    let source = cfg.data_dir.display().to_string();
    nix::mount::mount(
        Some(source.as_str()),
        &cfg.mountpoint,
        Some("fuse.bigtable"),
        flags,
        Some(data.as_str()),
    )
    .map_err(std::io::Error::from)?;
    Ok(OwnedFd::from(dev))
}

/// Mounts `fs` at the mountpoint; the returned session has completed the
/// FUSE handshake (the mount is usable) and is ready to run. Also returns a
/// descriptor of the connection for polling, if one could be had.
pub fn mount<FS: fuser::Filesystem>(
    fs: FS,
    cfg: &MountConfig,
) -> std::io::Result<(Session<FS>, Option<OwnedFd>)> {
    let config = session_config(cfg);
    if nix::unistd::geteuid().is_root() {
        let fd = mount_syscall(cfg)?;
        let poll_fd = fd.try_clone().ok();
        let acl = config.acl;
        match Session::from_fd(fs, fd, acl, config) {
            Ok(s) => Ok((s, poll_fd)),
            Err(e) => {
                let _ = nix::mount::umount2(&cfg.mountpoint, nix::mount::MntFlags::MNT_DETACH);
                Err(e)
            }
        }
    } else {
        let session = Session::new(fs, &cfg.mountpoint, &config)?;
        Ok((session, fuse_device_in_process()))
    }
}

/// A duplicate of the /dev/fuse descriptor fusermount3 handed to fuser: the
/// only one this process has open, since fuser keeps it private.
fn fuse_device_in_process() -> Option<OwnedFd> {
    let fds = std::fs::read_dir("/proc/self/fd").ok()?;
    let fd = fds.flatten().find_map(|e| {
        let target = std::fs::read_link(e.path()).ok()?;
        if target != std::path::Path::new("/dev/fuse") {
            return None;
        }
        e.file_name().to_str()?.parse::<std::os::fd::RawFd>().ok()
    })?;
    // SAFETY: `fd` was open a moment ago and fuser keeps it open for the
    // session's life; the borrow lasts only for the duplication.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    borrowed.try_clone_to_owned().ok()
}

/// Unmounts (lazily if busy), as `umount` would.
pub fn unmount(cfg: &MountConfig) -> std::io::Result<()> {
    match nix::mount::umount2(&cfg.mountpoint, nix::mount::MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => {
            nix::mount::umount2(&cfg.mountpoint, nix::mount::MntFlags::MNT_DETACH)
                .map_err(std::io::Error::from)
        }
        Err(nix::errno::Errno::EPERM) => {
            // Not root: fusermount3 does it.
            let st = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&cfg.mountpoint)
                .status()?;
            if st.success() {
                Ok(())
            } else {
                Err(std::io::Error::other("fusermount3 -u failed"))
            }
        }
        Err(e) => Err(std::io::Error::from(e)),
    }
}
