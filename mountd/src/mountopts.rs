//! Command lines and `-o` options of `bigtable-mountd` and `mount.bigtable`.
//!
//! ```text
//! bigtable-mountd DATA_DIR MOUNTPOINT [-f] [-o opt[,opt...]]...
//! mount.bigtable  DATA_DIR MOUNTPOINT [-sfnv] [-N ns] [-t type] [-o opt[,opt...]]
//! ```
//!
//! Options (DATA_DIR settings, FUSE settings, and the generic mount options
//! that mount(8) and /etc/fstab pass, which are accepted and ignored where
//! they do not apply):
//!
//! | option | meaning |
//! |---|---|
//! | `allow_other` | let every user use the mount (permissions are enforced per table and family) |
//! | `grpc_tokens=FILE` | bearer tokens of the gRPC API and the console, one `TOKEN UID:GID[,GID…]` or `TOKEN USER` a line; FILE must be the daemon user's and mode 0600 or 0400 (see docs/clients.md) |
//! | `http_cert=FILE`, `http_key=FILE` | serve the console over TLS with this certificate chain and key (PEM; the key readable by its owner only) |
//! | `http_hosts=NAME[:NAME…]` | host names the console answers to besides IP addresses and `localhost` (other `Host:` headers get 421: DNS rebinding) |
//! | `grpc_trust_loopback` | a gRPC caller on a loopback address that sends no token acts as the daemon's user (refused with `allow_other`) |
//! | `threads=N` | FUSE threads reading requests (default: the number of CPUs, at least 2; a close commits on its FUSE thread while another stays free, else on a commit worker) |
//! | `attr_timeout=S`, `entry_timeout=S` | kernel cache lifetimes of files' names and attributes in seconds (default 300; the daemon invalidates what it or a gRPC call changes) |
//! | `dir_timeout=S` | the same for table, row and family directories (default 300; the daemon invalidates what it or a gRPC call changes) |
//! | `busy_poll=US` | microseconds a FUSE thread polls for the next request after a reply before it sleeps (default 50; 0: never): one thread polling `/dev/fuse`, or the io_uring queue threads yielding their CPUs; spares a sequential walk a wake-up per request, at the cost of that much CPU after each reply |
//! | `uring=N` | entries per CPU queue for FUSE over io_uring (default 32; 0: requests come through /dev/fuse only). Used when the kernel offers it: Linux 6.14+ with the `fuse` module's `enable_uring` parameter on. Each queue is served by a thread on its CPU, so a request and its answer stay on the caller's CPU |
//! | `reader_wait=S` | how long opening a cell for writing waits for readers that read it through the page cache to close (default 1) |
//! | `log=LEVEL` | error, warn, info (default), debug, trace, off |
//! | `logfile=PATH` | where a daemonized mountd logs (default /var/log/bigtable-mountd.log, else /tmp) |
//! | `pidfile=PATH` | write the daemon's pid there |
//! | `memtable=SIZE`, `split=SIZE`, `cache=SIZE`, `scan_cache=SIZE`, `max_value=SIZE` | engine sizes (k, m, g suffixes) |
//! | `filter_max_cells=N` | cells one row's filter evaluation may add (interleave outputs, labels) before the read fails with E2BIG (default 262144) |
//! | `filter_max_bytes=SIZE` | bytes of values one row's filter output may copy before the read fails with E2BIG (default 64m) |
//! | `filter_regex_bytes=SIZE` | compiled size of all regexes of one filter together (default 2m; one regex at most 1m); a filter over it is refused with EINVAL |
//! | `mutate_max_line=SIZE` | longest `.mutate` line; a longer one (even unfinished) fails the write with EFBIG (default 193m: a 64 MiB value all `%XX`-escaped) |
//! | `mutate_max_group=SIZE` | `.mutate` text (plus 256 bytes a line) grouped in memory at once: one row's lines, or a whole batch whose rows are not together; more fails with EFBIG (default 512m) |
//! | `write_buffer_uid=SIZE` | bytes one user's open cells and unfinished `.mutate` lines may hold before they are committed; a write past it fails with EDQUOT (default 256m) |
//! | `write_buffer_total=SIZE` | the same for all users together; ENOSPC (default 1g) |
//! | `chubby_nodes=N`, `chubby_bytes=SIZE` | nodes and bytes of file contents each user but root may own in the embedded lock cell (`.chubby/`); more fails with EDQUOT (defaults 10000 and 16m) |
//! | `merge=SIZE` | adjacent tablets both below SIZE are merged (default 16m; 0: never) |
//! | `compaction_threads=N` | background compaction threads per tablet server |
//! | `tablet_servers=N` | tablet servers the daemon runs (default 3); 0: a client-only daemon that runs no server and no master and reaches another daemon's (needs `lock=etcd://…` and `cluster_listen`) |
//! | `commit_workers=N` | threads that run commits at fsync, and at close when all FUSE threads but one are committing (default 32; 0: on the FUSE thread) |
//! | `sync` | fsync the commit log on every close, not only on fsync |
//! | `opendir` | let the kernel open directories (by default it lists them unopened: two requests fewer per directory) |
//! | `nomap` | with `store=local`, read SSTables with `pread` instead of mapping them |
//! | `store=s3://BUCKET[/PREFIX]` | the engine's files in an S3-compatible object store (see docs/s3.md); with `lock=etcd://…` and `cluster_listen`, every daemon naming the same prefix and etcd serves one Bigtable (docs/internal-rpc.md), else the daemon takes the prefix over |
//! | `s3_endpoint=URL`, `s3_region=R` | the store's endpoint (for stores other than AWS) and region (default us-east-1) |
//! | `s3_credentials=FILE` | keys from an AWS shared-credentials file (`AWS_PROFILE`, else `[default]`); without it, from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` |
//! | `log_batch_window=US` | microseconds a commit waits for more writes to share its commit-log write (default 0: the next write starts as soon as the previous one is stored; at most 1000000). With `store=s3://…`, where each shared write is one PUT, a window of a few milliseconds makes fewer, larger PUTs at the cost of that much latency |
//! | `s3_timeout=S` | how long a request to the store is retried before it fails (default 30) |
//! | `cache_dir=DIR`, `disk_cache=SIZE` | where ranges fetched from the store are cached on disk (default DATA_DIR/s3-cache) and how much (default 1g; 0: no disk cache) |
//! | `scrub_rate=SIZE` | background scrub budget per second (default 4m; 0: no background scrub) |
//! | `scrub_interval=S`, `scrub_idle=S` | seconds from one scrub pass to the next (default 86400), and without client I/O before the scrub reads (default 1) |
//! | `repair_rate=SIZE`, `repair_parallel=N` | re-replication budget per second (default 32m; 0: no limit) and chunks copied at once (default 4) |
//! | `master_mirrors=DIR:DIR…` | where copies of the master's log and checkpoints go (default: `master/` in each chunkserver directory) |
//! | `lock=etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` | the lock service (master election, servers, `.chubby/`) on an etcd cluster under PREFIX (default `/bigtable-fs`) instead of the embedded cell in DATA_DIR/chubby (`lock=embedded`, the default); see docs/etcd.md |
//! | `etcd_ca=FILE`, `etcd_cert=FILE`, `etcd_key=FILE` | TLS to etcd: the CA's certificate, and the client's certificate and key (PEM) |
//! | `etcd_user_file=FILE` | etcd user and password, as `user:password` in FILE |
//! | `etcd_lease=S` | the daemon's session lease on etcd in seconds (default 10): how long its locks outlive its loss of etcd |
//! | `cluster_listen=[HOST:]PORT` | take other daemons' calls to this daemon's tablet servers and master on this address (the internal RPC; a bare port means loopback; off by default) |
//! | `cluster_advertise=HOST:PORT` | the address other daemons dial (default: `cluster_listen`'s, which must then name a host) |
//! | `cluster_secret_file=FILE` | the cluster's shared secret (at least 16 printable bytes, in a file only its owner can read); off loopback, this or mutual TLS (`cluster_ca`/`cluster_cert`/`cluster_key`) is required |
//! | `cluster_dial_self` | send even this daemon's own requests through the internal RPC (to measure what the protocol costs) |
//! | `cluster_trust_loopback` | serve a loopback `cluster_listen` without a secret or certificates: every local user may call this daemon's tablet servers and master (refused with `allow_other`; without it, a daemon alone makes a secret of its own and daemons sharing an etcd need one) |
//! | `cluster_ca=FILE`, `cluster_cert=FILE`, `cluster_key=FILE` | mutual TLS on the internal RPC (PEM): the cluster's CA, and this daemon's certificate and key; every peer must present a certificate of that CA; reloaded when the files change |
//! | `grpc_cert=FILE`, `grpc_key=FILE` | TLS on the public gRPC API (PEM); reloaded when the files change |
//! | `grpc_client_ca=FILE` | let gRPC clients present certificates of this CA (with `grpc_cert`) |
//! | `cluster_replay_cache=N` | nonces of admitted internal calls remembered for the token window (60 s) so that a replayed call is refused (default 1000000; when full, new calls are refused as UNAVAILABLE until old ones age out) |
//! | `rpc_max_request=SIZE` | largest data request (writes, batches) either gRPC server takes (default 80m); larger: RESOURCE_EXHAUSTED |
//! | `rpc_max_control=SIZE` | largest control, admin or read request (default 4m) |
//! | `rpc_buffer=SIZE` | bytes of requests a gRPC server receives at once, all clients together (default 256m); beyond: RESOURCE_EXHAUSTED |
//! | `rpc_max_streams=N` | streams one gRPC connection may have open at once (default 64) |
//! | `rpc_max_connections=N` | connections either gRPC server holds at once (default 1024); more are closed at once |
//! | `rpc_header_timeout=S` | how long a new gRPC connection may stay silent before it is closed (default 10) |
//! | `rpc_body_timeout=S` | how long a request's body may take to arrive (default 30); later: DEADLINE_EXCEEDED |
//! | `ro` | read-only mount |
//! | `nosuid`, `nodev`, `noexec`, `noatime` | the usual mount flags |
//! | `rw`, `defaults`, `auto`, `noauto`, `_netdev`, `nofail`, `user`, `users`, `nouser`, `owner`, `group`, `exec`, `suid`, `dev`, `async`, `atime`, `relatime`, `strictatime`, `nodiratime`, `x-*`, `comment=*` | accepted and ignored |

