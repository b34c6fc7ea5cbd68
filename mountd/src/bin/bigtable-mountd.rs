//! bigtable-mountd: mounts a Bigtable data directory as a filesystem.
//!
//! `bigtable-mountd DATA_DIR MOUNTPOINT [-f] [-o opts]` daemonizes and
//! returns once the mount is live (`-f` stays in the foreground). `umount`,
//! SIGTERM, SIGINT and SIGHUP stop it cleanly. Options: see `mountopts`.

use engine::Bigtable;
use fs::{Fs, FsOptions, FuseFs};
use mountd::daemon::{daemonize, default_log_file, init_logging, write_pid_file, Ready};
use mountd::fusemount;
use mountd::mountopts::{parse_daemon_args, MountConfig};
use nix::sys::signal::{SigSet, Signal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: bigtable-mountd DATA_DIR MOUNTPOINT [-f] [-o option[,option...]]

  -f            stay in the foreground (log to stderr)
  -o options    allow_other, threads=N, attr_timeout=S, entry_timeout=S, dir_timeout=S, reader_wait=S,
                busy_poll=US, uring=N, log=LEVEL, logfile=PATH, pidfile=PATH, sync, ro,
                memtable=SIZE, split=SIZE, cache=SIZE, scan_cache=SIZE,
                max_value=SIZE, compaction_threads=N, grpc=[HOST:]PORT,
                http=[HOST:]PORT (see docs/mount.md)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    let mut cfg = match parse_daemon_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bigtable-mountd: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = absolute_paths(&mut cfg) {
        eprintln!("bigtable-mountd: {e}");
        std::process::exit(1);
    }
    let mut ready = if cfg.foreground {
        Ready::none()
    } else {
        let log = cfg.log_file.clone().unwrap_or_else(default_log_file);
        match daemonize(&log) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("bigtable-mountd: {e}");
                std::process::exit(1);
            }
        }
    };
    init_logging(cfg.log_level);
    // Block the stop signals in every thread; one thread waits for them.
    let mut stop = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        stop.add(s);
    }
    if let Err(e) = stop.thread_block() {
        log::warn!("cannot block signals: {e}");
    }
    match run(&cfg, &mut ready, stop) {
        Ok(()) => log::info!("stopped"),
        Err(e) => {
            log::error!("{e}");
            ready.fail(&e);
            if cfg.foreground {
                eprintln!("bigtable-mountd: {e}");
            }
            std::process::exit(1);
        }
    }
}

/// Makes every path absolute: the daemon changes to `/` when it detaches.
fn absolute_paths(cfg: &mut MountConfig) -> Result<(), String> {
    if !cfg.mountpoint.is_dir() {
        return Err(format!(
            "mountpoint {} is not a directory",
            cfg.mountpoint.display()
        ));
    }
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("data directory {}: {e}", cfg.data_dir.display()))?;
    let canon =
        |p: &std::path::Path| std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()));
    cfg.mountpoint = canon(&cfg.mountpoint)?;
    cfg.data_dir = canon(&cfg.data_dir)?;
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    for p in [&mut cfg.log_file, &mut cfg.pid_file].into_iter().flatten() {
        if p.is_relative() {
            *p = cwd.join(&*p);
        }
    }
    Ok(())
}

