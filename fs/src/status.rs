//! `.bigtable/`: the one place that owns the list of status files and what
//! each one says. A new status file is a variant of [`StatusFile`], a name
//! in [`StatusFile::name`] and its text in [`StatusFile::content`]; lookup,
//! listing and attributes follow from [`StatusFile::ALL`].

use crate::options::{FsOptions, Stats};
use crate::store::Store;
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// The files of `.bigtable/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusFile {
    /// Engine status lines.
    Status,
    /// One line per table: name, families, tablets.
    Tables,
    /// One line per tablet of every table.
    Tablets,
    /// Counters of filesystem operations.
    Stats,
    /// The options this mount runs with.
    Mount,
    /// One line per tablet server: state, tablets, memtable bytes, requests.
    Servers,
    /// The active and standby masters, pending assignments, recent events.
    Master,
    /// Root writes operator commands here (`kill`, `move`).
    Control,
    /// One line per deleted table in the trash (docs/trash.md).
    Trash,
    /// Copies to and from backup stores, and their backups (docs/backups.md).
    Backups,
}

impl StatusFile {
    /// Every file, in listing order.
    pub const ALL: [StatusFile; 10] = [
        StatusFile::Status,
        StatusFile::Tables,
        StatusFile::Tablets,
        StatusFile::Stats,
        StatusFile::Mount,
        StatusFile::Servers,
        StatusFile::Master,
        StatusFile::Control,
        StatusFile::Trash,
        StatusFile::Backups,
    ];
    /// The file's name under `.bigtable/`.
    pub fn name(self) -> &'static str {
        match self {
            StatusFile::Status => "status",
            StatusFile::Tables => "tables",
            StatusFile::Tablets => "tablets",
            StatusFile::Stats => "stats",
            StatusFile::Mount => "mount",
            StatusFile::Servers => "servers",
            StatusFile::Master => "master",
            StatusFile::Control => "control",
            StatusFile::Trash => "trash",
            StatusFile::Backups => "backups",
        }
    }
    /// The file called `name`, if any.
    pub fn from_name(name: &[u8]) -> Option<StatusFile> {
        StatusFile::ALL
            .into_iter()
            .find(|f| f.name().as_bytes() == name)
    }
}

/// What reading `.bigtable/control` shows.
pub const CONTROL_USAGE: &str = "# write one command a line (root only):\n\
# kill <server>                  expire a tablet server's lock session\n\
# kill-master                    expire the active master's session\n\
# move <table> <row> <server>    move the tablet holding <row> to <server>\n\
# split <table> <row>            split the tablet holding <row> at <row>\n\
# delete <table>                 delete a whole table (into the trash)\n\
# undelete <id> [<name>]         bring table <id> of .bigtable/trash back\n\
# purge <id>                     delete table <id> of .bigtable/trash for good\n\
# gc                             run a garbage collection now\n\
# clone <table> <snap> <new>     make table <new> from snapshot <snap> of <table>\n\
# restore <table> <snap>         make <table> what its snapshot <snap> holds\n\
# backup <table> <snap> <store>  copy snapshot <snap> to backup store <store>\n\
# copy-backup <store> <table> <name> <to store>   copy a backup between stores\n\
# restore-backup <store> <table> <name> <new>     make table <new> from a backup\n\
# delete-backup <store> <table> <name>            delete a backup (.bigtable/backups)\n";

impl StatusFile {
    /// Whether the file takes writes (only `control`, and only from root).
    pub fn writable(self) -> bool {
        self == StatusFile::Control
    }
}

/// What the status files report from.
pub struct StatusSources<'a> {
    /// Who reads the file (None: the daemon itself, which sees everything).
    pub reader: Option<&'a crate::perms::Caller>,
    pub store: &'a dyn Store,
    pub stats: &'a Stats,
    /// The calls made to the store, per method.
    pub store_calls: &'a crate::store_calls::StoreCalls,
    pub opts: &'a FsOptions,
    pub invalidations: u64,
    /// Cells replayed for inotify after other daemons' writes, and rows
    /// dropped for a full queue (`kernel/replay.rs`).
    pub replays: (u64, u64),
    pub inodes: usize,
    pub open_handles: usize,
    pub pending_dirs: usize,
    /// Bytes of whole table listings kept (`listing/kept.rs`).
    pub kept_listing_bytes: usize,
    /// Writers' opens that waited for cached readers, and that gave up.
    pub reader_waits: (u64, u64),
    /// Opens that handed the kernel a cell's pages.
    pub page_stores: u64,
    /// Readers' opens answered on the kernel's pages alone, without a call.
    pub page_reopens: u64,
    /// Bytes held by uncommitted write buffers, and writes refused for them.
    pub write_buffers: (u64, u64),
    /// The lock service's backend and session (`lock_*` lines).
    pub lock: Vec<String>,
}