use std::path::PathBuf;
use std::time::Duration;

/// Default nodes each user may own in the embedded lock cell.
pub const DEFAULT_CHUBBY_NODES: u64 = 10_000;
/// Default bytes of file contents each user may own there.
pub const DEFAULT_CHUBBY_BYTES: u64 = 16 << 20;

/// Default kernel cache lifetime of names and attributes, in seconds.
pub const DEFAULT_DIR_TTL_SECS: u64 = 300;

/// Entries per CPU queue for FUSE over io_uring. Each holds a request until
/// it is answered, a waiting lock or event read included; a payload buffer
/// of the largest request is reserved for each, touched only by requests
/// that large.
pub const DEFAULT_URING_DEPTH: usize = 32;

/// The lock service on etcd (`lock=etcd://…` and the `etcd_*` options).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdLockOptions {
    pub url: String,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub user_file: Option<PathBuf>,
    pub lease: Option<Duration>,
}

/// Where and how to reach an object store (`store=s3://…` and the `s3_*`
/// options). Holds no secrets: keys come from a file or the environment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct S3Options {
    pub url: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub credentials: Option<PathBuf>,
    pub timeout: Option<Duration>,
    pub cache_dir: Option<PathBuf>,
    pub disk_cache: Option<u64>,
}

/// Everything a mount is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct MountConfig {
    pub data_dir: PathBuf,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub allow_other: bool,
    pub threads: Option<usize>,
    pub commit_workers: Option<usize>,
    /// Let the kernel send OPENDIR/RELEASEDIR (off: directories are listed unopened).
    pub opendir: bool,
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
    /// Names and attributes of table, row and family directories.
    pub dir_timeout: Duration,
    /// How long a writer's open waits for cached readers to close.
    pub reader_wait: Duration,
    /// How long a FUSE thread polls for the next request after a reply.
    pub busy_poll: Duration,
    /// Entries per CPU queue for FUSE over io_uring (0: off).
    pub uring_depth: usize,
    pub log_level: log::LevelFilter,
    pub log_file: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub memtable_bytes: Option<usize>,
    /// How long a commit waits for more writes to share its log write.
    pub log_batch_window: Option<Duration>,
    pub split_bytes: Option<u64>,
    /// Adjacent tablets both smaller than this are merged (0: never).
    pub merge_bytes: Option<u64>,
    pub block_cache_bytes: Option<u64>,
    pub scan_cache_bytes: Option<u64>,
    pub max_value_size: Option<usize>,
    /// Each user's quota in the embedded cell (`chubby_nodes=`, `chubby_bytes=`).
    pub chubby_quota: (u64, u64),
    /// What one row filter may cost (`filter_*=`).
    pub filter_limits: engine::filter::FilterLimits,
    /// What writers may hold in memory (`mutate_max_*=`, `write_buffer_*=`).
    pub write_limits: fs::WriteLimits,
    pub compaction_threads: Option<usize>,
    pub tablet_servers: Option<usize>,
    pub sync: bool,
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    pub noatime: bool,
    /// Where the engine's files live: the replicated chunk cluster (default)
    /// or one plain directory (`store=local`).
    pub local_store: bool,
    /// `store=s3://…`: the engine's files in an object store.
    pub s3: Option<S3Options>,
    /// With `store=local`: read SSTables with `pread` rather than through
    /// a mapping (`nomap`).
    pub nomap: bool,
    /// Chunkserver directories (`chunkservers=/disk1/cs:/disk2/cs`); default
    /// DATA_DIR/chunkserver-0..2.
    pub chunkservers: Vec<PathBuf>,
    /// Replicas per chunk (0: one per chunkserver, at most 3).
    pub replication: usize,
    pub chunk_size: Option<u64>,
    /// Background scrub and re-replication settings (unset: the cluster's defaults).
    pub scrub_rate: Option<u64>,
    pub scrub_interval: Option<Duration>,
    pub scrub_idle: Option<Duration>,
    pub repair_rate: Option<u64>,
    pub repair_parallel: Option<usize>,
    /// Directories for copies of the master's files (empty: the default).
    pub master_mirrors: Vec<PathBuf>,
    /// Where to serve Cloud Bigtable's gRPC API (`grpc=PORT|HOST:PORT`; off if unset).
    pub grpc: Option<std::net::SocketAddr>,
    /// Where to serve the console: metrics, status page, key visualizer
    /// (`http=PORT|HOST:PORT`; off if unset).
    pub http: Option<std::net::SocketAddr>,
    /// The console's TLS certificate chain and key (`http_cert=`, `http_key=`).
    pub http_cert: Option<PathBuf>,
    /// See `http_cert`.
    pub http_key: Option<PathBuf>,
    /// Host names the console answers to (`http_hosts=`).
    pub http_hosts: Vec<String>,
    /// Bearer tokens of the gRPC API and the console (`grpc_tokens=`).
    pub grpc_tokens: Option<PathBuf>,
    /// Callers on loopback without a token act as the daemon's user
    /// (`grpc_trust_loopback`).
    pub grpc_trust_loopback: bool,
    /// The gRPC API's instance whose tables are the mount's top level
    /// (`instance=NAME`); other instances' tables are `NAME@TABLE`.
    pub instance: String,
    /// `lock=etcd://…`: the lock service on etcd (unset: the embedded cell).
    pub etcd: Option<EtcdLockOptions>,
    /// Where other daemons' internal calls are taken (`cluster_listen=`).
    pub cluster_listen: Option<std::net::SocketAddr>,
    /// What other daemons dial (`cluster_advertise=`).
    pub cluster_advertise: Option<String>,
    /// The cluster's shared secret (`cluster_secret_file=`).
    pub cluster_secret_file: Option<PathBuf>,
    /// This daemon's own requests over the internal RPC too (`cluster_dial_self`).
    pub cluster_dial_self: bool,
    /// A loopback listener with no secret and no certificates
    /// (`cluster_trust_loopback`).
    pub cluster_trust_loopback: bool,
    /// Mutual TLS on the internal RPC (`cluster_ca=`, `cluster_cert=`, `cluster_key=`).
    pub cluster_ca: Option<PathBuf>,
    /// See `cluster_ca`.
    pub cluster_cert: Option<PathBuf>,
    /// See `cluster_ca`.
    pub cluster_key: Option<PathBuf>,
    /// TLS on the public API (`grpc_cert=`, `grpc_key=`, `grpc_client_ca=`).
    pub grpc_cert: Option<PathBuf>,
    /// See `grpc_cert`.
    pub grpc_key: Option<PathBuf>,
    /// See `grpc_cert`.
    pub grpc_client_ca: Option<PathBuf>,
    /// Nonces remembered against replays (`cluster_replay_cache=`).
    pub cluster_replay_cache: usize,
    /// What one client may cost either gRPC server (`rpc_*`).
    pub rpc_limits: grpc::Limits,
    /// The options as given (for `.bigtable/mount`).
    pub given: Vec<String>,
}