fn run(cfg: &MountConfig, ready: &mut Ready, stop: SigSet) -> Result<(), String> {
    // A secret others can read may already be out: refuse it, as ssh does.
    for (option, path) in cfg.private_files() {
        mountd::private::private_file(option, &path)?;
    }
    if let Some(p) = &cfg.pid_file {
        write_pid_file(p)?;
    }
    // DATA_DIR holds the engine's files (the chunk cluster's master and
    // chunkservers, or with store=local one plain directory) and, in
    // DATA_DIR/chubby, the lock service cell the engine coordinates through.
    // The cell makes its directory itself, durably (its entry fsynced).
    let cell_dir = cfg.data_dir.join("chubby");
    // A new cell's root is world-writable and sticky, like /tmp: every user
    // of the mount may make locks there and remove only their own.
    let cell_opts = chubby::CellOptions {
        root_mode: 0o1777,
        quota_nodes: cfg.chubby_quota.0,
        quota_bytes: cfg.chubby_quota.1,
        ..chubby::CellOptions::default()
    };
    // The cell locks the data directory against a second daemon: it is
    // opened first, so that nothing else of the directory (the chunk
    // cluster's master starts a new log and prunes the old one) is touched
    // while a daemon unmounted a moment ago still closes the store.
    let local_cell = open_cell(&cell_dir, cell_opts.clone())?;
    // With lock=etcd the engine and `.chubby/` use the cell on etcd; the
    // embedded one stays open only as the data directory's lock.
    let cell: Arc<dyn chubby::LockService> = match cfg.etcd_config()? {
        Some(mut e) => {
            e.root_mode = cell_opts.root_mode;
            chubby::EtcdCell::open(e.clone())
                .map_err(|err| format!("lock service on etcd {}: {err}", e.endpoints.join(",")))?
        }
        None => local_cell.clone(),
    };
    let files = cfg.file_store()?;
    let backup_stores = cfg.backup_file_stores()?;
    // A close commits on the FUSE thread that read it while another thread
    // stays free; but where a commit is a request to a remote store (a PUT
    // of milliseconds), that would stall every request queued behind it on
    // that thread (with FUSE over io_uring, a whole CPU's queue), so there
    // every commit goes to a worker.
    let inline_commits = if files.durable_appends() {
        0
    } else {
        cfg.thread_count().saturating_sub(1)
    };
    engine::filter::set_limits(cfg.filter_limits);
    let mut opts = cfg.engine_options();
    // The internal RPC listens before the engine starts: the other daemons'
    // master may load tablets onto this daemon's servers as soon as they
    // register.
    let rpc = cfg.cluster()?;
    cfg.check_grpc_auth()?;
    let tokens = mountd::access::tokens(cfg)?;
    let node = match &rpc {
        Some(rpc) => {
            let secret = match &rpc.secret_file {
                Some(f) => Some(grpc::internal::Secret::from_file(f)?),
                None if rpc.own_secret => Some(grpc::internal::Secret::random()),
                None => None,
            };
            let config = grpc::internal::Config {
                secret,
                limits: cfg.rpc_limits.clone(),
                advertise: rpc.advertise.clone(),
                tls: match &rpc.tls {
                    Some(files) => Some(grpc::Tls::load(files.clone(), true)?),
                    None => None,
                },
                replay_cache: rpc.replay_cache,
            };
            let node =
                grpc::internal::Node::start_with(rpc.listen, config).map_err(|e| e.to_string())?;
            opts.advertise = Some(
                rpc.advertise
                    .clone()
                    .unwrap_or_else(|| node.addr.to_string()),
            );
            Some((node, rpc.dial_self))
        }
        None => None,
    };
    let max_value = opts.max_value_size;
    // On etcd, a daemon killed a moment ago may still hold the master lock
    // until its lease ends and the lock-delay passes: wait that long.
    let master_wait = cfg
        .etcd_config()?
        .map(|e| e.lease_ttl + e.max_lock_delay + std::time::Duration::from_secs(5));
    let bt = open_engine(
        files,
        cell.clone(),
        opts,
        master_wait,
        node.as_ref().map(|(n, dial_self)| (n, *dial_self)),
    )?;
    for (name, store) in backup_stores {
        bt.add_backup_store(&name, store)
            .map_err(|e| format!("backup_store={name}: {e}"))?;
    }
    let fs_opts = FsOptions {
        attr_timeout: cfg.attr_timeout,
        entry_timeout: cfg.entry_timeout,
        dir_timeout: cfg.dir_timeout,
        reader_wait: cfg.reader_wait,
        sync_writes: cfg.sync,
        max_value_size: max_value,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        statfs_path: Some(cfg.data_dir.clone()),
        mount_status: cfg.status(),
        // A batch larger than memory waits in an unlinked file beside the data.
        spool_dir: Some(cfg.data_dir.clone()),
        limits: cfg.write_limits,
    };
    // The same cell is `.chubby/` in the mount.
    let fs = Arc::new(Fs::new(Arc::new(bt.clone()), fs_opts).with_lock_service(cell));
    if node.is_some() {
        // Other daemons may write: until the leases say otherwise, their
        // writes may pass this one by (docs/coherence.md).
        fs.writes_reported_until(Instant::now());
    }
    let mut fuse_fs =
        FuseFs::with_commit_workers(fs.clone(), cfg.commit_workers.unwrap_or(fs::COMMIT_WORKERS))
            .with_inline_commits(inline_commits);
    if cfg.opendir {
        fuse_fs = fuse_fs.with_opendir();
    }
    if cfg.uring_depth > 0 {
        fuse_fs = fuse_fs.with_uring();
    }
    let (fuse_fs, busy_poll) = fuse_fs.with_busy_poll(cfg.busy_poll, cfg.thread_count());
    let session = match fusemount::mount(fuse_fs, cfg) {
        Ok((s, device)) => {
            if let Some(d) = device {
                busy_poll.set_device(d);
            }
            s
        }
        Err(e) => {
            let _ = bt.close();
            return Err(format!("mounting {}: {e}", cfg.mountpoint.display()));
        }
    };
    fs.start_notifier(session.notifier());
    // Other daemons' writes invalidate this kernel's caches from now on.
    if let Some((n, _)) = &node {
        if !cfg.no_replay {
            fs.start_replay(cfg.mountpoint.clone());
        }
        n.follow(Arc::new(KernelCaches(fs.clone())));
    }
    // Cloud Bigtable's API on the same engine: each caller has the rights
    // its token's user has in the mount (or, trusting loopback, the
    // daemon's user's); a bare port listens on loopback.
    let grpc = match cfg.grpc {
        Some(addr) => {
            let shared = grpc::Shared {
                bt: bt.clone(),
                owner: nix::unistd::getuid().as_raw(),
                group: nix::unistd::getgid().as_raw(),
                changes: Some(Arc::new(KernelCaches(fs.clone()))),
                instance: cfg.instance.clone(),
                auth: mountd::access::grpc_auth(cfg, &tokens),
            };
            let tls = match cfg.grpc_tls()? {
                Some(files) => Some(grpc::Tls::load(files, false)?),
                None => None,
            };
            match grpc::start_with(shared, addr, &cfg.rpc_limits, tls) {
                Ok(r) => Some(r),
                Err(e) => {
                    let _ = fusemount::unmount(cfg);
                    let _ = bt.close();
                    return Err(e.to_string());
                }
            }
        }
        None => None,
    };
    // The console shows row keys: off unless asked for, loopback for a bare port.
    let console = match cfg.http {
        Some(addr) => {
            let src = console::Sources {
                fs: fs.clone(),
                bt: bt.clone(),
                tokens: tokens.clone(),
                hosts: cfg.http_hosts.clone(),
            };
            let tls = match (&cfg.http_cert, &cfg.http_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                (None, None) => None,
                _ => return Err("http_cert= and http_key= go together".into()),
            };
            match console::Console::start(src, addr, tls) {
                Ok(c) => Some(c),
                Err(e) => {
                    if let Some(g) = grpc {
                        g.stop();
                    }
                    let _ = fusemount::unmount(cfg);
                    let _ = bt.close();
                    return Err(e.to_string());
                }
            }
        }
        None => None,
    };
    let ended = Arc::new(AtomicBool::new(false));
    {
        let cfg = cfg.clone();
        let bt = bt.clone();
        let ended = ended.clone();
        std::thread::Builder::new()
            .name("bt-signals".into())
            .spawn(move || on_stop_signal(stop, &cfg, &bt, &ended))
            .map_err(|e| format!("signal thread: {e}"))?;
    }
    log::info!(
        "mounted {} on {} ({} FUSE threads)",
        cfg.data_dir.display(),
        cfg.mountpoint.display(),
        cfg.thread_count()
    );
    ready.ready();
    if let Err(e) = session.run() {
        log::error!("FUSE session ended with an error: {e}");
    }
    ended.store(true, Ordering::SeqCst);
    if let Some(g) = grpc {
        g.stop();
    }
    if let Some(c) = console {
        c.stop();
    }
    log::info!("unmounted {}; closing the store", cfg.mountpoint.display());
    let closed = bt.close().map_err(|e| format!("closing the store: {e}"));
    if let Some((n, _)) = node {
        n.stop();
    }
    closed
}

