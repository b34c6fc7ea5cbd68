//! Where a daemonized mountd logs, opened so that no other user can read
//! it, point it elsewhere or write into it: mode 0600, `O_NOFOLLOW`, owned
//! by the daemon's user, in a directory only that user (or root) can write.
//! A non-root daemon's default log was `/tmp/bigtable-mountd-<uid>.log`, a
//! name another user could create first (as a symlink, or a file of theirs).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The default log file: `/var/log/bigtable-mountd.log` if the daemon may
/// write there, else `mountd.log` in `$XDG_RUNTIME_DIR` or in a directory
/// of the user's own, `/tmp/bigtable-mountd-<uid>/` (made 0700).
pub fn default_log_file() -> PathBuf {
    let var = Path::new("/var/log");
    if nix::unistd::access(var, nix::unistd::AccessFlags::W_OK).is_ok() {
        return var.join("bigtable-mountd.log");
    }
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if run.is_absolute() && private_dir(&run).is_ok() {
            return run.join("bigtable-mountd.log");
        }
    }
    std::env::temp_dir()
        .join(format!("bigtable-mountd-{}", nix::unistd::getuid()))
        .join("mountd.log")
}

/// Opens (creating) the log file for appending, after checking its
/// directory; refuses a symlink or a file another user owns.
pub fn open_log(path: &Path) -> Result<File, String> {
    let show = path.display();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if std::fs::symlink_metadata(dir).is_err() {
        // The default's own directory (or a missing one given): made
        // private; another user's mkdir first fails the check below.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("log directory {}: {e}", dir.display()))?;
    }
    private_dir(dir).map_err(|why| format!("log file {show}: {why}"))?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("log file {show}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("log file {show}: {e}"))?;
    if !meta.is_file() || meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(format!(
            "log file {show}: not a regular file of this user (uid {})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("log file {show}: chmod 0600: {e}"))?;
    }
    Ok(file)
}

/// Whether only this user (or root) can change `dir`'s entries: a real
/// directory (not a symlink), owned by this user or root, writable by no
/// group and no other user.
fn private_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = nix::unistd::getuid().as_raw();
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "{} belongs to uid {}, not to this user",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "other users can write in {} (mode {:o}); choose a directory only this user can write (logfile=)",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_log_is_private_and_never_followed() {
        struct Dir(PathBuf);
        impl Dir {
            fn path(&self) -> &Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let d = Dir(std::env::temp_dir().join(format!("logfile-test-{}", std::process::id())));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(d.path())
            .unwrap();
        let p = d.path().join("m.log");
        open_log(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        // A symlink planted in its place is not followed.
        let link = d.path().join("l.log");
        std::os::unix::fs::symlink(d.path().join("elsewhere"), &link).unwrap();
        assert!(open_log(&link).is_err());
        assert!(!d.path().join("elsewhere").exists());
        // A directory others may write in is refused.
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(open_log(&open.join("m.log")).is_err());
        // An existing log others could read is made private.
        let loose = d.path().join("loose.log");
        std::fs::write(&loose, b"old\n").unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_log(&loose).unwrap();
        assert_eq!(std::fs::metadata(&loose).unwrap().mode() & 0o777, 0o600);
    }
}