/// The internal RPC's settings (`cluster_*` options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRpc {
    /// Where other daemons' calls are taken.
    pub listen: std::net::SocketAddr,
    /// What they dial (None: `listen`, with the port bound).
    pub advertise: Option<String>,
    /// The cluster's shared secret.
    pub secret_file: Option<PathBuf>,
    /// This daemon's own requests go through the RPC too.
    pub dial_self: bool,
    /// Nonces remembered against replays.
    pub replay_cache: usize,
    /// Mutual TLS (None: plain text).
    pub tls: Option<grpc::TlsFiles>,
    /// No secret or certificates were given for a loopback listener of a
    /// daemon alone: it makes a secret of its own, so that only it can
    /// call its servers.
    pub own_secret: bool,
}

impl MountConfig {
    pub fn new(data_dir: PathBuf, mountpoint: PathBuf) -> MountConfig {
        MountConfig {
            data_dir,
            mountpoint,
            foreground: false,
            allow_other: false,
            threads: None,
            commit_workers: None,
            opendir: false,
            // Whatever changes a file (a write or batch through the mount,
            // a gRPC call) invalidates what the kernel holds of it.
            attr_timeout: Duration::from_secs(DEFAULT_DIR_TTL_SECS),
            entry_timeout: Duration::from_secs(DEFAULT_DIR_TTL_SECS),
            // The daemon invalidates what it changes: a walk of a big
            // table must not look up again every row it listed a while ago.
            dir_timeout: Duration::from_secs(DEFAULT_DIR_TTL_SECS),
            reader_wait: Duration::from_secs(1),
            busy_poll: fs::DEFAULT_BUSY_POLL,
            uring_depth: DEFAULT_URING_DEPTH,
            log_level: log::LevelFilter::Info,
            log_file: None,
            pid_file: None,
            memtable_bytes: None,
            log_batch_window: None,
            split_bytes: None,
            merge_bytes: None,
            block_cache_bytes: None,
            scan_cache_bytes: None,
            max_value_size: None,
            filter_limits: engine::filter::FilterLimits::DEFAULT,
            chubby_quota: (DEFAULT_CHUBBY_NODES, DEFAULT_CHUBBY_BYTES),
            write_limits: fs::WriteLimits::default(),
            compaction_threads: None,
            tablet_servers: None,
            sync: false,
            read_only: false,
            nosuid: true,
            nodev: true,
            noexec: false,
            noatime: false,
            local_store: false,
            s3: None,
            nomap: false,
            chunkservers: Vec::new(),
            replication: 0,
            chunk_size: None,
            scrub_rate: None,
            scrub_interval: None,
            scrub_idle: None,
            repair_rate: None,
            repair_parallel: None,
            master_mirrors: Vec::new(),
            grpc: None,
            http: None,
            grpc_tokens: None,
            grpc_trust_loopback: false,
            http_hosts: Vec::new(),
            http_cert: None,
            http_key: None,
            instance: grpc::DEFAULT_INSTANCE.to_string(),
            etcd: None,
            cluster_listen: None,
            cluster_advertise: None,
            cluster_secret_file: None,
            cluster_dial_self: false,
            cluster_trust_loopback: false,
            cluster_ca: None,
            cluster_cert: None,
            cluster_key: None,
            grpc_cert: None,
            grpc_key: None,
            grpc_client_ca: None,
            cluster_replay_cache: grpc::internal::DEFAULT_REPLAY_CACHE,
            rpc_limits: grpc::Limits::default(),
            given: Vec::new(),
        }
    }

    /// `tablet_servers=0`: a daemon that runs no tablet server and no master.
    pub fn client_only(&self) -> bool {
        self.tablet_servers == Some(0)
    }

    /// The gRPC API's authentication options, checked together: a caller
    /// must have some way in, and loopback is no boundary when every local
    /// user may use the mount.
    pub fn check_grpc_auth(&self) -> Result<(), String> {
        if self.grpc_trust_loopback && self.allow_other {
            return Err("grpc_trust_loopback lets any local user act as the daemon's user: it cannot go with allow_other (give grpc_tokens=FILE instead)".into());
        }
        if self.grpc.is_some() && self.grpc_tokens.is_none() && !self.grpc_trust_loopback {
            return Err("grpc= needs grpc_tokens=FILE (bearer tokens of its callers) or grpc_trust_loopback".into());
        }
        Ok(())
    }

