//! [`EtcdCell`]: the lock service on an etcd cluster, so that daemons on
//! several machines share one cell. The mapping (see docs/etcd.md):
//!
//! - the daemon's session is one etcd lease it keeps alive; when
//!   keep-alives have failed for longer than the lease, the daemon ends the
//!   session itself ([`lease`]), not trusting etcd's clock to do it first;
//! - nodes are keys under the prefix ([`node`]); ephemeral nodes are bound
//!   to the lease; sessions and handles of the trait are the daemon's own;
//! - locks are waiter keys under the lock's prefix, granted in
//!   `create_revision` order; a sequencer carries the holder key's
//!   `create_revision` ([`locks`]);
//! - events come from one watch on the prefix ([`watch`]), which also
//!   answers the liveness loops' questions without a request ([`known`]).
//!
//! The trait is synchronous: calls run on a small tokio runtime inside the
//! cell, each bounded by [`EtcdOptions::op_timeout`].

mod config;
mod known;
mod lease;
mod locks;
mod node;
mod ns;
mod service;
mod watch;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::session::Sessions;
use crate::types::{HandleId, LockMode, NodeId, OwnerKey, ROOT_ID};

pub use config::EtcdOptions;
use lease::LeaseState;
use node::{now_ns, NodeVal};
use watch::WatchState;

/// A lock this daemon holds: its waiter key in etcd and who took it.
#[derive(Clone, Debug)]
struct Held {
    node: NodeId,
    owner: OwnerKey,
    key: String,
    rev: i64,
    mode: LockMode,
    handle: Option<HandleId>,
}

/// What only this daemon knows: the trait's sessions and handles, and the
/// locks it holds.
#[derive(Default)]
struct Local {
    sessions: Sessions,
    /// Each open handle's node path (updated by this daemon's renames).
    paths: HashMap<HandleId, String>,
    held: Vec<Held>,
    /// Dead-holder markers, when this daemon first saw each one orphaned:
    /// the lock-delay counts from then (later than the death, never earlier).
    delay_seen: HashMap<String, Instant>,
    /// Leases this daemon lost: keys still bound to them prove nothing.
    lost_leases: HashSet<i64>,
}

/// A lock-service cell in etcd, under one key prefix.
pub struct EtcdCell {
    opts: EtcdOptions,
    prefix: String,
    /// Taken by `drop`, which shuts it down without blocking (the last
    /// reference may go on another runtime's thread).
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    lease: Arc<LeaseState>,
    local: Mutex<Local>,
    watch: Arc<WatchState>,
    stop: Arc<AtomicBool>,
    names: AtomicU64,
    /// Requests sent to etcd (`status`'s `lock_requests`).
    sent: AtomicU64,
}

fn etcd_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::io(
        format!("etcd {what}: {e}"),
        std::io::Error::from_raw_os_error(libc::EIO),
    )
}