/// How long a new daemon waits for the one before it to let go of the
/// data directory: `umount` returns when the kernel lets go of the mount,
/// while that daemon may still be closing the store.
const HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Opens the lock service cell, which locks the data directory against a
/// second daemon; waits (up to [`HOLDER_WAIT`]) for a daemon that is
/// closing it, so that `umount` then `mount` at once works.
fn open_cell(
    dir: &std::path::Path,
    opts: chubby::CellOptions,
) -> Result<Arc<chubby::LocalCell>, String> {
    let deadline = std::time::Instant::now() + HOLDER_WAIT;
    let mut said = false;
    loop {
        match chubby::LocalCell::open(dir, opts.clone()) {
            Ok(c) => return Ok(c),
            Err(chubby::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < deadline =>
            {
                if !said {
                    log::info!(
                        "{} is held by another daemon (one unmounted a moment ago is \
                         still closing the store): waiting up to {HOLDER_WAIT:?}",
                        dir.display()
                    );
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(chubby::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::WouldBlock =>
            {
                return Err(format!(
                    "{} is in use by another bigtable-mountd, which still holds it after \
                     {HOLDER_WAIT:?} (is the same data directory mounted elsewhere?)",
                    dir.display()
                ))
            }
            Err(e) => return Err(format!("lock service in {}: {e}", dir.display())),
        }
    }
}

/// Opens the engine on the lock service; while another master holds the
/// master lock, tries again for up to `master_wait` (none: fails at once).
/// With `node`, the engine answers the internal RPC from the start (and,
/// with its flag, sends its own requests through it too).
fn open_engine(
    files: Arc<dyn gfs::FileStore>,
    cell: Arc<dyn chubby::LockService>,
    opts: engine::Options,
    master_wait: Option<std::time::Duration>,
    node: Option<(&grpc::internal::Node, bool)>,
) -> Result<Bigtable, String> {
    let deadline = master_wait.map(|w| std::time::Instant::now() + w);
    let mut said = false;
    loop {
        let opened = match node {
            None => {
                Bigtable::open_with_lock_service(files.clone(), Some(cell.clone()), opts.clone())
            }
            Some((node, dial_self)) => {
                Bigtable::launch(files.clone(), Some(cell.clone()), opts.clone()).and_then(|bt| {
                    node.attach(&bt, dial_self);
                    match bt.wait_ready(std::time::Duration::from_secs(120)) {
                        Ok(()) => Ok(bt),
                        Err(e) => {
                            let _ = bt.close();
                            Err(e)
                        }
                    }
                })
            }
        };
        match opened {
            Ok(bt) => return Ok(bt),
            Err(e @ engine::Error::Lock(_))
                if e.to_string().contains("another master holds")
                    && deadline.is_some_and(|d| std::time::Instant::now() < d) =>
            {
                if !said {
                    log::info!("{e}: waiting for its session and lock-delay to end");
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Err(e) => return Err(format!("opening the store: {e}")),
        }
    }
}

/// What a gRPC call changed leaves the kernel's caches of the mount: names,
/// attributes, listings and pages the kernel may keep for long.
struct KernelCaches(Arc<Fs>);

impl grpc::Changes for KernelCaches {
    fn rows(&self, table: &str, rows: &[&[u8]]) {
        self.0.rows_changed_elsewhere(table, rows)
    }

    fn rows_from_peer(&self, table: &str, rows: &[&[u8]]) {
        self.0.rows_changed_by_peer(table, rows)
    }

    fn table(&self, table: &str) {
        self.0.table_changed_elsewhere(table)
    }

    fn writes_reported_until(&self, until: Instant) {
        self.0.writes_reported_until(until)
    }
}

/// Waits for SIGTERM/SIGINT/SIGHUP, unmounts, and if the session does not end
/// (files still open on a lazily detached mount) closes the store and exits.
fn on_stop_signal(stop: SigSet, cfg: &MountConfig, bt: &Bigtable, ended: &AtomicBool) {
    let sig = match stop.wait() {
        Ok(s) => s,
        Err(e) => {
            log::warn!("waiting for signals: {e}");
            return;
        }
    };
    log::info!("{sig:?}: unmounting {}", cfg.mountpoint.display());
    if let Err(e) = fusemount::unmount(cfg) {
        log::warn!("unmount: {e}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if ended.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    log::warn!("the mount is still in use; closing the store and exiting");
    if let Err(e) = bt.close() {
        log::error!("closing the store: {e}");
    }
    std::process::exit(0);
}
