//! Every `-o` option, declared once: its name, the value it takes, its
//! default, one line of documentation, how it is set and how it is shown.
//! The parser (`MountConfig::apply`), `.bigtable/mount` and docs/mount.md's
//! option table all come from `OPTIONS`.

use super::values::{dirs, flag, micros, num, path, secs, size, Given};
use super::{MountConfig, S3Options};
use std::time::Duration;
use Initial::{Is, Off, Text};

/// What an option is when it is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initial {
    /// This value, as `.bigtable/mount` shows it.
    Is(&'static str),
    /// Described in words (it depends on the machine or other options).
    Text(&'static str),
    /// Unset: the feature is off.
    Off,
}

/// One `-o` option.
pub struct MountOption {
    pub name: &'static str,
    /// What the value is (`N`, `SIZE`, `S` seconds, `FILE`…); empty for a flag.
    pub arg: &'static str,
    pub default: Initial,
    pub doc: &'static str,
    /// Applies the option to a configuration (its errors are the user's).
    pub set: fn(&mut MountConfig, Given<'_>) -> Result<(), String>,
    /// Its value in effect, for `.bigtable/mount` (None: unset, or another
    /// option turns it off, or it is another spelling of an option shown).
    /// A file's path, never its contents.
    pub show: fn(&MountConfig) -> Option<String>,
}

/// `opt!("name" "ARG", default, "doc", set |cfg, given| …, show |cfg| …)`:
/// the setter's expression is the assignment; it may `return Err(…)`.
macro_rules! opt {
    ($name:literal $arg:literal, $default:expr, $doc:literal,
     set |$c:pat_param, $v:pat_param| $set:expr,
     show |$s:pat_param| $show:expr $(,)?) => {
        MountOption {
            name: $name,
            arg: $arg,
            default: $default,
            doc: $doc,
            set: |$c, $v| {
                $set;
                Ok(())
            },
            show: |$s| $show,
        }
    };
}

/// Generic mount(8)/fstab options that mean nothing here (and any `x-*`).
pub const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "_netdev",
    "nofail",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "async",
    "atime",
    "relatime",
    "norelatime",
    "strictatime",
    "nodiratime",
    "diratime",
    "lazytime",
    "nolazytime",
    "silent",
    "loud",
    "comment",
    "fsname",
    "subtype",
    "default_permissions",
];

/// Generic mount(8)/fstab options that mean nothing here.
pub fn is_ignored(key: &str) -> bool {
    IGNORED.contains(&key) || key.starts_with("x-")
}

/// The option named `key`.
pub fn find(key: &str) -> Option<&'static MountOption> {
    OPTIONS.iter().find(|o| o.name == key)
}

/// `rpc_max_request`, `rpc_max_control` and `rpc_buffer`: at least 1k.
fn rpc_size(v: Given<'_>) -> Result<usize, String> {
    let key = v.key;
    let n = v.size()?;
    if n < 1024 {
        return Err(format!("{key}: at least 1k"));
    }
    usize::try_from(n).map_err(|_| format!("{key}: too large"))
}

/// `rpc_header_timeout` and `rpc_body_timeout`: more than 0.
fn rpc_timeout(v: Given<'_>) -> Result<Duration, String> {
    let t = v.seconds()?;
    if t.is_zero() {
        return Err(format!("{}: must be more than 0", v.key));
    }
    Ok(t)
}

/// A setting of the object store, shown only with `store=s3://…`.
fn s3_show(c: &MountConfig, f: impl Fn(&S3Options) -> Option<String>) -> Option<String> {
    c.s3.as_ref().and_then(f)
}

/// A setting of the chunk layer, shown only when the files go there.
fn gfs_show(c: &MountConfig, f: impl Fn(&gfs::ClusterOptions) -> Option<String>) -> Option<String> {
    let base = || gfs::ClusterOptions::new(c.data_dir.join("master"), Vec::new());
    (!c.local_store && c.s3.is_none() && !c.client_only()).then(|| f(&c.cluster_options(base())))?
}

/// A setting of the lock service on etcd, shown only with `lock=etcd://…`.
fn etcd_show(
    c: &MountConfig,
    f: impl Fn(&super::EtcdLockOptions) -> Option<String>,
) -> Option<String> {
    c.etcd.as_ref().and_then(f)
}

