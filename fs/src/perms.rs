//! Permission checks the kernel cannot make for us.
//!
//! The mount uses `default_permissions`, so the kernel checks every path
//! against the owner/group/mode we report (tables and families). What it
//! cannot see is which families a `.mutate` batch or a `.scan` query touches;
//! those are checked here against each family's bits.

use std::fs;

/// Read, write, execute bits as in `access(2)`.
pub use engine::access::{R, W};

/// Who makes a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Supplementary groups (read from /proc when needed).
    pub groups: Vec<u32>,
}

impl Caller {
    /// A caller with only its primary group.
    pub fn new(uid: u32, gid: u32, pid: u32) -> Caller {
        Caller {
            uid,
            gid,
            pid,
            groups: Vec::new(),
        }
    }

    /// The daemon itself, for tests.
    #[cfg(test)]
    pub fn root() -> Caller {
        Caller::new(0, 0, 0)
    }

    /// Fills in the supplementary groups of the calling process.
    pub fn with_groups(mut self) -> Caller {
        if self.pid != 0 {
            if let Ok(s) = fs::read_to_string(format!("/proc/{}/status", self.pid)) {
                self.groups = parse_groups(&s);
            }
        }
        self
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the bits `want` (R, W) are granted by owner/group/mode: the
    /// decision the gRPC API makes too (`engine::access`).
    pub fn may(&self, owner: u32, group: u32, mode: u32, want: u32) -> bool {
        engine::access::may(self.uid, self.gid, &self.groups, owner, group, mode, want)
    }
}

/// The `Groups:` line of /proc/<pid>/status.
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_groups_reach_the_shared_decision() {
        // The bits themselves are engine::access's (tested there).
        let mut bob = Caller::new(1002, 5, 0);
        assert!(!bob.may(1, 7, 0o070, R));
        bob.groups = vec![7];
        assert!(bob.may(1, 7, 0o070, R));
        assert!(Caller::root().may(1, 1, 0, R | W));
    }

    #[test]
    fn reads_supplementary_groups() {
        assert_eq!(
            parse_groups("Name:\tx\nGroups:\t4 24 27 \nUid: 0"),
            vec![4, 24, 27]
        );
        assert_eq!(parse_groups("Groups:\n"), Vec::<u32>::new());
        let me = Caller::new(0, 0, std::process::id()).with_groups();
        assert_eq!(me.pid, std::process::id());
    }
}
