//! Attributes as pure functions of their inputs: the shape of every
//! `FileAttr` the mount reports, and which nodes the kernel may cache.

use crate::node::{LockNode, Node};
use fuser::{FileAttr, FileType, INodeNo};
use std::time::SystemTime;

/// A table directory's `st_blksize`. glibc's `opendir` sizes the buffer of
/// its `getdents64` calls by it (at most 1 MiB) and the kernel asks for
/// READDIRPLUS replies of that size; every entry of such a reply takes 168
/// bytes even without attributes, so with the 64 KiB of other directories
/// a listing of 10,000 rows took 27 round trips, and with 1 MiB it takes 3.
pub const LISTING_BLKSIZE: u32 = 1 << 20;

/// Every other directory's `st_blksize` (rows, families, the mount's own
/// directories): glibc then takes its smallest `getdents64` buffer, 32 KiB,
/// and the kernel allocates and maps a buffer that size for each READDIR it
/// sends, twice per listing (the entries, then the empty reply that ends
/// them). A row or a family lists a few entries; at 64 KiB the kernel had
/// twice the pages to allocate, map and unmap per READDIR, the daemon's
/// reply buffer missed its allocator's thread cache, and `find` over a
/// table's rows took 8% longer.
pub const DIR_BLKSIZE: u32 = 4096;

/// A file's `st_blksize`: the I/O size `cp` and `cat` use.
pub const FILE_BLKSIZE: u32 = 64 * 1024;

/// The attributes of one inode.
#[allow(clippy::too_many_arguments)]
pub fn make_attr(
    ino: u64,
    kind: FileType,
    perm: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: SystemTime,
) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: mtime,
        mtime,
        ctime: mtime,
        crtime: mtime,
        kind,
        perm: (perm & 0o7777) as u16,
        // Directories say 1: "unknown", so find(1) does not guess subdirectory counts.
        nlink: 1,
        uid,
        gid,
        rdev: 0,
        blksize: match kind {
            FileType::Directory => DIR_BLKSIZE,
            _ => FILE_BLKSIZE,
        },
        flags: 0,
    }
}

/// Whether the kernel must not cache a node at all: versions, time-travel
/// views, scans and status files change without the kernel's inodes
/// being written, and are rarely used, so they are looked up afresh.
pub fn volatile(node: &Node) -> bool {
    matches!(
        node,
        Node::StatusDir
            | Node::Status(_)
            | Node::ScanDir(_)
            | Node::Scan { .. }
            | Node::ChangesDir(_)
            | Node::Changes { .. }
            | Node::AtDir(_)
            | Node::SnapDir(_)
            | Node::VersionsDir(_)
            | Node::VersionsColumn(_)
            | Node::Version { .. }
            | Node::Lock(LockNode::Status)
    ) || node.view().is_some_and(|v| !v.is_now())
}