    /// The internal RPC's settings, checked together (None when the daemon
    /// takes no calls).
    pub fn cluster(&self) -> Result<Option<ClusterRpc>, String> {
        if self.client_only() && (self.cluster_listen.is_none() || self.etcd.is_none()) {
            return Err("tablet_servers=0 (a client-only daemon) needs lock=etcd://… shared with the daemons that serve, and cluster_listen".into());
        }
        let tls = match (&self.cluster_ca, &self.cluster_cert, &self.cluster_key) {
            (None, None, None) => None,
            (Some(ca), Some(cert), Some(key)) => Some(grpc::TlsFiles {
                ca: Some(ca.clone()),
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => return Err("cluster_ca, cluster_cert and cluster_key go together".into()),
        };
        let Some(listen) = self.cluster_listen else {
            if self.cluster_advertise.is_some()
                || self.cluster_secret_file.is_some()
                || self.cluster_dial_self
                || self.cluster_trust_loopback
                || tls.is_some()
            {
                return Err("cluster_advertise, cluster_secret_file, cluster_ca/cert/key, cluster_dial_self and cluster_trust_loopback need cluster_listen".into());
            }
            return Ok(None);
        };
        if !listen.ip().is_loopback() && self.cluster_secret_file.is_none() && tls.is_none() {
            return Err(format!(
                "cluster_listen={listen} is reachable from other machines: give cluster_ca, cluster_cert and cluster_key (mutual TLS), or cluster_secret_file=FILE, so that only daemons of the cluster are served"
            ));
        }
        let unauthenticated = self.cluster_secret_file.is_none() && tls.is_none();
        if self.cluster_trust_loopback && !unauthenticated {
            return Err("cluster_trust_loopback is for a listener without cluster_secret_file or cluster_ca/cert/key".into());
        }
        if self.cluster_trust_loopback && self.allow_other {
            return Err("cluster_trust_loopback lets every local user call this daemon's tablet servers and master: it cannot go with allow_other (give cluster_secret_file=FILE instead)".into());
        }
        // Loopback is no boundary between the machine's users: without a
        // secret or certificates, a daemon alone makes a secret of its own,
        // and daemons that share an etcd (which must share one) are refused.
        if unauthenticated && !self.cluster_trust_loopback && self.etcd.is_some() {
            return Err(format!(
                "cluster_listen={listen} without cluster_secret_file or cluster_ca/cert/key would let every local user call this daemon's tablet servers and master: give the daemons sharing this etcd a secret (or certificates), or cluster_trust_loopback if every local user may"
            ));
        }
        if listen.ip().is_unspecified() && self.cluster_advertise.is_none() {
            return Err(format!(
                "cluster_listen={listen} names no host others can dial: give cluster_advertise=HOST:PORT"
            ));
        }
        Ok(Some(ClusterRpc {
            listen,
            advertise: self.cluster_advertise.clone(),
            secret_file: self.cluster_secret_file.clone(),
            dial_self: self.cluster_dial_self,
            replay_cache: self.cluster_replay_cache,
            tls,
            own_secret: unauthenticated && !self.cluster_trust_loopback,
        }))
    }

    /// TLS on the public API, when asked for.
    pub fn grpc_tls(&self) -> Result<Option<grpc::TlsFiles>, String> {
        match (&self.grpc_cert, &self.grpc_key) {
            (None, None) if self.grpc_client_ca.is_none() => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(grpc::TlsFiles {
                ca: self.grpc_client_ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            })),
            _ => Err("grpc_cert and grpc_key go together (and grpc_client_ca needs them)".into()),
        }
    }

    /// Every option naming a file that holds a secret, with the file: each
    /// must be private (see `private::private_file`).
    pub fn private_files(&self) -> Vec<(&'static str, PathBuf)> {
        let mut out = Vec::new();
        let mut add = |k: &'static str, p: &Option<PathBuf>| {
            if let Some(p) = p {
                out.push((k, p.clone()));
            }
        };
        add("cluster_secret_file", &self.cluster_secret_file);
        add("cluster_key", &self.cluster_key);
        add("grpc_key", &self.grpc_key);
        add("grpc_tokens", &self.grpc_tokens);
        add("http_key", &self.http_key);
        if let Some(s3) = &self.s3 {
            add("s3_credentials", &s3.credentials);
        }
        if let Some(e) = &self.etcd {
            add("etcd_user_file", &e.user_file);
            add("etcd_key", &e.key);
        }
        out
    }

