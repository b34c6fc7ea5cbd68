//! Command lines and `-o` options of `bigtable-mountd` and `mount.bigtable`.
//!
//! ```text
//! bigtable-mountd DATA_DIR MOUNTPOINT [-f] [-o opt[,opt...]]...
//! mount.bigtable  DATA_DIR MOUNTPOINT [-sfnv] [-N ns] [-t type] [-o opt[,opt...]]
//! ```
//!
//! Every option is declared once, in `table.rs`: the parser, the lines of
//! `.bigtable/mount` and docs/mount.md's option table (checked by a test in
//! `doc.rs`) come from there.

pub mod doc;
mod table;
mod values;

pub use table::{find, is_ignored, Initial, MountOption, IGNORED, OPTIONS};
pub use values::{parse_rate, parse_seconds, parse_size, Given};

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

/// A backup store and the name the mount gives it.
pub type NamedStore = (String, std::sync::Arc<dyn gfs::FileStore>);

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
    /// Do not replay other daemons' writes for inotify (docs/coherence.md).
    pub no_replay: bool,
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
    /// What all of a tablet server's memtables may hold (`memtable_budget=`).
    pub memtable_budget: Option<u64>,
    /// Old log files a tablet server keeps (`log_max_files=`).
    pub log_max_files: Option<usize>,
    /// Oldest a memtable's first entry may get (`memtable_max_age=`; 0: no limit).
    pub memtable_max_age: Option<Duration>,
    /// How long a commit waits for more writes to share its log write.
    pub log_batch_window: Option<Duration>,
    /// `log_batch_window=auto`: the adaptive window.
    pub log_batch_window_adaptive: Option<bool>,
    /// Group-commit batches out at once on a remote store (0: chosen).
    pub log_puts_in_flight: Option<usize>,
    pub split_bytes: Option<u64>,
    /// Adjacent tablets both smaller than this are merged (0: never).
    pub merge_bytes: Option<u64>,
    /// How long a deleted table stays in the trash (`trash_days=`).
    pub trash_period: Option<Duration>,
    /// Load (units a second) above which a tablet is split (0: never).
    pub load_split_rate: Option<u64>,
    /// How long a tablet's load must stay above it.
    pub load_split_after: Option<Duration>,
    /// How long a split's halves are not merged back.
    pub split_cooldown: Option<Duration>,
    /// The master moves and load-splits no tablet (`no_balance`).
    pub no_balance: bool,
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
    /// Backup stores (`backup_store=NAME=s3://BUCKET[/PREFIX]` or
    /// `NAME=/DIR`, repeatable): where backups are copied to and from.
    pub backup_stores: Vec<(String, String)>,
    /// Replicas per chunk (0: one per chunkserver, at most 3).
    pub replication: usize,
    pub chunk_size: Option<u64>,
    /// Every replica written through the page cache (`nodirect`).
    pub nodirect: bool,
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
            no_replay: false,
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
            memtable_budget: None,
            log_max_files: None,
            memtable_max_age: None,
            log_batch_window: None,
            log_batch_window_adaptive: None,
            log_puts_in_flight: None,
            split_bytes: None,
            merge_bytes: None,
            trash_period: None,
            load_split_rate: None,
            load_split_after: None,
            split_cooldown: None,
            no_balance: false,
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
            backup_stores: Vec::new(),
            replication: 0,
            chunk_size: None,
            nodirect: false,
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
        let given = Given::split(opt);
        match find(given.key) {
            Some(o) => (o.set)(self, given)?,
            None if is_ignored(given.key) => {}
            None => return Err(format!("unknown option {opt:?}")),
        }
        self.given.push(opt.to_string());
        Ok(())
    }

    /// `.bigtable/mount`: the options as given, the lines it always had,
    /// then every option in effect as `name=value` (a file's path, never
    /// its contents).
    pub fn status(&self) -> String {
        let ms = |d: Duration| d.as_millis().to_string();
        let mut lines = vec![
            ("options", self.given.join(",")),
            ("attr_timeout_ms", ms(self.attr_timeout)),
            ("entry_timeout_ms", ms(self.entry_timeout)),
            ("dir_timeout_ms", ms(self.dir_timeout)),
            ("reader_wait_ms", ms(self.reader_wait)),
            ("sync", self.sync.to_string()),
            (
                "max_value_size",
                self.engine_options().max_value_size.to_string(),
            ),
        ];
        for o in OPTIONS {
            if let Some(v) = (o.show)(self) {
                if !lines.iter().any(|(k, _)| *k == o.name) {
                    lines.push((o.name, v));
                }
            }
        }
        lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    pub(crate) fn etcd_opts(&mut self) -> &mut EtcdLockOptions {
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

    pub(crate) fn s3_opts(&mut self) -> &mut S3Options {
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

    /// The chunk layer's options: `base` with this mount's settings.
    pub fn cluster_options(&self, base: gfs::ClusterOptions) -> gfs::ClusterOptions {
        let mut o = base;
        if !self.chunkservers.is_empty() {
            o.chunkserver_dirs = self.chunkservers.clone();
        }
        o.replication = self.replication;
        if let Some(c) = self.chunk_size {
            o.chunk_size = c;
        }
        if self.nodirect {
            o.direct_writes = false;
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
        o
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
        let mut o = self.cluster_options(gfs::ClusterOptions::for_data_dir(dir));
        // Keep taking writes on small disks; the cluster reports ENOSPC itself.
        o.min_free_bytes = 32 << 20;
        let cluster = gfs::Cluster::open(o)
            .map_err(|e| format!("chunk cluster in {}: {e}", dir.display()))?;
        Ok(cluster)
    }

    /// Opens the backup stores: an S3 prefix with the store's endpoint,
    /// region and credentials (shared: several daemons may write backups
    /// there), or a plain directory.
    pub fn backup_file_stores(&self) -> Result<Vec<NamedStore>, String> {
        let mut out: Vec<NamedStore> = Vec::new();
        for (name, url) in &self.backup_stores {
            let err = |e: String| format!("backup_store={name}={url}: {e}");
            if url.starts_with("s3://") {
                let mut c = objstore::S3Config::from_url(url).map_err(|e| err(e.to_string()))?;
                if let Some(o) = &self.s3 {
                    c.endpoint = o.endpoint.clone();
                    if let Some(r) = &o.region {
                        c.region = r.clone();
                    }
                    if let Some(f) = &o.credentials {
                        c.credentials = Some(
                            objstore::Credentials::from_file(f, None)
                                .map_err(|e| err(e.to_string()))?,
                        );
                    }
                    if let Some(t) = o.timeout {
                        c.timeout = t;
                    }
                }
                c.shared = true;
                c.disk_cache_bytes = 0;
                c.cache_dir = None;
                let store = objstore::S3Store::open(c).map_err(|e| err(e.to_string()))?;
                out.push((name.clone(), std::sync::Arc::new(store)));
            } else {
                let files = gfs::LocalStore::open(url).map_err(|e| err(e.to_string()))?;
                out.push((name.clone(), std::sync::Arc::new(files)));
            }
        }
        Ok(out)
    }

    /// The engine's options with this mount's sizes.
    pub fn engine_options(&self) -> engine::Options {
        let mut o = engine::Options::default();
        if let Some(v) = self.log_batch_window {
            o.log_batch_window = v;
        }
        if let Some(v) = self.log_batch_window_adaptive {
            o.log_batch_window_adaptive = v;
        }
        if let Some(v) = self.log_puts_in_flight {
            o.log_puts_in_flight = v;
        }
        if let Some(v) = self.memtable_bytes {
            o.memtable_bytes = v;
        }
        if let Some(v) = self.memtable_budget {
            o.memtable_budget = v;
        }
        if let Some(v) = self.log_max_files {
            o.log_max_files = v;
        }
        if let Some(v) = self.memtable_max_age {
            o.memtable_max_age = v;
        }
        if let Some(v) = self.split_bytes {
            o.split_bytes = v;
        }
        if let Some(v) = self.merge_bytes {
            o.merge_bytes = v;
        }
        if let Some(v) = self.trash_period {
            o.trash_period = v;
        }
        if let Some(v) = self.load_split_rate {
            o.load_split_rate = v;
        }
        if let Some(v) = self.load_split_after {
            o.load_split_after = v;
        }
        if let Some(v) = self.split_cooldown {
            o.split_cooldown = v;
        }
        o.balance = !self.no_balance;
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
mod tests;
