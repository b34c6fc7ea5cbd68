//! flock and fcntl locks (FUSE GETLK/SETLK/SETLKW) for the whole mount.
//!
//! On a `.chubby/` file a lock is the lock service's lock, taken through
//! the description's handle and owned by the FUSE lock owner (flock: the
//! open file description; fcntl: the process's descriptor table). Anywhere
//! else the in-memory [`super::local::LocalLocks`] gives the kernel's usual
//! semantics. A request that must wait runs on a thread of its own and
//! gives up with EINTR when its caller has a signal pending or dies
//! ([`super::interrupt`]), so a killed waiter is never granted anything.

use super::files::{Done, LockHandle};
use super::interrupt::{self, ProcRef};
use super::{errno, is_lock_fh, LockDir, OwnerInfo};
use crate::ctx::Ctx;
use crate::options::FsResult;
use crate::perms::Caller;
use chubby::{LockMode, Sequencer, Target};
use fuser::Errno;

/// The largest file offset: "to the end of the file" in a lock reply.
pub const OFFSET_MAX: u64 = i64::MAX as u64;

/// One GETLK/SETLK/SETLKW request.
#[derive(Debug, Clone, Copy)]
pub struct LockRequest {
    pub ino: u64,
    pub fh: u64,
    /// The FUSE lock owner.
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    /// F_RDLCK, F_WRLCK or F_UNLCK.
    pub typ: i32,
    /// The requesting process (its thread group id); 0 for an unlock.
    pub pid: u32,
    /// SETLKW: wait for the lock.
    pub sleep: bool,
}

/// The answer to GETLK: a conflicting lock, or F_UNLCK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockReply {
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

fn mode_of(typ: i32) -> Result<Option<LockMode>, Errno> {
    match typ {
        libc::F_RDLCK => Ok(Some(LockMode::Shared)),
        libc::F_WRLCK => Ok(Some(LockMode::Exclusive)),
        libc::F_UNLCK => Ok(None),
        _ => Err(Errno::EINVAL),
    }
}

fn typ_of(mode: LockMode) -> i32 {
    match mode {
        LockMode::Shared => libc::F_RDLCK,
        LockMode::Exclusive => libc::F_WRLCK,
    }
}

/// The service handle behind a `.chubby/` file handle, if it is a file
/// (events and status files lock in the local table).
enum Via<'a> {
    Service(&'a LockDir, chubby::HandleId, chubby::Credentials, String),
    Local,
}

fn lock_via(ld: Option<&LockDir>, fh: u64) -> FsResult<Via<'_>> {
    if !is_lock_fh(fh) {
        return Ok(Via::Local);
    }
    let ld = ld.ok_or(Errno::ENOENT)?;
    let h = ld.handle(fh)?;
    let g = h.lock();
    Ok(match &*g {
        LockHandle::File(f) => Via::Service(ld, f.handle, f.creds.clone(), f.path.clone()),
        _ => Via::Local,
    })
}

/// FUSE `setlk` on any file (`ld` is `.chubby/`, if served): `done` is
/// called at once, or by a waiting thread later. `caller.pid` is the
/// requesting thread (whose signals a wait watches).
pub(crate) fn setlk(
    ld: Option<&LockDir>,
    cx: &Ctx,
    caller: &Caller,
    r: LockRequest,
    done: Done<()>,
) {
    let via = match lock_via(ld, r.fh) {
        Ok(v) => v,
        Err(e) => return done(Err(e)),
    };
    let mode = match mode_of(r.typ) {
        Ok(m) => m,
        Err(e) => return done(Err(e)),
    };
    // The FUSE header names the calling thread; `r.pid` its process.
    let tid = caller.pid;
    log::trace!(
        "setlk fh {} owner {:x} type {} thread {tid} process {}",
        r.fh,
        r.owner,
        r.typ,
        r.pid
    );
    match via {
        Via::Local => {
            let Some(mode) = mode else {
                cx.local_locks.unlock(r.ino, r.owner);
                return done(Ok(()));
            };
            let held = super::local::Held {
                mode,
                pid: r.pid,
                fh: r.fh,
            };
            match cx.local_locks.try_lock(r.ino, r.owner, held) {
                Err(Errno::EAGAIN) if r.sleep => {}
                res => return done(res),
            }
            let locks = cx.local_locks.clone();
            let spawned = std::thread::Builder::new()
                .name("lock-wait".into())
                .spawn(move || {
                    done(locks.lock_wait(r.ino, r.owner, held, &|| interrupt::should_abandon(tid)))
                });
            if let Err(e) = spawned {
                log::error!("cannot start a lock waiter: {e}");
            }
        }
        Via::Service(ld, handle, creds, path) => {
            let what = format!("lock /.chubby{path}");
            let Some(mode) = mode else {
                ld.owners.lock().remove(&r.owner);
                return match ld.svc.unlock(r.owner, Target::Handle(handle)) {
                    Ok(_) | Err(chubby::Error::NotFound(_)) => done(Ok(())),
                    Err(e) => done(Err(errno(&what, &e))),
                };
            };
            ld.note_user(r.fh, r.pid);
            let info = OwnerInfo {
                fh: r.fh,
                pid: r.pid,
            };
            match ld
                .svc
                .try_lock(&creds, r.owner, Target::Handle(handle), mode)
            {
                Ok(_) => {
                    ld.owners.lock().insert(r.owner, info);
                    return done(Ok(()));
                }
                Err(chubby::Error::WouldBlock) if r.sleep => {}
                Err(chubby::Error::WouldBlock) => return done(Err(Errno::EAGAIN)),
                Err(e) => return done(Err(errno(&what, &e))),
            }
            let svc = ld.svc.clone();
            let owners = ld.owners.clone();
            let spawned = std::thread::Builder::new()
                .name("chubby-lock-wait".into())
                .spawn(move || {
                    let res =
                        svc.lock_wait(&creds, r.owner, Target::Handle(handle), mode, None, &|| {
                            interrupt::should_abandon(tid)
                        });
                    match res {
                        Ok(_) => {
                            owners.lock().insert(r.owner, info);
                            done(Ok(()))
                        }
                        Err(chubby::Error::Interrupted) => {
                            log::info!("{what}: pid {tid} interrupted while waiting");
                            done(Err(Errno::EINTR))
                        }
                        Err(e) => done(Err(errno(&what, &e))),
                    }
                });
            if let Err(e) = spawned {
                log::error!("cannot start a lock waiter: {e}");
            }
        }
    }
}

