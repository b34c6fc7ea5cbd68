//! POSIX-style access control: who is asking, and whether owner/group/other
//! mode bits let them. Root bypasses every check, as on a local filesystem.

use crate::error::{Error, Result};

pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const SEARCH: u32 = 1;

const S_ISVTX: u32 = 0o1000;

/// The identity of the caller of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// User id; 0 is root and passes every check.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Credentials {
    /// The superuser, for trusted callers (the engine, the lock directory's own nodes).
    pub fn root() -> Self {
        Credentials::user(0, 0)
    }

    pub(crate) fn user(uid: u32, gid: u32) -> Self {
        Credentials {
            uid,
            gid,
            groups: Vec::new(),
        }
    }

    pub(crate) fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub(crate) fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The ownership and permission bits of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Perm {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// Whether `creds` may access a node with permissions `perm` for all of `want`
/// (a mask of READ, WRITE, SEARCH). Only the most specific class counts, as in POSIX.
pub fn allowed(creds: &Credentials, perm: Perm, want: u32) -> bool {
    if creds.is_root() {
        return true;
    }
    let bits = if creds.uid == perm.uid {
        (perm.mode >> 6) & 7
    } else if creds.in_group(perm.gid) {
        (perm.mode >> 3) & 7
    } else {
        perm.mode & 7
    };
    bits & want == want
}

/// Whether `creds` may take a lock on a node with permissions `perm`.
/// On a node owned by root (the engine's, and anything an administrator
/// sets up) a lock needs write permission, so that a reader cannot hold up
/// the master or the numbers counter; elsewhere read or write permission
/// suffices, as for flock(2) on a file one may open.
pub fn may_lock(creds: &Credentials, perm: Perm) -> bool {
    if perm.uid == 0 {
        return allowed(creds, perm, WRITE);
    }
    allowed(creds, perm, READ) || allowed(creds, perm, WRITE)
}

/// `allowed`, as a typed error naming the path.
pub fn check(creds: &Credentials, perm: Perm, want: u32, path: &str) -> Result<()> {
    if allowed(creds, perm, want) {
        Ok(())
    } else {
        Err(Error::PermissionDenied(path.to_string()))
    }
}

/// Whether `creds` may remove or rename an entry with owner `victim_uid` from a
/// directory; the sticky bit restricts that to the entry's or the directory's owner.
pub fn may_delete(creds: &Credentials, dir: Perm, victim_uid: u32) -> bool {
    creds.is_root() || dir.mode & S_ISVTX == 0 || creds.uid == dir.uid || creds.uid == victim_uid
}

/// Whether `creds` owns the node (or is root): needed for chmod, chown.
pub fn is_owner(creds: &Credentials, perm: Perm) -> bool {
    creds.is_root() || creds.uid == perm.uid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_group_other() {
        let p = Perm {
            uid: 10,
            gid: 20,
            mode: 0o640,
        };
        let owner = Credentials::user(10, 99);
        let member = Credentials {
            uid: 11,
            gid: 99,
            groups: vec![20],
        };
        let other = Credentials::user(12, 99);
        assert!(allowed(&owner, p, READ | WRITE));
        assert!(allowed(&member, p, READ));
        assert!(!allowed(&member, p, WRITE));
        assert!(!allowed(&other, p, READ));
        assert!(allowed(&Credentials::root(), p, READ | WRITE | SEARCH));
        // The owner class is final even if "other" would allow more.
        let q = Perm {
            uid: 10,
            gid: 20,
            mode: 0o077,
        };
        assert!(!allowed(&owner, q, READ));
        assert!(matches!(
            check(&other, p, READ, "/x"),
            Err(Error::PermissionDenied(_))
        ));
    }

    #[test]
    fn locking_a_node_of_root_needs_write_permission() {
        let alice = Credentials::user(10, 10);
        let roots = Perm {
            uid: 0,
            gid: 0,
            mode: 0o644,
        };
        assert!(!may_lock(&alice, roots));
        assert!(may_lock(
            &alice,
            Perm {
                mode: 0o666,
                ..roots
            }
        ));
        assert!(may_lock(&Credentials::root(), Perm { mode: 0, ..roots }));
        let bobs = Perm { uid: 11, ..roots };
        assert!(may_lock(&alice, bobs), "read permission suffices elsewhere");
        assert!(!may_lock(
            &alice,
            Perm {
                mode: 0o600,
                ..bobs
            }
        ));
    }

    #[test]
    fn sticky_directory() {
        let dir = Perm {
            uid: 0,
            gid: 0,
            mode: 0o1777,
        };
        let alice = Credentials::user(10, 10);
        assert!(may_delete(&alice, dir, 10));
        assert!(!may_delete(&alice, dir, 11));
        let plain = Perm { mode: 0o777, ..dir };
        assert!(may_delete(&alice, plain, 11));
    }
}