    /// FUSE worker threads to run.
    pub fn thread_count(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            // Requests that wait long (fsyncs, closes beyond one per spare
            // FUSE thread) go to a worker pool, so a few readers suffice;
            // more only add thread hand-offs per request.
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .max(2)
        })
    }

    /// Applies one `-o` option.
    pub fn apply(&mut self, opt: &str) -> Result<(), String> {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        fn need<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
            v.ok_or_else(|| format!("option {key} needs a value ({key}=...)"))
        }
        // A whole number in `min..=max` (`unit` names what it counts).
        fn whole(
            key: &str,
            v: Option<&str>,
            min: u64,
            max: u64,
            unit: &str,
        ) -> Result<u64, String> {
            let v = need(key, v)?;
            match v.parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(format!(
                    "{key}={v}: must be {min}..{max}{unit}, a whole number"
                )),
            }
        }
        match key {
            "allow_other" => self.allow_other = true,
            "grpc" => {
                self.grpc = Some(grpc::parse_addr(need(key, value)?).map_err(|e| e.to_string())?)
            }
            // A bare port is loopback, as with grpc=: the pages show row keys.
            "http" => {
                self.http = Some(grpc::parse_addr(need(key, value)?).map_err(|e| e.to_string())?)
            }
            "grpc_tokens" => self.grpc_tokens = Some(PathBuf::from(need(key, value)?)),
            "grpc_trust_loopback" => self.grpc_trust_loopback = true,
            "http_cert" => self.http_cert = Some(PathBuf::from(need(key, value)?)),
            "http_key" => self.http_key = Some(PathBuf::from(need(key, value)?)),
            "http_hosts" => {
                self.http_hosts = need(key, value)?
                    .split(':')
                    .filter(|h| !h.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "instance" => {
                let v = need(key, value)?;
                grpc::check_instance_id(v).map_err(|e| e.message().to_string())?;
                self.instance = v.to_string();
            }
            "threads" => self.threads = Some(whole(key, value, 1, 1024, "")? as usize),
            "commit_workers" => {
                self.commit_workers = Some(whole(key, value, 0, 1024, "")? as usize)
            }
            "attr_timeout" => self.attr_timeout = parse_seconds(need(key, value)?)?,
            "entry_timeout" => self.entry_timeout = parse_seconds(need(key, value)?)?,
            "dir_timeout" => self.dir_timeout = parse_seconds(need(key, value)?)?,
            "reader_wait" => self.reader_wait = parse_seconds(need(key, value)?)?,
            "cluster_listen" => {
                self.cluster_listen =
                    Some(grpc::parse_addr(need(key, value)?).map_err(|e| e.to_string())?)
            }
            "cluster_advertise" => {
                let v = need(key, value)?;
                match v.rsplit_once(':') {
                    Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                        self.cluster_advertise = Some(v.to_string())
                    }
                    _ => return Err(format!("cluster_advertise={v}: expected HOST:PORT")),
                }
            }
            "cluster_secret_file" => {
                self.cluster_secret_file = Some(PathBuf::from(need(key, value)?))
            }
            "cluster_dial_self" => self.cluster_dial_self = true,
            "cluster_trust_loopback" => self.cluster_trust_loopback = true,
            "cluster_ca" => self.cluster_ca = Some(PathBuf::from(need(key, value)?)),
            "cluster_cert" => self.cluster_cert = Some(PathBuf::from(need(key, value)?)),
            "cluster_key" => self.cluster_key = Some(PathBuf::from(need(key, value)?)),
            "grpc_cert" => self.grpc_cert = Some(PathBuf::from(need(key, value)?)),
            "grpc_key" => self.grpc_key = Some(PathBuf::from(need(key, value)?)),
            "grpc_client_ca" => self.grpc_client_ca = Some(PathBuf::from(need(key, value)?)),
            "cluster_replay_cache" => {
                self.cluster_replay_cache =
                    whole(key, value, 1000, 100_000_000, " nonces")? as usize
            }
            "rpc_max_request" | "rpc_max_control" | "rpc_buffer" => {
                let n = parse_size(need(key, value)?)?;
                if n < 1024 {
                    return Err(format!("{key}: at least 1k"));
                }
                let n = usize::try_from(n).map_err(|_| format!("{key}: too large"))?;
                let l = &mut self.rpc_limits;
                match key {
                    "rpc_max_request" => l.max_request = n,
                    "rpc_max_control" => l.max_control = n,
                    _ => l.buffer = n,
                }
            }
            "rpc_max_streams" => {
                self.rpc_limits.max_streams = whole(key, value, 1, 10_000, " streams")? as u32
            }
            "rpc_max_connections" => {
                self.rpc_limits.max_connections =
                    whole(key, value, 1, 1_000_000, " connections")? as usize
            }
            "rpc_header_timeout" => {
                let t = parse_seconds(need(key, value)?)?;
                if t.is_zero() {
                    return Err("rpc_header_timeout: must be more than 0".into());
                }
                self.rpc_limits.header_timeout = t;
            }
            "rpc_body_timeout" => {
                let t = parse_seconds(need(key, value)?)?;
                if t.is_zero() {
                    return Err("rpc_body_timeout: must be more than 0".into());
                }
                self.rpc_limits.body_timeout = t;
            }
            "log_batch_window" => {
                self.log_batch_window = Some(Duration::from_micros(whole(
                    key,
                    value,
                    0,
                    1_000_000,
                    " microseconds",
                )?))
            }
            "busy_poll" => {
                self.busy_poll =
                    Duration::from_micros(whole(key, value, 0, 10_000, " microseconds")?)
            }
            "uring" => {
                self.uring_depth = whole(key, value, 0, 1024, " entries per queue")? as usize
            }
            "log" => {
                self.log_level = need(key, value)?.parse().map_err(|_| {
                    format!(
                        "log={}: use error, warn, info, debug, trace or off",
                        value.unwrap_or("")
                    )
                })?
            }
            "logfile" => self.log_file = Some(PathBuf::from(need(key, value)?)),
            "pidfile" => self.pid_file = Some(PathBuf::from(need(key, value)?)),
            "memtable" => self.memtable_bytes = Some(parse_size(need(key, value)?)? as usize),
            "split" => self.split_bytes = Some(parse_size(need(key, value)?)?),
            "merge" => self.merge_bytes = Some(parse_size(need(key, value)?)?),
            "cache" => self.block_cache_bytes = Some(parse_size(need(key, value)?)?),
            "scan_cache" => self.scan_cache_bytes = Some(parse_size(need(key, value)?)?),
            "max_value" => self.max_value_size = Some(parse_size(need(key, value)?)? as usize),
            "chubby_nodes" => self.chubby_quota.0 = whole(key, value, 0, u64::MAX, "")?,
            "chubby_bytes" => self.chubby_quota.1 = parse_size(need(key, value)?)?,
            "filter_max_cells" => {
                self.filter_limits.max_cells = whole(key, value, 1, 1 << 30, "")? as usize
            }
            "filter_max_bytes" => self.filter_limits.max_bytes = parse_size(need(key, value)?)?,
            "mutate_max_line" => {
                self.write_limits.mutate_max_line = parse_size(need(key, value)?)? as usize
            }
            "mutate_max_group" => {
                self.write_limits.mutate_max_group = parse_size(need(key, value)?)? as usize
            }
            "write_buffer_uid" => self.write_limits.buffer_per_uid = parse_size(need(key, value)?)?,
            "write_buffer_total" => self.write_limits.buffer_total = parse_size(need(key, value)?)?,
            "filter_regex_bytes" => {
                self.filter_limits.regex_bytes = parse_size(need(key, value)?)? as usize
            }
            "compaction_threads" => {
                self.compaction_threads = Some(
                    need(key, value)?
                        .parse()
                        .map_err(|_| "compaction_threads: not a number".to_string())?,
                )
            }
            "tablet_servers" => {
                let n: usize = need(key, value)?
                    .parse()
                    .map_err(|_| "tablet_servers: not a number".to_string())?;
                if n > 64 {
                    return Err("tablet_servers: use 0 to 64".to_string());
                }
                self.tablet_servers = Some(n);
            }
            "sync" => self.sync = true,
            "opendir" => self.opendir = true,
            "nomap" => self.nomap = true,
            "store" => {
                let v = need(key, value)?;
                self.local_store = false;
                match v {
                    "cluster" => self.s3 = None,
                    "local" => {
                        self.s3 = None;
                        self.local_store = true;
                    }
                    url if url.starts_with("s3://") => {
                        objstore::S3Config::from_url(url).map_err(|e| format!("store={e}"))?;
                        self.s3.get_or_insert_with(S3Options::default).url = url.to_string();
                    }
                    v => {
                        return Err(format!(
                            "store={v}: use cluster, local or s3://BUCKET[/PREFIX]"
                        ))
                    }
                }
            }
            "s3_endpoint" => self.s3_opts().endpoint = Some(need(key, value)?.to_string()),
            "s3_region" => self.s3_opts().region = Some(need(key, value)?.to_string()),
            "s3_credentials" => {
                self.s3_opts().credentials = Some(PathBuf::from(need(key, value)?));
            }
            "s3_timeout" => {
                let secs: u64 = need(key, value)?
                    .parse()
                    .map_err(|_| format!("{key}: whole seconds"))?;
                self.s3_opts().timeout = Some(Duration::from_secs(secs.max(1)));
            }
            "cache_dir" => self.s3_opts().cache_dir = Some(PathBuf::from(need(key, value)?)),
            "disk_cache" => {
                self.s3_opts().disk_cache =
                    Some(parse_size(need(key, value)?).map_err(|e| format!("{key}: {e}"))?);
            }
            "chunkservers" => {
                self.chunkservers = need(key, value)?
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .collect();
                if self.chunkservers.is_empty() {
                    return Err("chunkservers= needs at least one directory".into());
                }
            }
            "replication" => {
                let n: usize = need(key, value)?
                    .parse()
                    .map_err(|_| "replication: not a number".to_string())?;
                if !(1..=16).contains(&n) {
                    return Err("replication must be 1..16".into());
                }
                self.replication = n;
            }
            "chunk_size" => self.chunk_size = Some(parse_size(need(key, value)?)?),
            "scrub_rate" => self.scrub_rate = Some(parse_rate(need(key, value)?)?),
            "scrub_interval" => self.scrub_interval = Some(parse_seconds(need(key, value)?)?),
            "scrub_idle" => self.scrub_idle = Some(parse_seconds(need(key, value)?)?),
            "repair_rate" => self.repair_rate = Some(parse_rate(need(key, value)?)?),
            "repair_parallel" => {
                let n: usize = need(key, value)?
                    .parse()
                    .map_err(|_| "repair_parallel: not a number".to_string())?;
                if !(1..=64).contains(&n) {
                    return Err("repair_parallel must be 1..64".into());
                }
                self.repair_parallel = Some(n);
            }
            "master_mirrors" => {
                self.master_mirrors = need(key, value)?
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .collect();
            }
            "lock" => match need(key, value)? {
                "embedded" => self.etcd = None,
                url if url.starts_with("etcd://") => {
                    chubby::EtcdOptions::from_url(url).map_err(|e| format!("lock={e}"))?;
                    self.etcd_opts().url = url.to_string();
                }
                v => {
                    return Err(format!(
                        "lock={v}: use embedded or etcd://HOST:PORT[/PREFIX]"
                    ))
                }
            },
            "etcd_ca" => self.etcd_opts().ca = Some(PathBuf::from(need(key, value)?)),
            "etcd_cert" => self.etcd_opts().cert = Some(PathBuf::from(need(key, value)?)),
            "etcd_key" => self.etcd_opts().key = Some(PathBuf::from(need(key, value)?)),
            "etcd_user_file" => self.etcd_opts().user_file = Some(PathBuf::from(need(key, value)?)),
            "etcd_lease" => {
                self.etcd_opts().lease =
                    Some(Duration::from_secs(whole(key, value, 2, 3600, " seconds")?))
            }
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "nosuid" => self.nosuid = true,
            "suid" => self.nosuid = false,
            "nodev" => self.nodev = true,
            "dev" => self.nodev = false,
            "noexec" => self.noexec = true,
            "exec" => self.noexec = false,
            "noatime" => self.noatime = true,
            k if is_ignored(k) => {}
            _ => return Err(format!("unknown option {opt:?}")),
        }
        self.given.push(opt.to_string());
        Ok(())
    }

    fn etcd_opts(&mut self) -> &mut EtcdLockOptions {
        self.etcd.get_or_insert_with(EtcdLockOptions::default)
    }

    /// The etcd cell's settings, when the lock service is on etcd.
    pub fn etcd_config(&self) -> Result<Option<chubby::EtcdOptions>, String> {
        let Some(o) = &self.etcd else {
            return Ok(None);
        };
        if o.url.is_empty() {
            return Err("etcd_* options need lock=etcd://HOST:PORT[/PREFIX]".to_string());
        }
        let mut c = chubby::EtcdOptions::from_url(&o.url).map_err(|e| e.to_string())?;
        c.ca = o.ca.clone();
        c.cert_key = match (&o.cert, &o.key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => return Err("etcd_cert and etcd_key go together".to_string()),
        };
        if c.cert_key.is_some() && c.ca.is_none() {
            return Err("etcd_cert needs etcd_ca (TLS)".to_string());
        }
        c.user_file = o.user_file.clone();
        if let Some(l) = o.lease {
            c.lease_ttl = l;
        }
        Ok(Some(c))
    }

    fn s3_opts(&mut self) -> &mut S3Options {
        self.s3.get_or_insert_with(S3Options::default)
    }

    /// The object store's settings, when the files go there.
    pub fn s3_config(&self) -> Result<Option<objstore::S3Config>, String> {
        let Some(o) = &self.s3 else {
            return Ok(None);
        };
        if o.url.is_empty() {
            return Err("s3_* and cache options need store=s3://BUCKET[/PREFIX]".to_string());
        }
        let mut c = objstore::S3Config::from_url(&o.url).map_err(|e| e.to_string())?;
        c.endpoint = o.endpoint.clone();
        if let Some(r) = &o.region {
            c.region = r.clone();
        }
        if let Some(f) = &o.credentials {
            c.credentials =
                Some(objstore::Credentials::from_file(f, None).map_err(|e| e.to_string())?);
        }
        if let Some(t) = o.timeout {
            c.timeout = t;
        }
        // Daemons that share etcd and take each other's calls serve one
        // Bigtable from the prefix together; alone, a daemon owns it.
        c.shared = self.etcd.is_some() && self.cluster_listen.is_some();
        c.disk_cache_bytes = o.disk_cache.unwrap_or(objstore::DEFAULT_DISK_CACHE);
        c.cache_dir = (c.disk_cache_bytes > 0).then(|| {
            o.cache_dir
                .clone()
                .unwrap_or_else(|| self.data_dir.join("s3-cache"))
        });
        Ok(Some(c))
    }

    /// Applies a comma-separated `-o` list.
    pub fn apply_list(&mut self, list: &str) -> Result<(), String> {
        for opt in &split_options(list) {
            self.apply(opt)?;
        }
        Ok(())
    }

    /// Opens the file layer the engine runs on.
    pub fn file_store(&self) -> Result<std::sync::Arc<dyn gfs::FileStore>, String> {
        let dir = &self.data_dir;
        if self.client_only() {
            // It serves nothing, so it writes no file: every read and write
            // goes to the other daemons' servers. An empty directory stands
            // for the store.
            let files = gfs::LocalStore::open(dir.join("client-only"))
                .map_err(|e| format!("data directory {}: {e}", dir.display()))?;
            return Ok(std::sync::Arc::new(files));
        }
        if let Some(cfg) = self.s3_config()? {
            let store = objstore::S3Store::open(cfg).map_err(|e| e.to_string())?;
            return Ok(std::sync::Arc::new(store));
        }
        if self.local_store {
            let files = gfs::LocalStore::open(dir.join("files"))
                .map_err(|e| format!("data directory {}: {e}", dir.display()))?;
            files.set_maps(!self.nomap);
            return Ok(std::sync::Arc::new(files));
        }
        let mut o = gfs::ClusterOptions::for_data_dir(dir);
        if !self.chunkservers.is_empty() {
            o.chunkserver_dirs = self.chunkservers.clone();
        }
        o.replication = self.replication;
        if let Some(c) = self.chunk_size {
            o.chunk_size = c;
        }
        if let Some(r) = self.scrub_rate {
            o.scrub_rate = r;
        }
        if let Some(s) = self.scrub_interval {
            o.scrub_interval = s;
        }
        if let Some(s) = self.scrub_idle {
            o.scrub_idle = s;
        }
        if let Some(r) = self.repair_rate {
            o.repair_rate = r;
        }
        if let Some(n) = self.repair_parallel {
            o.repair_parallel = n;
        }
        if !self.master_mirrors.is_empty() {
            o.master_mirrors = Some(self.master_mirrors.clone());
        }
        // Keep taking writes on small disks; the cluster reports ENOSPC itself.
        o.min_free_bytes = 32 << 20;
        let cluster = gfs::Cluster::open(o)
            .map_err(|e| format!("chunk cluster in {}: {e}", dir.display()))?;
        Ok(cluster)
    }

    /// The engine's options with this mount's sizes.
    pub fn engine_options(&self) -> engine::Options {
        let mut o = engine::Options::default();
        if let Some(v) = self.log_batch_window {
            o.log_batch_window = v;
        }
        if let Some(v) = self.memtable_bytes {
            o.memtable_bytes = v;
        }
        if let Some(v) = self.split_bytes {
            o.split_bytes = v;
        }
        if let Some(v) = self.merge_bytes {
            o.merge_bytes = v;
        }
        if let Some(v) = self.block_cache_bytes {
            o.block_cache_bytes = v;
        }
        if let Some(v) = self.scan_cache_bytes {
            o.scan_cache_bytes = v;
        }
        if let Some(v) = self.max_value_size {
            o.max_value_size = v;
        }
        if let Some(v) = self.compaction_threads {
            o.background_threads = v.max(1);
        }
        if let Some(v) = self.tablet_servers {
            o.tablet_servers = v;
        }
        o
    }
}