/// FUSE `getlk` on any file: a lock that would block `r`, or F_UNLCK.
pub(crate) fn getlk(ld: Option<&LockDir>, cx: &Ctx, r: LockRequest) -> FsResult<LockReply> {
    let mode = mode_of(r.typ)?.ok_or(Errno::EINVAL)?;
    let free = LockReply {
        start: r.start,
        end: r.end,
        typ: libc::F_UNLCK,
        pid: 0,
    };
    let conflict = |mode: LockMode, pid: u32| LockReply {
        start: 0,
        end: OFFSET_MAX,
        typ: typ_of(mode),
        pid,
    };
    match lock_via(ld, r.fh)? {
        Via::Local => Ok(cx
            .local_locks
            .conflict(r.ino, r.owner, mode)
            .map_or(free, |h| conflict(h.mode, h.pid))),
        Via::Service(ld, handle, _, path) => {
            let holders = ld
                .svc
                .holders(Target::Handle(handle))
                .map_err(|e| errno(&format!("getlk /.chubby{path}"), &e))?;
            let owners = ld.owners.lock();
            Ok(holders
                .iter()
                .find(|h| {
                    h.owner != r.owner
                        && (mode == LockMode::Exclusive || h.mode == LockMode::Exclusive)
                })
                .map_or(free, |h| {
                    conflict(h.mode, owners.get(&h.owner).map_or(0, |o| o.pid))
                }))
        }
    }
}

impl LockDir {
    /// Remembers that process `pid` uses the description behind `fh`.
    fn note_user(&self, fh: u64, pid: u32) {
        let Some(r) = ProcRef::of(pid) else { return };
        let _ = self.handle_file(fh, |f| {
            if !f.refs.contains(&r) {
                f.refs.retain(ProcRef::alive);
                f.refs.push(r);
            }
            Ok(())
        });
    }

    /// The sequencer of the lock on cell node `path` (inode `ino`) that the
    /// calling process holds: through a description it has open (its own or
    /// inherited, matched with kcmp(2)), or by an fcntl lock of its own.
    pub(crate) fn caller_sequencer(
        &self,
        caller: &Caller,
        path: &str,
        ino: u64,
    ) -> FsResult<Option<Sequencer>> {
        let ld = self;
        let holders = ld
            .svc
            .holders(Target::Path(path))
            .map_err(|e| errno(&format!("sequencer of /.chubby{path}"), &e))?;
        if holders.is_empty() {
            return Ok(None);
        }
        let me = interrupt::tgid_of(caller.pid).unwrap_or(caller.pid);
        let my_fds = interrupt::fds_on(me, ino);
        for h in holders {
            let Some(info) = ld.owners.lock().get(&h.owner).copied() else {
                continue; // not taken through the mount (the engine's)
            };
            let mine = info.pid == me || {
                let refs = self
                    .handle_file(info.fh, |f| Ok(f.refs.clone()))
                    .unwrap_or_default();
                !my_fds.is_empty()
                    && refs.iter().filter(|r| r.alive()).any(|r| {
                        interrupt::fds_on(r.pid, ino).iter().any(|&theirs| {
                            my_fds.iter().any(|&ours| {
                                interrupt::same_description(me, ours, r.pid, theirs) == Some(true)
                            })
                        })
                    })
            };
            if mine {
                return Ok(ld.svc.sequencer(h.owner, Target::Path(path)));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_types() {
        assert_eq!(mode_of(libc::F_RDLCK), Ok(Some(LockMode::Shared)));
        assert_eq!(mode_of(libc::F_WRLCK), Ok(Some(LockMode::Exclusive)));
        assert_eq!(mode_of(libc::F_UNLCK), Ok(None));
        assert_eq!(mode_of(99), Err(Errno::EINVAL));
        assert_eq!(typ_of(LockMode::Exclusive), libc::F_WRLCK);
    }
}
