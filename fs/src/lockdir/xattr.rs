//! Extended attributes of `.chubby/` entries:
//!
//! | name | get | set |
//! |---|---|---|
//! | `user.chubby.sequencer` | the sequencer of the lock the caller holds (`/path:exclusive:17`); ENODATA if it holds none | — |
//! | `user.chubby.check` | — | succeeds iff the sequencer given as value is current (ESTALE if not) |
//! | `user.chubby.lock` | `free 17`, `shared 17` or `exclusive 17`: state and lock generation | — |
//! | `user.chubby.lock_delay_ms` | the lock-delay | sets it (bounded by the cell) |
//! | `user.chubby.ephemeral` | `1` or `0` | `1` makes the file vanish with its last open handle |
//! | `user.chubby.content_generation` | grows with every replacement of the contents | — |
//!
//! Paths in sequencers are the cell's: `.chubby/election` is `/election`.

use super::{creds, errno, LockDir, LockNode};
use crate::ctx::Ctx;
use crate::node::Node;
use crate::options::FsResult;
use crate::perms::Caller;
use chubby::{Credentials, Sequencer, Target};
use fuser::Errno;
use std::time::Duration;

pub const SEQUENCER: &str = "user.chubby.sequencer";
pub const CHECK: &str = "user.chubby.check";
pub const LOCK: &str = "user.chubby.lock";
pub const LOCK_DELAY: &str = "user.chubby.lock_delay_ms";
pub const EPHEMERAL: &str = "user.chubby.ephemeral";
pub const CONTENT_GENERATION: &str = "user.chubby.content_generation";

/// The attributes `listxattr` shows (the sequencer depends on the caller
/// and the check is write-only, so they are not listed).
const LISTED: [&str; 4] = [LOCK, LOCK_DELAY, EPHEMERAL, CONTENT_GENERATION];

/// Parses a decimal attribute value (surrounding white space allowed).
fn number(value: &[u8]) -> FsResult<u64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(Errno::EINVAL)
}

/// Parses a boolean attribute value: 1/0, true/false, yes/no.
fn boolean(value: &[u8]) -> FsResult<bool> {
    match std::str::from_utf8(value).map(str::trim) {
        Ok("1" | "true" | "yes") => Ok(true),
        Ok("0" | "false" | "no") => Ok(false),
        _ => Err(Errno::EINVAL),
    }
}

impl LockDir {
    fn xattr_path(&self, cx: &Ctx, ino: u64) -> FsResult<Option<String>> {
        match cx.lock_node(ino) {
            Some(LockNode::Entry(p)) => Ok(Some(p)),
            Some(_) => Ok(None),
            None => Err(Errno::ENOENT),
        }
    }

    /// FUSE `getxattr` in `.chubby/`.
    pub fn getxattr(&self, cx: &Ctx, caller: &Caller, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        let ld = self;
        let Some(path) = self.xattr_path(cx, ino)? else {
            return Err(Errno::NO_XATTR);
        };
        let name = std::str::from_utf8(name).map_err(|_| Errno::NO_XATTR)?;
        if !name.starts_with("user.chubby.") {
            return Err(Errno::NO_XATTR);
        }
        let what = format!("getxattr {name} of /.chubby{path}");
        let stat = || {
            ld.svc
                .stat(&Credentials::root(), Target::Path(&path))
                .map_err(|e| errno(&what, &e))
        };
        let text = match name {
            SEQUENCER => self
                .caller_sequencer(
                    caller,
                    &path,
                    Node::Lock(LockNode::Entry(path.clone())).natural_ino(),
                )?
                .ok_or(Errno::NO_XATTR)?
                .to_string(),
            LOCK => {
                let generation = stat()?.lock_generation;
                let holders = ld
                    .svc
                    .holders(Target::Path(&path))
                    .map_err(|e| errno(&what, &e))?;
                let state = holders.first().map_or("free", |h| h.mode.as_str());
                format!("{state} {generation}")
            }
            LOCK_DELAY => stat()?.lock_delay.as_millis().to_string(),
            EPHEMERAL => u8::from(stat()?.ephemeral).to_string(),
            CONTENT_GENERATION => stat()?.content_generation.to_string(),
            _ => return Err(Errno::NO_XATTR),
        };
        Ok(text.into_bytes())
    }

    /// FUSE `listxattr` in `.chubby/`: NUL-terminated names.
    pub fn listxattr(&self, cx: &Ctx, ino: u64) -> FsResult<Vec<u8>> {
        let mut out = Vec::new();
        if self.xattr_path(cx, ino)?.is_some() {
            for n in LISTED {
                out.extend_from_slice(n.as_bytes());
                out.push(0);
            }
        }
        Ok(out)
    }

    /// FUSE `setxattr` in `.chubby/`.
    pub fn setxattr(
        &self,
        cx: &Ctx,
        caller: &Caller,
        ino: u64,
        name: &[u8],
        value: &[u8],
    ) -> FsResult<()> {
        let ld = self;
        let Some(path) = self.xattr_path(cx, ino)? else {
            return Err(Errno::EPERM);
        };
        let name = std::str::from_utf8(name).map_err(|_| Errno::ENOTSUP)?;
        let what = format!("setxattr {name} of /.chubby{path}");
        let c = creds(caller);
        match name {
            CHECK => {
                let seq: Sequencer = std::str::from_utf8(value)
                    .map_err(|_| Errno::EINVAL)?
                    .parse()
                    .map_err(|e| errno(&what, &e))?;
                if seq.path == path && ld.svc.check_sequencer(&seq) {
                    Ok(())
                } else {
                    log::info!("{what}: {seq} is stale");
                    Err(Errno::ESTALE)
                }
            }
            LOCK_DELAY => {
                let ms = number(value)?;
                ld.svc
                    .set_lock_delay(&c, Target::Path(&path), Duration::from_millis(ms))
                    .map(drop)
                    .map_err(|e| errno(&what, &e))
            }
            EPHEMERAL => ld
                .svc
                .set_ephemeral(&c, Target::Path(&path), boolean(value)?)
                .map(drop)
                .map_err(|e| errno(&what, &e)),
            SEQUENCER | LOCK | CONTENT_GENERATION => Err(Errno::EPERM),
            _ => Err(Errno::ENOTSUP),
        }
    }

    /// FUSE `removexattr` in `.chubby/`: removing `ephemeral` makes the file permanent.
    pub fn removexattr(&self, cx: &Ctx, caller: &Caller, ino: u64, name: &[u8]) -> FsResult<()> {
        if name == EPHEMERAL.as_bytes() {
            return self.setxattr(cx, caller, ino, name, b"0");
        }
        self.xattr_path(cx, ino)?;
        match std::str::from_utf8(name) {
            Ok(n) if LISTED.contains(&n) || n == SEQUENCER => Err(Errno::EPERM),
            _ => Err(Errno::NO_XATTR),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(number(b" 250\n"), Ok(250));
        assert_eq!(number(b"x"), Err(Errno::EINVAL));
        assert_eq!(boolean(b"1"), Ok(true));
        assert_eq!(boolean(b"no"), Ok(false));
        assert_eq!(boolean(b"2"), Err(Errno::EINVAL));
    }
}