/// Generic mount(8)/fstab options that mean nothing here.
fn is_ignored(key: &str) -> bool {
    matches!(
        key,
        "defaults"
            | "auto"
            | "noauto"
            | "_netdev"
            | "nofail"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "async"
            | "atime"
            | "relatime"
            | "norelatime"
            | "strictatime"
            | "nodiratime"
            | "diratime"
            | "lazytime"
            | "nolazytime"
            | "silent"
            | "loud"
            | "comment"
            | "fsname"
            | "subtype"
            | "default_permissions"
    ) || key.starts_with("x-")
}

/// `64k`, `16M`, `2g`, or plain bytes.
/// Splits a comma-separated `-o` list. `lock=etcd://a:1,b:2/p` lists its
/// members with commas too: a word with no `=` but a `:`, after it,
/// continues that option.
pub fn split_options(list: &str) -> Vec<String> {
    let mut opts: Vec<String> = Vec::new();
    for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        match opts.last_mut() {
            Some(last)
                if last.starts_with("lock=etcd://") && !opt.contains('=') && opt.contains(':') =>
            {
                last.push(',');
                last.push_str(opt);
            }
            _ => opts.push(opt.to_string()),
        }
    }
    opts
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_lowercase() {
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return Err(format!("size {s:?}: unknown unit {c:?}")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("size {s:?} is not a number with an optional k/m/g/t unit"))
}