impl StatusFile {
    /// The current text of this status file.
    pub fn content(self, s: &StatusSources<'_>) -> Vec<u8> {
        let mut out = String::new();
        match self {
            StatusFile::Status => {
                // Which way requests reach the daemon: FUSE over io_uring is
                // several times faster and needs the kernel's consent.
                let transport = if fuser::io_uring_running() {
                    "io_uring"
                } else {
                    "/dev/fuse"
                };
                let _ = writeln!(out, "fuse_transport={transport}");
                for l in s.store.status() {
                    let _ = writeln!(out, "{l}");
                }
                for l in &s.lock {
                    let _ = writeln!(out, "{l}");
                }
            }
            StatusFile::Tables => {
                let _ = writeln!(out, "# table families tablets owner group mode");
                for t in s.store.list_tables() {
                    let (fams, owner, group, mode) = match s.store.schema(&t) {
                        Ok(s) => (s.families.len(), s.owner, s.group, s.mode),
                        Err(_) => continue,
                    };
                    let tablets = s.store.tablets(&t).map(|v| v.len()).unwrap_or(0);
                    let _ = writeln!(out, "{t} {fams} {tablets} {owner} {group} {mode:04o}");
                }
            }
            StatusFile::Tablets => {
                let _ = writeln!(
                    out,
                    "# table id start end memtable_bytes sstable_bytes sstables server"
                );
                for t in s.store.list_tables() {
                    // A table's row keys are its data: shown only to who may
                    // read the table (others see `?` for each boundary).
                    let may_read = match (s.reader, s.store.schema(&t)) {
                        (None, _) => true,
                        (Some(r), Ok(sc)) => r.may(sc.owner, sc.group, sc.mode, crate::perms::R),
                        (Some(_), Err(_)) => false,
                    };
                    for tab in s.store.tablets(&t).unwrap_or_default() {
                        let key = |k: &[u8]| {
                            if may_read {
                                String::from_utf8_lossy(&crate::names::encode_field(k)).into_owned()
                            } else {
                                "?".to_string()
                            }
                        };
                        let _ = writeln!(
                            out,
                            "{} {} {} {} {} {} {} {}",
                            tab.table,
                            tab.id,
                            key(&tab.start),
                            tab.end.as_deref().map_or("-".to_string(), key),
                            tab.memtable_bytes,
                            tab.sstable_bytes,
                            tab.sstables,
                            tab.server
                        );
                    }
                }
            }
            StatusFile::Stats => {
                let c = s.stats;
                let cpu = cpu_us();
                let rows = [
                    ("lookups", c.lookups.load(Ordering::Relaxed)),
                    ("getattrs", c.getattrs.load(Ordering::Relaxed)),
                    ("reads", c.reads.load(Ordering::Relaxed)),
                    ("read_bytes", c.read_bytes.load(Ordering::Relaxed)),
                    ("writes", c.writes.load(Ordering::Relaxed)),
                    ("write_bytes", c.write_bytes.load(Ordering::Relaxed)),
                    ("commits", c.commits.load(Ordering::Relaxed)),
                    ("batches", c.batches.load(Ordering::Relaxed)),
                    ("batch_rows", c.batch_rows.load(Ordering::Relaxed)),
                    ("scans", c.scans.load(Ordering::Relaxed)),
                    ("readdirs", c.readdirs.load(Ordering::Relaxed)),
                    ("errors", c.errors.load(Ordering::Relaxed)),
                    ("invalidations", s.invalidations),
                    ("replayed_cells", s.replays.0),
                    ("replays_dropped", s.replays.1),
                    ("inodes", s.inodes as u64),
                    ("open_handles", s.open_handles as u64),
                    ("pending_dirs", s.pending_dirs as u64),
                    ("kept_listing_bytes", s.kept_listing_bytes as u64),
                    ("reader_waits", s.reader_waits.0),
                    ("reader_waits_expired", s.reader_waits.1),
                    ("page_stores", s.page_stores),
                    ("page_reopens", s.page_reopens),
                    ("write_buffer_bytes", s.write_buffers.0),
                    ("write_buffer_refusals", s.write_buffers.1),
                    // Scans refused for a filter over its limits.
                    ("filter_limit_hits", engine::filter::limit_hits()),
                    (
                        "fuse_requests",
                        crate::options::FUSE_REQUESTS.load(Ordering::Relaxed),
                    ),
                    (
                        "fuse_forgets",
                        crate::options::FUSE_FORGETS.load(Ordering::Relaxed),
                    ),
                    ("fuse_uring_replies", fuser::requests_over_io_uring()),
                    ("rss_bytes", crate::memory::rss_bytes()),
                    ("malloc_trims", crate::memory::trims()),
                    ("fuse_handling_us", crate::counts::handling_us()),
                    ("cpu_user_us", cpu.0),
                    ("cpu_system_us", cpu.1),
                ];
                for (k, v) in rows {
                    let _ = writeln!(out, "{k}={v}");
                }
                for (op, n) in crate::counts::seen() {
                    let _ = writeln!(out, "fuse_{op}={n}");
                }
                // Store calls per FUSE request: the tablet-server calls
                // (reads, writes, scans) summed, then each method's count.
                let calls = s.store_calls;
                let _ = writeln!(out, "store_tablet_calls={}", calls.tablet_calls());
                for c in crate::store_calls::Call::ALL {
                    let _ = writeln!(out, "store_{}={}", c.name(), calls.get(c));
                }
                // ... and the tablet-server calls each kind of request made.
                for (op, n) in crate::counts::calls_seen() {
                    let _ = writeln!(out, "calls_{op}={n}");
                }
            }
            StatusFile::Mount => out.push_str(&s.opts.mount_status),
            StatusFile::Servers => {
                for l in s.store.servers_report() {
                    let _ = writeln!(out, "{l}");
                }
            }
            StatusFile::Master => {
                for l in s.store.master_report() {
                    let _ = writeln!(out, "{l}");
                }
            }
            StatusFile::Control => {
                out.push_str(CONTROL_USAGE);
            }
            StatusFile::Backups => {
                for l in s.store.backups_report() {
                    let _ = writeln!(out, "{l}");
                }
            }
            StatusFile::Trash => {
                let _ = writeln!(
                    out,
                    "# id name deleted_us owner group mode tablets files bytes"
                );
                for (e, c) in s.store.trash().unwrap_or_default() {
                    let sc = &e.schema;
                    let _ = writeln!(
                        out,
                        "{} {} {} {} {} {:04o} {} {} {}",
                        e.id,
                        e.name,
                        e.deleted_at,
                        sc.owner,
                        sc.group,
                        sc.mode,
                        c.tablets,
                        c.files,
                        c.bytes
                    );
                }
            }
        }
        out.into_bytes()
    }
}

