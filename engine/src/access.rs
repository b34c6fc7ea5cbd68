//! Who may do what to a table or a family: the owner/group/mode decision
//! that every way in makes the same way (the mount, the gRPC API, the
//! console), and the bearer tokens that name an identity to the network
//! ports (`grpc_tokens=FILE`).

use crate::schema::{FamilySchema, TableSchema};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Read, write and search bits as in `access(2)`.
pub const R: u32 = 4;
/// See [`R`].
pub const W: u32 = 2;

/// Whether a user (`uid`, primary group `gid`, supplementary `groups`) is
/// granted the bits `want` by `owner`/`group`/`mode`. Root is granted all,
/// as the kernel's `default_permissions` grants it. Exactly one class
/// decides: the owner's bits for the owner even if group or other would
/// allow more.
pub fn may(
    uid: u32,
    gid: u32,
    groups: &[u32],
    owner: u32,
    group: u32,
    mode: u32,
    want: u32,
) -> bool {
    if uid == 0 {
        return true;
    }
    let bits = if uid == owner {
        mode >> 6
    } else if gid == group || groups.contains(&group) {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}

/// A user as the network ports know it: what a token maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user id.
    pub uid: u32,
    /// The primary group.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Identity {
    /// A user without supplementary groups.
    pub fn new(uid: u32, gid: u32) -> Identity {
        Identity {
            uid,
            gid,
            groups: Vec::new(),
        }
    }

    /// Whether `want` is granted by `owner`/`group`/`mode` (see [`may`]).
    pub fn may(&self, owner: u32, group: u32, mode: u32, want: u32) -> bool {
        may(self.uid, self.gid, &self.groups, owner, group, mode, want)
    }

    /// Whether `want` is granted on the table (its directory's bits).
    pub fn on_table(&self, t: &TableSchema, want: u32) -> bool {
        self.may(t.owner, t.group, t.mode, want)
    }

    /// Whether `want` is granted on the family.
    pub fn on_family(&self, f: &FamilySchema, want: u32) -> bool {
        self.may(f.owner, f.group, f.mode, want)
    }

    /// The families of `t` this user may read, in name order.
    pub fn readable_families(&self, t: &TableSchema) -> Vec<String> {
        t.families
            .values()
            .filter(|f| self.on_family(f, R))
            .map(|f| f.name.clone())
            .collect()
    }
}

/// Why a tokens file is refused.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// It cannot be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Others than its owner may read or write it (as ssh refuses keys).
    #[error(
        "{path}: mode {mode:o} lets others than its owner read or write it; chmod 600 (or 400) it"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It belongs to another user than the daemon's.
    #[error("{path}: owned by uid {owner}, not by the daemon's user (uid {daemon})")]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The daemon's uid.
        daemon: u32,
    },
    /// A line does not parse.
    #[error("{path} line {line}: {why}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// Shortest token accepted: a guessable token is no authentication.
pub const MIN_TOKEN: usize = 16;
/// Largest tokens file read.
const MAX_FILE: u64 = 1 << 20;

/// Bearer tokens and the identity each names.
#[derive(Debug, Default, Clone)]
pub struct Tokens {
    entries: Vec<(Vec<u8>, Identity)>,
}

impl Tokens {
    /// Reads `path`, which must belong to `daemon_uid` and be readable by
    /// no one else (mode 0600 or 0400); it is opened without following a
    /// symbolic link. `resolve` maps a user name to its identity (the
    /// system's passwd and group databases).
    pub fn load(
        path: &Path,
        daemon_uid: u32,
        resolve: impl Fn(&str) -> Option<Identity>,
    ) -> Result<Tokens, TokensError> {
        let io = |source| TokensError::Io {
            path: path.to_path_buf(),
            source,
        };
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        if meta.mode() & 0o077 != 0 {
            return Err(TokensError::Exposed {
                path: path.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
        if meta.uid() != daemon_uid {
            return Err(TokensError::Owner {
                path: path.to_path_buf(),
                owner: meta.uid(),
                daemon: daemon_uid,
            });
        }
        let mut text = String::new();
        f.take(MAX_FILE).read_to_string(&mut text).map_err(io)?;
        Tokens::parse(&text, resolve).map_err(|(line, why)| TokensError::Line {
            path: path.to_path_buf(),
            line,
            why,
        })
    }

    /// The file's text: one token a line, `TOKEN IDENTITY`, where IDENTITY
    /// is `UID:GID[,GID…]` (the first gid the primary group) or a user
    /// name; blank lines and `#` comments are skipped. Errors name the
    /// 1-based line.
    pub fn parse(
        text: &str,
        resolve: impl Fn(&str) -> Option<Identity>,
    ) -> Result<Tokens, (usize, String)> {
        let mut out = Tokens::default();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(token), Some(who), None) = (words.next(), words.next(), words.next()) else {
                return Err((n, "expected `TOKEN UID:GID[,GID…]` or `TOKEN USER`".into()));
            };
            if token.len() < MIN_TOKEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err((
                    n,
                    format!("a token is at least {MIN_TOKEN} printable ASCII characters"),
                ));
            }
            let id = match who.split_once(':') {
                Some((uid, gids)) => {
                    let num = |s: &str| {
                        s.parse::<u32>()
                            .map_err(|_| (n, format!("{s:?} is not a number")))
                    };
                    let uid = num(uid)?;
                    let gids: Vec<u32> = gids.split(',').map(num).collect::<Result<_, _>>()?;
                    let Some((&gid, groups)) = gids.split_first() else {
                        return Err((n, "no group".into()));
                    };
                    Identity {
                        uid,
                        gid,
                        groups: groups.to_vec(),
                    }
                }
                None => resolve(who).ok_or_else(|| (n, format!("no user {who:?}")))?,
            };
            if out.entries.iter().any(|(t, _)| t == token.as_bytes()) {
                return Err((n, "the same token twice".into()));
            }
            out.entries.push((token.as_bytes().to_vec(), id));
        }
        Ok(out)
    }