/// Every option, in docs/mount.md's order.
pub static OPTIONS: &[MountOption] = &[
    opt!("allow_other" "", Is("false"),
        "every user may use the mount; permissions are enforced per table and family",
        set |c, _| c.allow_other = true,
        show |c| flag(c.allow_other)),
    opt!("threads" "N", Text("the number of CPUs, at least 2"),
        "FUSE threads reading requests (1 to 1024); a close commits on its FUSE thread while another stays free, else on a commit worker",
        set |c, v| c.threads = Some(v.whole(1, 1024, "")? as usize),
        show |c| num(c.thread_count())),
    opt!("attr_timeout" "S", Is("300"),
        "how long the kernel caches attributes of files, in seconds; the daemon invalidates what it, a gRPC call or another daemon of its cluster changes ([coherence.md](coherence.md); `.chubby/`: at most 1 s)",
        set |c, v| c.attr_timeout = v.seconds()?,
        show |c| secs(c.attr_timeout)),
    opt!("entry_timeout" "S", Is("300"),
        "the same for names of files",
        set |c, v| c.entry_timeout = v.seconds()?,
        show |c| secs(c.entry_timeout)),
    opt!("dir_timeout" "S", Is("300"),
        "the same for table, row and family directories (see \"Caching\")",
        set |c, v| c.dir_timeout = v.seconds()?,
        show |c| secs(c.dir_timeout)),
    opt!("busy_poll" "US", Is("200"),
        "after answering a request, a FUSE thread looks for the next for this many microseconds before it sleeps (0: never; at most 10000): one thread polling `/dev/fuse`, or the io_uring queues' threads, yielding their CPUs meanwhile; see \"Busy polling\" and \"FUSE over io_uring\"",
        set |c, v| c.busy_poll = Duration::from_micros(v.whole(0, 10_000, " microseconds")?),
        show |c| micros(c.busy_poll)),
    opt!("uring" "N", Is("32"),
        "entries per CPU queue for FUSE over io_uring (0: requests come through `/dev/fuse` only; at most 1024). Used when the kernel offers it: Linux 6.14+ with the `fuse` module's `enable_uring` parameter on (`echo Y > /sys/module/fuse/parameters/enable_uring`, as root, before mounting); see \"FUSE over io_uring\"",
        set |c, v| c.uring_depth = v.whole(0, 1024, " entries per queue")? as usize,
        show |c| num(c.uring_depth)),
    opt!("reader_wait" "S", Is("1"),
        "how long opening a cell for writing waits for processes that read it through the page cache to close, in seconds (see \"Page cache\")",
        set |c, v| c.reader_wait = v.seconds()?,
        show |c| secs(c.reader_wait)),
    opt!("opendir" "", Is("false"),
        "let the kernel open directories (by default it lists them without OPENDIR/RELEASEDIR, two requests fewer per directory; see \"Caching\")",
        set |c, _| c.opendir = true,
        show |c| flag(c.opendir)),
    opt!("no_replay" "", Is("false"),
        "with `cluster_listen`, do not replay other daemons' writes through the mount for inotify watchers (each replay opens and closes the changed rows' cells the kernel holds; see [coherence.md](coherence.md))",
        set |c, _| c.no_replay = true,
        show |c| flag(c.no_replay)),
    opt!("commit_workers" "N", Is("32"),
        "threads that run commits at fsync, and at close when all but one FUSE thread are already committing (0 commits on the FUSE thread; at most 1024)",
        set |c, v| c.commit_workers = Some(v.whole(0, 1024, "")? as usize),
        show |c| num(c.commit_workers.unwrap_or(fs::COMMIT_WORKERS))),
    opt!("sync" "", Is("false"),
        "fsync the commit log on every close (else only on fsync)",
        set |c, _| c.sync = true,
        show |c| flag(c.sync)),
    opt!("cluster_listen" "[HOST:]PORT", Off,
        "take other daemons' calls to this daemon's tablet servers and master on this address (the internal RPC; a bare port means loopback); see [internal-rpc.md](internal-rpc.md)",
        set |c, v| c.cluster_listen = Some(v.addr()?),
        show |c| c.cluster_listen.map(|a| a.to_string())),
    opt!("cluster_advertise" "HOST:PORT", Text("`cluster_listen`'s address, which must then name a host"),
        "the address other daemons dial",
        set |c, v| {
            let v = v.need()?;
            match v.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    c.cluster_advertise = Some(v.to_string())
                }
                _ => return Err(format!("cluster_advertise={v}: expected HOST:PORT")),
            }
        },
        show |c| c.cluster_advertise.clone()),
    opt!("cluster_secret_file" "FILE", Off,
        "the cluster's shared secret (at least 16 printable bytes): this or mutual TLS (`cluster_ca`/`cluster_cert`/`cluster_key`) is required off loopback and for daemons sharing an etcd; a daemon alone on loopback makes a secret of its own; see [security.md](security.md)",
        set |c, v| c.cluster_secret_file = Some(v.path()?),
        show |c| path(&c.cluster_secret_file)),
    opt!("cluster_dial_self" "", Is("false"),
        "send even this daemon's own requests through the internal RPC (to measure what the protocol costs)",
        set |c, _| c.cluster_dial_self = true,
        show |c| flag(c.cluster_dial_self)),
    opt!("cluster_trust_loopback" "", Is("false"),
        "serve a loopback `cluster_listen` without a secret or certificates: every local user may call this daemon's tablet servers and master (refused with `allow_other`)",
        set |c, _| c.cluster_trust_loopback = true,
        show |c| flag(c.cluster_trust_loopback)),
    opt!("cluster_ca" "FILE", Off,
        "mutual TLS on the internal RPC (PEM): the cluster's CA; only peers with a certificate of it are served or believed; the files are read again when they change; with them, `cluster_secret_file` may be left out even off loopback. `bigtable-bench certs DIR --names HOST,…` makes a CA and the daemons' certificates",
        set |c, v| c.cluster_ca = Some(v.path()?),
        show |c| path(&c.cluster_ca)),
    opt!("cluster_cert" "FILE", Off,
        "this daemon's certificate on the internal RPC (with `cluster_ca` and `cluster_key`)",
        set |c, v| c.cluster_cert = Some(v.path()?),
        show |c| path(&c.cluster_cert)),
    opt!("cluster_key" "FILE", Off,
        "this daemon's private key on the internal RPC (with `cluster_ca` and `cluster_cert`)",
        set |c, v| c.cluster_key = Some(v.path()?),
        show |c| path(&c.cluster_key)),
    opt!("cluster_replay_cache" "N", Is("1000000"),
        "nonces of admitted internal calls remembered for the 60 s token window, so that a captured call sent again is refused (1000 to 100000000; 1000000 is about 20 MiB at most); when full, new calls are refused with `UNAVAILABLE` until old ones leave the window",
        set |c, v| c.cluster_replay_cache = v.whole(1000, 100_000_000, " nonces")? as usize,
        show |c| num(c.cluster_replay_cache)),
    opt!("rpc_max_request" "SIZE", Is("80m"),
        "largest data request (a write, a batch: `Call` on the internal RPC; `MutateRow(s)`, `CheckAndMutateRow`, `ReadModifyWriteRow` on the public API) either gRPC server takes; a larger one is refused with `RESOURCE_EXHAUSTED` before it is buffered",
        set |c, v| c.rpc_limits.max_request = rpc_size(v)?,
        show |c| size(c.rpc_limits.max_request as u64)),
    opt!("rpc_max_control" "SIZE", Is("4m"),
        "largest request of every other method (control, admin, reads)",
        set |c, v| c.rpc_limits.max_control = rpc_size(v)?,
        show |c| size(c.rpc_limits.max_control as u64)),
    opt!("rpc_buffer" "SIZE", Is("256m"),
        "bytes of requests one gRPC server receives at once, all connections together; a request that would exceed it is refused with `RESOURCE_EXHAUSTED` (retryable) and its bytes freed",
        set |c, v| c.rpc_limits.buffer = rpc_size(v)?,
        show |c| size(c.rpc_limits.buffer as u64)),
    opt!("rpc_max_streams" "N", Is("64"),
        "streams one gRPC connection may have open at once (1 to 10000)",
        set |c, v| c.rpc_limits.max_streams = v.whole(1, 10_000, " streams")? as u32,
        show |c| num(c.rpc_limits.max_streams)),
    opt!("rpc_body_timeout" "S", Is("30"),
        "how long a request's body may take to arrive once its headers have, in seconds; a slower one is refused with `DEADLINE_EXCEEDED`",
        set |c, v| c.rpc_limits.body_timeout = rpc_timeout(v)?,
        show |c| secs(c.rpc_limits.body_timeout)),
    opt!("rpc_max_connections" "N", Is("1024"),
        "connections one gRPC server holds at once (1 to 1000000); one more is closed at once (with TLS, after its handshake, and logged)",
        set |c, v| c.rpc_limits.max_connections = v.whole(1, 1_000_000, " connections")? as usize,
        show |c| num(c.rpc_limits.max_connections)),
    opt!("rpc_header_timeout" "S", Is("10"),
        "how long a new gRPC connection may stay silent before it is closed, in seconds (with TLS, the handshake has its own 10 s)",
        set |c, v| c.rpc_limits.header_timeout = rpc_timeout(v)?,
        show |c| secs(c.rpc_limits.header_timeout)),
    opt!("ro" "", Is("false"),
        "read-only mount",
        set |c, _| c.read_only = true,
        show |c| flag(c.read_only)),
    opt!("rw" "", Text("on"),
        "read-write mount (undoes `ro`)",
        set |c, _| c.read_only = false,
        show |_| None),
    opt!("nosuid" "", Is("true"),
        "ignore set-user-ID and set-group-ID bits",
        set |c, _| c.nosuid = true,
        show |c| flag(c.nosuid)),
    opt!("suid" "", Text("off"),
        "undoes `nosuid`",
        set |c, _| c.nosuid = false,
        show |_| None),
    opt!("nodev" "", Is("true"),
        "no device files",
        set |c, _| c.nodev = true,
        show |c| flag(c.nodev)),
    opt!("dev" "", Text("off"),
        "undoes `nodev`",
        set |c, _| c.nodev = false,
        show |_| None),
    opt!("noexec" "", Is("false"),
        "no program may be run from the mount",
        set |c, _| c.noexec = true,
        show |c| flag(c.noexec)),
    opt!("exec" "", Text("on"),
        "undoes `noexec`",
        set |c, _| c.noexec = false,
        show |_| None),
    opt!("noatime" "", Is("false"),
        "the usual mount flag",
        set |c, _| c.noatime = true,
        show |c| flag(c.noatime)),
    opt!("log" "LEVEL", Is("info"),
        "`error`, `warn`, `info`, `debug`, `trace`, `off`",
        set |c, v| {
            let level = v.need()?;
            c.log_level = level.parse().map_err(|_| {
                format!("log={level}: use error, warn, info, debug, trace or off")
            })?
        },
        show |c| Some(c.log_level.as_str().to_ascii_lowercase())),
    opt!("logfile" "PATH", Text("`/var/log/bigtable-mountd.log`, else `bigtable-mountd.log` in `$XDG_RUNTIME_DIR`, else `/tmp/bigtable-mountd-<uid>/mountd.log` in a directory the daemon makes 0700"),
        "log of a daemonized mountd. The file is made 0600, opened with `O_NOFOLLOW`, and must belong to the daemon's user, in a directory no other user can write (else the daemon refuses to start)",
        set |c, v| c.log_file = Some(v.path()?),
        show |c| path(&c.log_file)),
    opt!("pidfile" "PATH", Off,
        "write the daemon's pid there",
        set |c, v| c.pid_file = Some(v.path()?),
        show |c| path(&c.pid_file)),
    opt!("memtable" "SIZE", Is("64m"),
        "bytes a tablet's memtable holds before it is written out as an SSTable (sizes: `64k`, `16m`, `1g`)",
        set |c, v| c.memtable_bytes = Some(v.size()? as usize),
        show |c| size(c.engine_options().memtable_bytes as u64)),
    opt!("memtable_budget" "SIZE", Is("256m"),
        "bytes all of one tablet server's memtables may hold, frozen ones included; past it the largest are written out early, so that writes spread over many tablets cannot fill the daemon's memory (each of the `tablet_servers` has its own)",
        set |c, v| c.memtable_budget = Some(v.size()?.max(1)),
        show |c| size(c.engine_options().memtable_budget)),
    opt!("log_max_files" "N", Is("16"),
        "old commit-log files a tablet server keeps (each up to 64 MiB); past it the tablets whose writes hold the oldest back are written out, so the log, and a recovery's replay of it, stay bounded (1 to 1000)",
        set |c, v| c.log_max_files = Some(v.whole(1, 1000, "")? as usize),
        show |c| num(c.engine_options().log_max_files as u64)),
    opt!("memtable_max_age" "S", Is("3600"),
        "a memtable whose oldest write is older than this many seconds is written out, so a quiet tablet's writes do not stay only in the log (0: never)",
        set |c, v| c.memtable_max_age = Some(Duration::from_secs(v.whole(0, 30 * 86_400, " seconds")?)),
        show |c| num(c.engine_options().memtable_max_age.as_secs())),
    opt!("split" "SIZE", Is("128m"),
        "a tablet larger than this is split",
        set |c, v| c.split_bytes = Some(v.size()?),
        show |c| size(c.engine_options().split_bytes)),
    opt!("cache" "SIZE", Is("256m"),
        "the block cache of SSTable blocks",
        set |c, v| c.block_cache_bytes = Some(v.size()?),
        show |c| size(c.engine_options().block_cache_bytes)),
    opt!("scan_cache" "SIZE", Is("32m"),
        "the cache of scanned blocks, kept apart so that a scan does not push out the block cache",
        set |c, v| c.scan_cache_bytes = Some(v.size()?),
        show |c| size(c.engine_options().scan_cache_bytes)),
    opt!("max_value" "SIZE", Is("64m"),
        "largest cell value (a larger write fails with EFBIG)",
        set |c, v| c.max_value_size = Some(v.size()? as usize),
        show |c| size(c.engine_options().max_value_size as u64)),
    opt!("chubby_nodes" "N", Is("10000"),
        "nodes each user but root may own in `.chubby/` (the embedded cell); a create past it fails with EDQUOT ([lock-directory.md](lock-directory.md))",
        set |c, v| c.chubby_quota.0 = v.whole(0, u64::MAX, "")?,
        show |c| num(c.chubby_quota.0)),
    opt!("chubby_bytes" "SIZE", Is("16m"),
        "bytes of file contents each user but root may own there; a write past it fails with EDQUOT",
        set |c, v| c.chubby_quota.1 = v.size()?,
        show |c| size(c.chubby_quota.1)),
    opt!("filter_max_cells" "N", Is("262144"),
        "cells one row's filter evaluation may add (every cell an `interleave` outputs, every label added; 1 to 1073741824) before the scan fails with E2BIG",
        set |c, v| c.filter_limits.max_cells = v.whole(1, 1 << 30, "")? as usize,
        show |c| num(c.filter_limits.max_cells)),
    opt!("filter_max_bytes" "SIZE", Is("64m"),
        "bytes of values one row's filter output may copy (a cell output twice copies its value once) before the scan fails with E2BIG",
        set |c, v| c.filter_limits.max_bytes = v.size()?,
        show |c| size(c.filter_limits.max_bytes)),
    opt!("filter_regex_bytes" "SIZE", Is("2m"),
        "compiled size of all the regexes of one filter together, and as much again for their matching caches (one regex at most `1m`); a filter over it is refused with EINVAL",
        set |c, v| c.filter_limits.regex_bytes = v.size()? as usize,
        show |c| size(c.filter_limits.regex_bytes as u64)),
    opt!("mutate_max_line" "SIZE", Is("193m"),
        "longest `.mutate` line, even one not yet ended; the write that passes it fails with EFBIG (the default: a 64 MiB value with every byte `%XX`-escaped)",
        set |c, v| c.write_limits.mutate_max_line = v.size()? as usize,
        show |c| size(c.write_limits.mutate_max_line as u64)),
    opt!("mutate_max_group" "SIZE", Is("512m"),
        "`.mutate` text (plus 256 bytes a line) grouped in memory at once: one row's lines, or a whole batch whose rows are not together; more fails with EFBIG (write each row's lines together to stay under it)",
        set |c, v| c.write_limits.mutate_max_group = v.size()? as usize,
        show |c| size(c.write_limits.mutate_max_group as u64)),
    opt!("write_buffer_uid" "SIZE", Is("256m"),
        "bytes one user's open cells (their whole values up to the last byte written) and unfinished `.mutate` lines may hold before they are committed; the write past it fails with EDQUOT",
        set |c, v| c.write_limits.buffer_per_uid = v.size()?,
        show |c| size(c.write_limits.buffer_per_uid)),
    opt!("write_buffer_total" "SIZE", Is("1g"),
        "the same for all users together; ENOSPC",
        set |c, v| c.write_limits.buffer_total = v.size()?,
        show |c| size(c.write_limits.buffer_total)),
    opt!("merge" "SIZE", Is("16m"),
        "the master merges adjacent tablets of a table both smaller than this (0: never, e.g. to keep tablets pre-split with `split <table> <row>` in `.bigtable/control`)",
        set |c, v| c.merge_bytes = Some(v.size()?),
        show |c| size(c.engine_options().merge_bytes)),
    opt!("trash_days" "DAYS", Is("1"),
        "how long a deleted table is kept in `.bigtable/trash` before the master collects it, in days (fractions allowed, up to 3650; 0: no trash, deleting is final), and the removal snapshots that let `rm -r TABLE` be undone; see [trash.md](trash.md)",
        set |c, v| {
            let d: f64 = v.number()?;
            if !(0.0..=3650.0).contains(&d) {
                return Err("trash_days: use 0 to 3650".to_string());
            }
            c.trash_period = Some(Duration::from_secs_f64(d * 86_400.0));
        },
        show |c| num(c.engine_options().trash_period.as_secs_f64() / 86_400.0)),
    opt!("no_balance" "", Is("false"),
        "the master moves no tablet to even out load or counts and splits none for its load (a layout made by hand stays, e.g. a benchmark's); size splits and merges go on",
        set |c, _| c.no_balance = true,
        show |c| flag(c.no_balance)),
    opt!("load_split" "N", Is("2000"),
        "the master splits a tablet whose load (requests a second, plus one for every 4 KiB they move) stays above N for `load_split_after`, at the row that halves it, however small the tablet (0: never; see [cluster.md](cluster.md), \"Load balancing\")",
        set |c, v| c.load_split_rate = Some(v.whole(0, u64::MAX, "")?),
        show |c| num(c.engine_options().load_split_rate)),
    opt!("load_split_after" "S", Is("10"),
        "seconds (1 to 3600) a tablet's load must stay above `load_split` before it is split",
        set |c, v| c.load_split_after = Some(Duration::from_secs(v.whole(1, 3600, " seconds")?)),
        show |c| secs(c.engine_options().load_split_after)),
    opt!("split_cooldown" "S", Is("600"),
        "seconds (1 to 86400) after a split during which the master does not merge its halves back",
        set |c, v| c.split_cooldown = Some(Duration::from_secs(v.whole(1, 86_400, " seconds")?)),
        show |c| secs(c.engine_options().split_cooldown)),
    opt!("compaction_threads" "N", Is("2"),
        "background compaction threads per tablet server (0 counts as 1)",
        set |c, v| c.compaction_threads = Some(v.number()?),
        show |c| num(c.engine_options().background_threads)),
    opt!("tablet_servers" "N", Is("3"),
        "tablet servers the daemon runs (0 to 64; see [cluster.md](cluster.md)); 0: a client-only daemon that runs no server and no master and reaches those of the daemons it shares `lock=etcd://…` with, over the internal RPC ([internal-rpc.md](internal-rpc.md))",
        set |c, v| {
            let n: usize = v.number()?;
            if n > 64 {
                return Err("tablet_servers: use 0 to 64".to_string());
            }
            c.tablet_servers = Some(n)
        },
        show |c| num(c.engine_options().tablet_servers)),
    opt!("store" "cluster|local|s3://BUCKET[/PREFIX]", Is("cluster"),
    "where the engine's files go: the replicated chunk layer, one plain directory (`DATA_DIR/files`), or an S3-compatible object store (see [s3.md](s3.md)); with `lock=etcd://…` and `cluster_listen`, every daemon naming the same prefix and etcd serves one Bigtable, else the daemon takes the prefix over",
    set |c, v| {
        let v = v.need()?;
        c.local_store = false;
        match v {
            "cluster" => c.s3 = None,
            "local" => {
                c.s3 = None;
                c.local_store = true;
            }
            url if url.starts_with("s3://") => {
                objstore::S3Config::from_url(url).map_err(|e| format!("store={e}"))?;
                c.s3_opts().url = url.to_string();
            }
            v => return Err(format!("store={v}: use cluster, local or s3://BUCKET[/PREFIX]")),
        }
    },
    show |c| Some(match &c.s3 {
        Some(s3) => s3.url.clone(),
        None if c.local_store => "local".into(),
        None => "cluster".into(),
    })),
    opt!("s3_endpoint" "URL", Text("AWS"),
        "the object store's endpoint, for stores other than AWS",
        set |c, v| c.s3_opts().endpoint = Some(v.need()?.to_string()),
        show |c| s3_show(c, |o| o.endpoint.clone())),
    opt!("s3_region" "R", Is("us-east-1"),
    "the object store's region",
    set |c, v| c.s3_opts().region = Some(v.need()?.to_string()),
    show |c| s3_show(c, |o| {
        let from_url = objstore::S3Config::from_url(&o.url).ok().map(|s| s.region);
        o.region.clone().or(from_url)
    })),
    opt!("s3_credentials" "FILE", Text("`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`"),
        "keys from an AWS shared-credentials file (`AWS_PROFILE`, else `[default]`)",
        set |c, v| c.s3_opts().credentials = Some(v.path()?),
        show |c| s3_show(c, |o| path(&o.credentials))),
    opt!("s3_timeout" "S", Is("30"),
        "how long a request to the object store is retried before it fails, in whole seconds",
        set |c, v| {
            let secs: u64 = v.need()?.parse().map_err(|_| format!("{}: whole seconds", v.key))?;
            c.s3_opts().timeout = Some(Duration::from_secs(secs.max(1)))
        },
        show |c| s3_show(c, |o| secs(o.timeout.unwrap_or(objstore::DEFAULT_TIMEOUT)))),
    opt!("cache_dir" "DIR", Text("`DATA_DIR/s3-cache`"),
    "where ranges fetched from the object store are cached on disk",
    set |c, v| c.s3_opts().cache_dir = Some(v.path()?),
    show |c| s3_show(c, |o| {
        let dir = o.cache_dir.clone().unwrap_or_else(|| c.data_dir.join("s3-cache"));
        path(&Some(dir))
    })),
    opt!("disk_cache" "SIZE", Is("1g"),
        "how much of the object store is cached on disk (0: no disk cache)",
        set |c, v| c.s3_opts().disk_cache = Some(v.size().map_err(|e| format!("{}: {e}", v.key))?),
        show |c| s3_show(c, |o| size(o.disk_cache.unwrap_or(objstore::DEFAULT_DISK_CACHE)))),
    opt!("log_batch_window" "US|auto", Is("auto"),
    "microseconds a commit waits for more writes to share its commit-log write (0: the next write starts as soon as the previous one is stored; at most 1000000). With `store=s3://…`, where each shared write is one PUT, a window of a few milliseconds makes fewer, larger PUTs at the cost of that much latency; `auto` waits only while others are writing too, at most a quarter of the recent PUT time and 1 ms, until as many writes are queued as the last PUT held (on `store=s3://…`); on a local store or the chunk layer, `auto` makes a synced batch wait for the writers the last batch released (as many as it held plus those that queued during its fsync; at most a quarter of the recent batch time and 200 µs; a lone writer never waits), so that synchronous writers share each fsync instead of taking turns",
    set |c, v| {
        if v.need()? == "auto" {
            c.log_batch_window = Some(Duration::ZERO);
            c.log_batch_window_adaptive = Some(true);
        } else {
            c.log_batch_window = Some(Duration::from_micros(v.whole(0, 1_000_000, " microseconds")?));
            c.log_batch_window_adaptive = Some(false);
        }
    },
    show |c| {
        let o = c.engine_options();
        if o.log_batch_window_adaptive { Some("auto".to_string()) } else { micros(o.log_batch_window) }
    }),
    opt!("log_puts_in_flight" "1|2|auto", Is("auto"),
    "with `store=s3://…`: how many commit-log PUTs (group-commit batches) may be out at once, one per log lane; `auto`: two while a PUT takes 5 ms or more on average (a store far away), else one",
    set |c, v| c.log_puts_in_flight = Some(match v.need()? {
        "auto" => 0,
        _ => v.whole(1, 2, "")? as usize,
    }),
    show |c| Some(match c.engine_options().log_puts_in_flight {
        0 => "auto".to_string(),
        n => n.to_string(),
    })),
    opt!("lock" "embedded|etcd://HOST:PORT[,HOST:PORT…][/PREFIX]", Is("embedded"),
    "the lock service (master election, servers, `.chubby/`): the embedded cell in `DATA_DIR/chubby`, or an etcd cluster under PREFIX (default `/bigtable-fs`); see [etcd.md](etcd.md)",
    set |c, v| match v.need()? {
        "embedded" => c.etcd = None,
        url if url.starts_with("etcd://") => {
            chubby::EtcdOptions::from_url(url).map_err(|e| format!("lock={e}"))?;
            c.etcd_opts().url = url.to_string();
        }
        v => return Err(format!("lock={v}: use embedded or etcd://HOST:PORT[/PREFIX]")),
    },
    show |c| Some(match &c.etcd {
        Some(e) => e.url.clone(),
        None => "embedded".into(),
    })),
    opt!("etcd_ca" "FILE", Off,
        "TLS to etcd: the CA's certificate (PEM)",
        set |c, v| c.etcd_opts().ca = Some(v.path()?),
        show |c| etcd_show(c, |e| path(&e.ca))),
    opt!("etcd_cert" "FILE", Off,
        "TLS to etcd: the client's certificate (PEM; with `etcd_key` and `etcd_ca`)",
        set |c, v| c.etcd_opts().cert = Some(v.path()?),
        show |c| etcd_show(c, |e| path(&e.cert))),
    opt!("etcd_key" "FILE", Off,
        "TLS to etcd: the client's private key (PEM)",
        set |c, v| c.etcd_opts().key = Some(v.path()?),
        show |c| etcd_show(c, |e| path(&e.key))),
    opt!("etcd_user_file" "FILE", Off,
        "etcd user and password, as `user:password` in FILE",
        set |c, v| c.etcd_opts().user_file = Some(v.path()?),
        show |c| etcd_show(c, |e| path(&e.user_file))),
    opt!("etcd_lease" "S", Is("10"),
    "the daemon's session lease on etcd in whole seconds (2 to 3600): how long its locks outlive its loss of etcd",
    set |c, v| c.etcd_opts().lease = Some(Duration::from_secs(v.whole(2, 3600, " seconds")?)),
    show |c| etcd_show(c, |e| {
        let from_url = || chubby::EtcdOptions::from_url(&e.url).ok().map(|o| o.lease_ttl);
        e.lease.or_else(from_url).and_then(secs)
    })),
    opt!("nomap" "", Is("false"),
        "with `store=local`, read SSTables with `pread` instead of mapping them (see \"Memory\": a disk error on a mapped page kills the daemon, where a `pread` fails one read)",
        set |c, _| c.nomap = true,
        show |c| flag(c.nomap)),
    opt!("backup_store" "NAME=s3://BUCKET[/PREFIX]|NAME=/DIR", Text("none"),
    "a store backups are copied to and restored from (repeat it for several): an S3 prefix, reached with the `s3_*` options, or a directory; NAME is what `.bigtable/control` lines and gRPC cluster ids call it (see [backups.md](backups.md))",
    set |c, v| {
        let (name, url) = v.need()?.split_once('=').ok_or("backup_store=NAME=URL")?;
        engine::snapshot::validate_snapshot_name(name).map_err(|e| format!("backup_store: {e}"))?;
        if !url.starts_with("s3://") && !url.starts_with('/') {
            return Err("backup_store=NAME=s3://BUCKET[/PREFIX] or NAME=/DIR".to_string());
        }
        c.backup_stores.retain(|(n, _)| n != name);
        c.backup_stores.push((name.to_string(), url.to_string()));
    },
    show |c| (!c.backup_stores.is_empty()).then(|| {
        c.backup_stores.iter().map(|(n, u)| format!("{n}={u}")).collect::<Vec<_>>().join(" ")
    })),
    opt!("chunkservers" "DIR:DIR:…", Text("`DATA_DIR/chunkserver-0..2`"),
        "chunkserver directories (put them on different disks to survive a disk)",
        set |c, v| {
            c.chunkservers = v.dirs()?;
            if c.chunkservers.is_empty() {
                return Err("chunkservers= needs at least one directory".into());
            }
        },
        show |c| gfs_show(c, |_| dirs(&c.chunkservers))),
    opt!("replication" "N", Text("one per chunkserver directory, at most 3"),
        "replicas per chunk (1 to 16)",
        set |c, v| {
            let n: usize = v.number()?;
            if !(1..=16).contains(&n) {
                return Err("replication must be 1..16".into());
            }
            c.replication = n
        },
        show |c| gfs_show(c, |o| (o.replication > 0).then(|| o.replication.to_string()))),
    opt!("chunk_size" "SIZE", Is("64m"),
        "chunk size (a multiple of 64 KiB)",
        set |c, v| c.chunk_size = Some(v.size()?),
        show |c| gfs_show(c, |o| size(o.chunk_size))),
    opt!("nodirect" "", Is("false"),
        "the chunk layer writes every replica through the page cache (by default two of a chunk's three replicas take SSTable data with `O_DIRECT`, and reads prefer the buffered one; see [chunk-layer.md](chunk-layer.md))",
        set |c, _| c.nodirect = true,
        show |c| flag(c.nodirect)),
    opt!("scrub_rate" "SIZE", Is("4m"),
        "background scrub budget per second (e.g. `8m/s`; 0 turns the background scrub off)",
        set |c, v| c.scrub_rate = Some(v.rate()?),
        show |c| gfs_show(c, |o| size(o.scrub_rate))),
    opt!("scrub_interval" "S", Is("86400"),
        "seconds from the start of one scrub pass to the next",
        set |c, v| c.scrub_interval = Some(v.seconds()?),
        show |c| gfs_show(c, |o| secs(o.scrub_interval))),
    opt!("scrub_idle" "S", Is("1"),
        "seconds without client I/O before the scrub reads",
        set |c, v| c.scrub_idle = Some(v.seconds()?),
        show |c| gfs_show(c, |o| secs(o.scrub_idle))),
    opt!("repair_rate" "SIZE", Is("32m"),
        "re-replication budget per second over all copies (0: no limit)",
        set |c, v| c.repair_rate = Some(v.rate()?),
        show |c| gfs_show(c, |o| size(o.repair_rate))),
    opt!("repair_parallel" "N", Is("4"),
        "chunks re-replicated at once (1 to 64)",
        set |c, v| {
            let n: usize = v.number()?;
            if !(1..=64).contains(&n) {
                return Err("repair_parallel must be 1..64".into());
            }
            c.repair_parallel = Some(n)
        },
        show |c| gfs_show(c, |o| num(o.repair_parallel))),
    opt!("master_mirrors" "DIR:DIR:…", Text("`master/` inside every chunkserver directory"),
        "where copies of the master's log and checkpoints go",
        set |c, v| c.master_mirrors = v.dirs()?,
        show |c| gfs_show(c, |_| dirs(&c.master_mirrors))),
    opt!("instance" "NAME", Is("default"),
        "the gRPC API's instance whose tables are the mount's top level; another instance's table `T` is the table `NAME@T` of the mount. See [clients.md](clients.md)",
        set |c, v| {
            let v = v.need()?;
            grpc::check_instance_id(v).map_err(|e| e.message().to_string())?;
            c.instance = v.to_string()
        },
        show |c| Some(c.instance.clone())),
    opt!("http" "[HOST:]PORT", Off,
        "serve the operator's console there: `/metrics` (Prometheus), `/` (a status page), `/keyviz` (the key visualizer); a bare port means 127.0.0.1, port 0 picks one and logs it. Each viewer sees the row keys of the tables it may read (anonymous viewers: tables others may read; a `grpc_tokens` bearer token: that user's). See [console.md](console.md)",
        set |c, v| c.http = Some(v.addr()?),
        show |c| c.http.map(|a| a.to_string())),
    opt!("grpc" "[HOST:]PORT", Off,
        "also serve Cloud Bigtable's v2 gRPC API there (HTTP/2, plain text unless `grpc_cert`/`grpc_key` are given; a bare port means 127.0.0.1; port 0 picks one and logs it); needs `grpc_tokens` or `grpc_trust_loopback`. See [clients.md](clients.md)",
        set |c, v| c.grpc = Some(v.addr()?),
        show |c| c.grpc.map(|a| a.to_string())),
    opt!("grpc_cert" "FILE", Off,
        "serve the gRPC API over TLS 1.3 with this certificate (PEM, with `grpc_key`), read again when it changes; a client that does not complete the handshake is refused and logged",
        set |c, v| c.grpc_cert = Some(v.path()?),
        show |c| path(&c.grpc_cert)),
    opt!("grpc_key" "FILE", Off,
        "the private key of `grpc_cert` (PEM)",
        set |c, v| c.grpc_key = Some(v.path()?),
        show |c| path(&c.grpc_key)),
    opt!("grpc_client_ca" "FILE", Off,
        "with `grpc_cert`: clients may present a certificate of this CA (verified; a handler sees it with tonic's `Request::peer_certs`); clients without one are still served",
        set |c, v| c.grpc_client_ca = Some(v.path()?),
        show |c| path(&c.grpc_client_ca)),
    opt!("grpc_tokens" "FILE", Off,
        "bearer tokens of the gRPC API's (and the console's) callers: one `TOKEN UID:GID[,GID…]` or `TOKEN USER` a line; refused unless FILE is the daemon user's, mode 0600 or 0400, not a symlink. Each token's user has the rights it has in the mount. See [clients.md](clients.md)",
        set |c, v| c.grpc_tokens = Some(v.path()?),
        show |c| path(&c.grpc_tokens)),
    opt!("http_cert" "FILE", Off,
        "serve the console over TLS only, with this PEM certificate chain (with `http_key`: both or neither). See [console.md](console.md)",
        set |c, v| c.http_cert = Some(v.path()?),
        show |c| path(&c.http_cert)),
    opt!("http_key" "FILE", Off,
        "the console's private key (PEM; refused unless only its owner may read it)",
        set |c, v| c.http_key = Some(v.path()?),
        show |c| path(&c.http_key)),
    opt!("http_hosts" "NAME[:NAME…]", Off,
        "host names the console answers to besides IP addresses and `localhost`; other `Host:` headers get 421 (DNS rebinding). See [console.md](console.md)",
        set |c, v| {
            c.http_hosts = v
                .need()?
                .split(':')
                .filter(|h| !h.is_empty())
                .map(str::to_string)
                .collect()
        },
        show |c| (!c.http_hosts.is_empty()).then(|| c.http_hosts.join(":"))),
    opt!("grpc_trust_loopback" "", Is("false"),
        "a gRPC caller on a loopback address that sends no token acts as the daemon's user (what emulator-mode clients need); refused with `allow_other`",
        set |c, _| c.grpc_trust_loopback = true,
        show |c| flag(c.grpc_trust_loopback)),
];