/// FUSE `statfs`: the data directory's space, in 4 KiB blocks.
pub fn statfs(opts: &FsOptions) -> Statfs {
    let mut s = Statfs {
        blocks: 1 << 30,
        bfree: 1 << 30,
        bavail: 1 << 30,
        files: 1 << 40,
        ffree: 1 << 40,
        bsize: 4096,
        namelen: crate::names::NAME_MAX as u32,
        frsize: 4096,
    };
    if let Some(p) = &opts.statfs_path {
        if let Ok(v) = nix::sys::statvfs::statvfs(p.as_path()) {
            let frsize = v.fragment_size().max(1);
            let scale = |n: u64| n.saturating_mul(frsize) / 4096;
            s.blocks = scale(v.blocks());
            s.bfree = scale(v.blocks_free());
            s.bavail = scale(v.blocks_available());
        }
    }
    s
}

/// What `statfs` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// The daemon's CPU time so far, user and system, in microseconds (what a
/// workload cost the daemon: `bigtable-bench fs` takes the difference).
fn cpu_us() -> (u64, u64) {
    use nix::sys::resource::{getrusage, UsageWho};
    let us = |t: nix::sys::time::TimeVal| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec()).unwrap_or(0)
    };
    getrusage(UsageWho::RUSAGE_SELF).map_or((0, 0), |u| (us(u.user_time()), us(u.system_time())))
}