/// A size per second: `4m`, `4m/s`, or plain bytes.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    parse_size(s.trim().strip_suffix("/s").unwrap_or(s))
}

/// Seconds, possibly fractional.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=86400.0).contains(&v) {
        return Err(format!("{s} seconds is out of range"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Parses `bigtable-mountd`'s command line (without the program name).
pub fn parse_daemon_args(args: &[String]) -> Result<MountConfig, String> {
    let mut positional = Vec::new();
    let mut opts = Vec::new();
    let mut foreground = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        match a.as_str() {
            "-f" | "--foreground" => foreground = true,
            "-o" => {
                i += 1;
                opts.push(args.get(i).ok_or("-o needs options")?.clone());
            }
            s if s.starts_with("-o") && s.len() > 2 => opts.push(s[2..].to_string()),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown flag {s}")),
            _ => positional.push(a.clone()),
        }
        i += 1;
    }
    let [data, mnt] = <[String; 2]>::try_from(positional)
        .map_err(|_| "expected DATA_DIR MOUNTPOINT".to_string())?;
    let mut cfg = MountConfig::new(PathBuf::from(data), PathBuf::from(mnt));
    cfg.foreground = foreground;
    for o in &opts {
        cfg.apply_list(o)?;
    }
    Ok(cfg)
}

/// What `mount.bigtable` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperCall {
    pub data_dir: String,
    pub mountpoint: String,
    /// Options to pass on (mount(8)'s generic ones removed).
    pub options: Vec<String>,
    /// `-f`: pretend (mount(8)'s "fake" mode): do nothing.
    pub fake: bool,
}