    /// The identity `token` names. Every entry is compared in full, in time
    /// that does not depend on where the bytes differ.
    pub fn lookup(&self, token: &[u8]) -> Option<&Identity> {
        let mut found = None;
        for (t, id) in &self.entries {
            if constant_time_eq(t, token) {
                found = Some(id);
            }
        }
        found
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an HTTP `Authorization: Bearer TOKEN` header value.
pub fn bearer(header: &[u8]) -> Option<&[u8]> {
    let h = header.trim_ascii();
    if h.len() > 7 && h[..7].eq_ignore_ascii_case(b"bearer ") {
        Some(h[7..].trim_ascii())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn owner_group_other_bits() {
        let alice = Identity::new(1000, 100);
        assert!(alice.may(1000, 0, 0o600, R | W));
        assert!(!alice.may(1001, 0, 0o640, R));
        assert!(alice.may(1001, 100, 0o640, R));
        assert!(!alice.may(1001, 100, 0o640, W));
        assert!(alice.may(1, 1, 0o604, R));
        assert!(!alice.may(1000, 100, 0o077, R));
        assert!(Identity::new(0, 0).may(1, 1, 0, R | W));
        let bob = Identity {
            uid: 1002,
            gid: 5,
            groups: vec![7],
        };
        assert!(bob.may(1, 7, 0o070, R));
        let mut t = TableSchema::with_families([FamilySchema::new("a"), FamilySchema::new("b")]);
        t.families.get_mut("b").unwrap().mode = 0o700;
        assert_eq!(alice.readable_families(&t), vec!["a".to_string()]);
    }

    #[test]
    fn parses_tokens() {
        let resolve = |n: &str| (n == "alice").then(|| Identity::new(1000, 1000));
        let t = Tokens::parse(
            "# who\n\n0123456789abcdef 65534:65534\n  fedcba9876543210  alice\nxxxxxxxxxxxxxxxx 5:6,7,8\n",
            resolve,
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.lookup(b"0123456789abcdef"),
            Some(&Identity::new(65534, 65534))
        );
        assert_eq!(t.lookup(b"fedcba9876543210").unwrap().uid, 1000);
        assert_eq!(t.lookup(b"xxxxxxxxxxxxxxxx").unwrap().groups, vec![7, 8]);
        assert_eq!(t.lookup(b"0123456789abcdeg"), None);
        assert_eq!(t.lookup(b""), None);
        for (bad, line) in [
            ("short 1:1", 1),
            ("\n0123456789abcdef bob", 2),
            ("0123456789abcdef 1", 1),
            ("0123456789abcdef x:1", 1),
            ("0123456789abcdef 1:", 1),
            ("0123456789abcdef 1:1 extra", 1),
            ("0123456789abcdef 1:1\n0123456789abcdef 2:2", 2),
        ] {
            assert_eq!(Tokens::parse(bad, resolve).unwrap_err().0, line, "{bad}");
        }
    }

    #[test]
    fn refuses_files_others_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens");
        std::fs::write(&p, "0123456789abcdef 1:1\n").unwrap();
        let me = std::fs::metadata(&p).unwrap().uid();
        let none = |_: &str| None;
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(matches!(
                Tokens::load(&p, me, none),
                Err(TokensError::Exposed { .. })
            ));
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Tokens::load(&p, me, none).unwrap().len(), 1);
        assert!(matches!(
            Tokens::load(&p, me + 1, none),
            Err(TokensError::Owner { .. })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(
            Tokens::load(&link, me, none),
            Err(TokensError::Io { .. })
        ));
    }

    #[test]
    fn bearer_header() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
    }
}
