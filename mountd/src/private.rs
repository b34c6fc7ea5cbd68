//! Files that hold secrets (the cluster secret, private keys, credentials)
//! must not be readable by anyone but their owner: as ssh does with a key,
//! the daemon refuses to start with one that group or others can read (or
//! write), rather than use a secret that may already be out.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Whether `path` (given as option `option`) is a private file: a regular
/// file (symlinks followed) that neither group nor others may read or
/// write.
pub fn private_file(option: &str, path: &Path) -> Result<(), String> {
    let m = std::fs::metadata(path).map_err(|e| format!("{option}={}: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("{option}={}: not a regular file", path.display()));
    }
    let mode = m.mode() & 0o777;
    if mode & 0o066 != 0 {
        return Err(format!(
            "{option}={}: mode {mode:04o} lets other users read or change it; \
             a secret must be private (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_files_no_one_else_can_read_pass() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("secret");
        std::fs::write(&f, "x").unwrap();
        for (mode, ok) in [
            (0o600, true),
            (0o400, true),
            (0o700, true),
            (0o640, false),
            (0o604, false),
            (0o620, false),
            (0o644, false),
        ] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(private_file("k", &f).is_ok(), ok, "{mode:o}");
        }
        let e = private_file("cluster_secret_file", &f).unwrap_err();
        assert!(
            e.contains("cluster_secret_file=") && e.contains("0644"),
            "{e}"
        );
        assert!(private_file("k", dir.path()).is_err(), "a directory");
        assert!(private_file("k", &dir.path().join("none")).is_err());
    }
}