/// Parses a mount(8) helper command line: `spec dir [-sfnv] [-N ns] [-t type] [-o opts]`.
pub fn parse_helper_args(args: &[String]) -> Result<HelperCall, String> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut fake = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-o" => {
                i += 1;
                let list = args.get(i).ok_or("-o needs options")?;
                options.extend(split_options(list));
            }
            "-t" | "-N" => i += 1,
            s if s.starts_with("-o") && s.len() > 2 => options.extend(split_options(&s[2..])),
            s if s.starts_with('-') && s.len() > 1 && !s.starts_with("--") => {
                for c in s[1..].chars() {
                    match c {
                        'f' => fake = true,
                        's' | 'n' | 'v' | 'r' | 'w' => {}
                        _ => return Err(format!("unknown flag -{c}")),
                    }
                }
            }
            _ => positional.push(a.to_string()),
        }
        i += 1;
    }
    let [data_dir, mountpoint] = <[String; 2]>::try_from(positional)
        .map_err(|_| "usage: mount.bigtable DATA_DIR MOUNTPOINT [-o options]".to_string())?;
    // Check everything now, so that a typo fails mount(8) rather than the daemon.
    let mut probe = MountConfig::new(PathBuf::from(&data_dir), PathBuf::from(&mountpoint));
    let mut kept = Vec::new();
    for o in options {
        probe.apply(&o)?;
        let key = o.split('=').next().unwrap_or("");
        if !is_ignored(key) && key != "rw" {
            kept.push(o);
        }
    }
    Ok(HelperCall {
        data_dir,
        mountpoint,
        options: kept,
        fake,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn lock_service_on_etcd() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert!(c.etcd_config().unwrap().is_none());
        c.apply_list("lock=etcd://a:1,b:2/p,etcd_lease=3,etcd_user_file=/u")
            .unwrap();
        let e = c.etcd_config().unwrap().unwrap();
        assert_eq!(e.endpoints, vec!["a:1", "b:2"]);
        assert_eq!(e.prefix, "/p");
        assert_eq!(e.lease_ttl, Duration::from_secs(3));
        assert_eq!(e.user_file, Some(PathBuf::from("/u")));
        assert!(c.apply("lock=zk://x").is_err());
        assert!(c.apply("etcd_lease=1").is_err());
        c.apply("etcd_cert=/c").unwrap();
        assert!(c.etcd_config().is_err(), "a certificate without its key");
        let mut d = MountConfig::new("/d".into(), "/m".into());
        d.apply("etcd_ca=/ca").unwrap();
        assert!(d.etcd_config().is_err(), "etcd_* without lock=etcd://");
        d.apply("lock=embedded").unwrap();
        assert!(d.etcd_config().unwrap().is_none());
    }

    #[test]
    fn sizes_and_seconds() {
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert!(parse_size("12x").is_err());
        assert!(parse_size("k").is_err());
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_seconds("-1").is_err());
    }

    #[test]
    fn nomap_reads_a_local_store_without_mappings() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert!(!c.nomap);
        c.apply_list("store=local,nomap").unwrap();
        assert!(c.local_store && c.nomap);
    }

    #[test]
    fn log_batch_window() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert!(c.engine_options().log_batch_window.is_zero());
        c.apply("log_batch_window=2000").unwrap();
        assert_eq!(
            c.engine_options().log_batch_window,
            Duration::from_millis(2)
        );
        assert!(c.apply("log_batch_window=1000001").is_err());
        assert!(c.apply("log_batch_window=2ms").is_err());
    }

    #[test]
    fn busy_poll_window() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert_eq!(c.busy_poll, fs::DEFAULT_BUSY_POLL);
        c.apply("busy_poll=0").unwrap();
        assert!(c.busy_poll.is_zero());
        c.apply("busy_poll=120").unwrap();
        assert_eq!(c.busy_poll, Duration::from_micros(120));
        assert!(c.apply("busy_poll=10001").is_err());
        assert!(c.apply("busy_poll=-1").is_err());
        assert!(c.apply("busy_poll").is_err());
    }

    #[test]
    fn uring_queue_depth() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert_eq!(c.uring_depth, DEFAULT_URING_DEPTH);
        c.apply("uring=0").unwrap();
        assert_eq!(c.uring_depth, 0);
        c.apply("uring=128").unwrap();
        assert_eq!(c.uring_depth, 128);
        assert!(c.apply("uring=1025").is_err());
        assert!(c.apply("uring=many").is_err());
        assert!(c.apply("uring").is_err());
    }

    #[test]
    fn grpc_instance() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert_eq!(c.instance, "default");
        c.apply("instance=prod-1").unwrap();
        assert_eq!(c.instance, "prod-1");
        assert!(c.apply("instance=a@b").is_err());
        assert!(c.apply("instance=").is_err());
    }

    #[test]
    fn tls_and_private_file_options() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        c.apply_list("cluster_listen=0.0.0.0:7100,cluster_advertise=10.0.0.5:7100")
            .unwrap();
        c.apply_list("cluster_ca=/c/ca.pem,cluster_cert=/c/n.pem")
            .unwrap();
        assert!(c.cluster().unwrap_err().contains("go together"));
        c.apply("cluster_key=/c/n-key.pem").unwrap();
        // Mutual TLS without a secret is enough off loopback.
        let rpc = c.cluster().unwrap().unwrap();
        assert_eq!(rpc.tls.unwrap().key, PathBuf::from("/c/n-key.pem"));
        c.apply("grpc_cert=/g/c.pem").unwrap();
        assert!(c.grpc_tls().is_err());
        c.apply_list("grpc_key=/g/k.pem,grpc_client_ca=/g/ca.pem")
            .unwrap();
        assert!(c.grpc_tls().unwrap().unwrap().ca.is_some());
        c.apply_list("cluster_secret_file=/s,lock=etcd://h:1,etcd_user_file=/u")
            .unwrap();
        let named: Vec<&str> = c.private_files().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            named,
            [
                "cluster_secret_file",
                "cluster_key",
                "grpc_key",
                "etcd_user_file"
            ]
        );
    }

    #[test]
    fn cluster_options() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert_eq!(c.cluster().unwrap(), None);
        c.apply("cluster_listen=7100").unwrap();
        let rpc = c.cluster().unwrap().unwrap();
        assert_eq!(rpc.listen.to_string(), "127.0.0.1:7100");
        assert_eq!((rpc.advertise, rpc.secret_file), (None, None));
        // Alone on loopback without a secret: one of its own.
        assert!(rpc.own_secret);
        c.apply("cluster_listen=0.0.0.0:7100").unwrap();
        assert!(c.cluster().unwrap_err().contains("cluster_secret_file"));
        c.apply("cluster_secret_file=/etc/bt.secret").unwrap();
        assert!(c.cluster().unwrap_err().contains("cluster_advertise"));
        c.apply("cluster_advertise=10.0.0.5:7100").unwrap();
        assert!(c.cluster().unwrap().is_some());
        assert!(c.apply("cluster_advertise=7100").is_err());
        assert!(!c.cluster().unwrap().unwrap().own_secret);
        // Sharing an etcd on loopback: a secret, or trust said outright
        // (and never with allow_other).
        let mut l = MountConfig::new("/d".into(), "/m".into());
        l.apply_list("lock=etcd://h:1,cluster_listen=7100").unwrap();
        assert!(l.cluster().unwrap_err().contains("every local user"));
        l.apply("cluster_trust_loopback").unwrap();
        assert!(!l.cluster().unwrap().unwrap().own_secret);
        l.apply("allow_other").unwrap();
        assert!(l.cluster().unwrap_err().contains("allow_other"));
        l.allow_other = false;
        l.apply("cluster_secret_file=/s").unwrap();
        assert!(l
            .cluster()
            .unwrap_err()
            .contains("without cluster_secret_file"));
        let mut d = MountConfig::new("/d".into(), "/m".into());
        d.apply("cluster_dial_self").unwrap();
        assert!(d.cluster().is_err(), "dial_self without listen");
        let mut e = MountConfig::new("/d".into(), "/m".into());
        e.apply("tablet_servers=0").unwrap();
        e.apply("cluster_listen=0").unwrap();
        assert!(
            e.cluster().is_err(),
            "client-only without a shared lock service"
        );
    }

    #[test]
    fn grpc_address() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert_eq!(c.grpc, None);
        c.apply("grpc=8086").unwrap();
        assert_eq!(c.grpc.unwrap().to_string(), "127.0.0.1:8086");
        c.apply("grpc=0.0.0.0:9000").unwrap();
        assert_eq!(c.grpc.unwrap().to_string(), "0.0.0.0:9000");
        assert!(c.apply("grpc=nope").is_err());
        assert!(c.apply("grpc").is_err());
    }

    #[test]
    fn grpc_auth_options() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert!(c.check_grpc_auth().is_ok());
        c.apply("grpc=8086").unwrap();
        assert!(c.check_grpc_auth().unwrap_err().contains("grpc_tokens"));
        c.apply("grpc_trust_loopback").unwrap();
        assert!(c.check_grpc_auth().is_ok());
        c.apply("allow_other").unwrap();
        assert!(c.check_grpc_auth().unwrap_err().contains("allow_other"));
        c.grpc_trust_loopback = false;
        c.apply("grpc_tokens=/etc/bt-tokens").unwrap();
        assert!(c.check_grpc_auth().is_ok());
        assert!(c.apply("grpc_tokens").is_err());
    }

    #[test]
    fn console_address() {
        let mut c = MountConfig::new("/d".into(), "/m".into());
        assert_eq!(c.http, None);
        c.apply("http=9090").unwrap();
        assert_eq!(c.http.unwrap().to_string(), "127.0.0.1:9090");
        c.apply("http=0.0.0.0:9091").unwrap();
        assert_eq!(c.http.unwrap().to_string(), "0.0.0.0:9091");
        assert!(c.apply("http=nope").is_err());
        assert!(c.apply("http").is_err());
    }

    #[test]
    fn daemon_command_line() {
        let c = parse_daemon_args(&s(&[
            "/d",
            "/m",
            "-f",
            "-o",
            "allow_other,threads=3",
            "-oattr_timeout=2,sync,memtable=1m,merge=0",
        ]))
        .unwrap();
        assert!(c.foreground && c.allow_other && c.sync);
        assert_eq!(c.threads, Some(3));
        assert_eq!(c.attr_timeout, Duration::from_secs(2));
        assert_eq!(c.memtable_bytes, Some(1 << 20));
        assert_eq!(c.engine_options().memtable_bytes, 1 << 20);
        assert_eq!(c.engine_options().merge_bytes, 0);
        assert!(parse_daemon_args(&s(&["/d"])).is_err());
        assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "bogus"])).is_err());
        assert!(parse_daemon_args(&s(&["/d", "/m", "-x"])).is_err());
        assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "threads=0"])).is_err());
        let c = parse_daemon_args(&s(&[
            "/d",
            "/m",
            "-o",
            "scrub_rate=8m/s,scrub_interval=60,scrub_idle=0.5,repair_rate=0,repair_parallel=2,master_mirrors=/x:/y",
        ]))
        .unwrap();
        assert_eq!(c.scrub_rate, Some(8 << 20));
        assert_eq!(c.scrub_interval, Some(Duration::from_secs(60)));
        assert_eq!(c.scrub_idle, Some(Duration::from_millis(500)));
        assert_eq!((c.repair_rate, c.repair_parallel), (Some(0), Some(2)));
        assert_eq!(
            c.master_mirrors,
            vec![PathBuf::from("/x"), PathBuf::from("/y")]
        );
        assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "repair_parallel=0"])).is_err());
        assert!(parse_daemon_args(&s(&["/d", "/m", "-o", "scrub_rate=fast"])).is_err());
    }

    #[test]
    fn helper_drops_generic_options_and_flags() {
        let h = parse_helper_args(&s(&[
            "/var/lib/bt",
            "/mnt/bt",
            "-v",
            "-n",
            "-o",
            "rw,noauto,_netdev,nofail,user,x-systemd.automount,allow_other,log=debug",
        ]))
        .unwrap();
        assert_eq!(h.options, s(&["allow_other", "log=debug"]));
        assert!(!h.fake);
        assert!(parse_helper_args(&s(&["/a", "/b", "-f"])).unwrap().fake);
        assert!(parse_helper_args(&s(&["/a", "/b", "-o", "frob"])).is_err());
        let t = parse_helper_args(&s(&["/a", "/b", "-t", "bigtable", "-sv"])).unwrap();
        assert_eq!(t.mountpoint, "/b");
    }
}