impl EtcdCell {
    /// Connects, makes the root directory if the prefix is new, takes the
    /// daemon's lease and starts keeping it alive and watching the prefix.
    pub fn open(opts: EtcdOptions) -> Result<Arc<EtcdCell>> {
        if opts.default_lock_delay > opts.max_lock_delay {
            return Err(Error::invalid("default lock-delay exceeds the maximum"));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("chubby-etcd")
            .enable_all()
            .build()
            .map_err(|e| Error::io("tokio runtime for etcd", e))?;
        let connect = opts.connect_options()?;
        let endpoints = opts.urls();
        let client = rt
            .block_on(async {
                tokio::time::timeout(opts.op_timeout, Client::connect(endpoints, Some(connect)))
                    .await
            })
            .map_err(|_| etcd_err("connect", "timed out"))?
            .map_err(|e| etcd_err("connect", e))?;
        let prefix = opts.prefix.trim_end_matches('/').to_string();
        let cell = Arc::new(EtcdCell {
            lease: Arc::new(LeaseState::default()),
            watch: Arc::new(WatchState::default()),
            stop: Arc::new(AtomicBool::new(false)),
            local: Mutex::new(Local::default()),
            names: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            prefix,
            rt: Some(rt),
            client,
            opts,
        });
        cell.ensure_root()?;
        cell.grant_lease()?;
        lease::start_keeper(&cell)?;
        watch::start(&cell)?;
        log::info!(
            "chubby: cell on etcd {} prefix {:?}",
            cell.opts.endpoints.join(","),
            cell.prefix
        );
        Ok(cell)
    }

    /// Runs an etcd call on the cell's runtime, bounded by the op time-out.
    /// Works from any thread, a tokio worker of another runtime included.
    fn run<T, F>(&self, what: &str, f: impl FnOnce(Client) -> F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = std::result::Result<T, etcd_client::Error>> + Send + 'static,
    {
        let fut = f(self.client.clone());
        self.sent.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        self.spawn(async move {
            let _ = tx.send(fut.await);
        });
        match rx.recv_timeout(self.opts.op_timeout) {
            Ok(r) => r.map_err(|e| etcd_err(what, e)),
            Err(_) => Err(etcd_err(what, "timed out")),
        }
    }

    /// Runs a task on the cell's runtime (a no-op once it is shut down).
    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        if let Some(rt) = &self.rt {
            rt.spawn(fut);
        }
    }

    fn txn(&self, what: &str, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.run(what, |mut c| async move { c.txn(txn).await })
    }

    /// The revision a response was made at.
    fn rev_of(h: Option<&etcd_client::ResponseHeader>) -> i64 {
        h.map_or(0, |h| h.revision())
    }

    fn ensure_root(&self) -> Result<()> {
        let key = node::node_key(&self.prefix, "/");
        let t = now_ns();
        let root = NodeVal {
            id: ROOT_ID,
            kind: crate::types::NodeKind::Dir,
            mode: self.opts.root_mode & 0o7777,
            uid: self.opts.root_uid,
            gid: self.opts.root_gid,
            content_gen: 0,
            lock_gen: 0,
            lock_delay_ms: self.opts.default_lock_delay.as_millis() as u64,
            ephemeral: false,
            mtime_ns: t,
            ctime_ns: t,
            data: Vec::new(),
        };
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, root.encode(), None)]);
        self.txn("create the root", txn).map(|_| ())
    }

    /// Draws a node id no node of this prefix ever had: the revision of a put.
    fn next_id(&self) -> Result<NodeId> {
        let key = format!("{}/idgen", self.prefix);
        let r = self.run("draw a node id", |mut c| async move {
            c.put(key, "", None).await
        })?;
        Ok(Self::rev_of(r.header()) as NodeId)
    }

    /// Options for a put that keeps a key's lease (0: none).
    fn lease_opts(lease: i64) -> Option<PutOptions> {
        (lease != 0).then(|| PutOptions::new().with_lease(lease))
    }

    /// Waits (briefly) until the watch has delivered revision `rev`, so a
    /// caller sees the events of its own change once the call returns.
    fn settle(&self, rev: i64) {
        self.watch.wait_for(rev, Duration::from_secs(2));
    }
}

#[cfg(feature = "testing")]
impl EtcdCell {
    /// Stops keeping the lease alive and watching, as a killed daemon
    /// would; the lease then expires in etcd. For tests only.
    pub fn abandon(self: Arc<Self>) {
        self.stop.store(true, Ordering::SeqCst);
        std::mem::forget(self);
    }
}

impl Drop for EtcdCell {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // An orderly stop: the lease goes at once, with every ephemeral node
        // and waiter key bound to it (locks are then free without delay only
        // if their markers went too; they did not, so lock-delay applies,
        // as for a daemon that died).
        let id = self.lease.id();
        if id != 0 {
            let _ = self.run("revoke the lease", move |mut c| async move {
                c.lease_revoke(id).await
            });
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
