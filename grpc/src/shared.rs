//! What every handler of the public API shares (the engine, who owns the
//! mount's root, the instance, how callers are identified) and the hand-off
//! of engine calls to the blocking pool: a leaf below the server and the
//! services it runs.

use engine::Bigtable;
use std::sync::Arc;
use tonic::Status;

/// What every handler shares.
pub struct Shared {
    /// The engine the calls read and write (the mount's own).
    pub bt: Bigtable,
    /// The daemon's user and group: the owner of the mount's root (0755),
    /// so making or deleting a table takes what `mkdir` or `rmdir` there
    /// takes. Tables are made with their caller as owner.
    pub owner: u32,
    /// See `owner`.
    pub group: u32,
    /// Told what each call changed (see [`Changes`]).
    pub changes: Option<Arc<dyn Changes>>,
    /// The instance whose tables are the engine's tables of the same name
    /// (the mount's top level); see `names.rs`.
    pub instance: String,
    /// Who callers are (see [`crate::Auth`]).
    pub auth: crate::Auth,
}

/// Told what each call changed, once the change is made (also after a call
/// that failed part way), so that caches over the same engine, such as the
/// mount's kernel caches, drop what they hold.
pub trait Changes: Send + Sync {
    /// Cells of these rows of `table` were written or deleted.
    fn rows(&self, table: &str, rows: &[&[u8]]);
    /// The same, written through another daemon of the cluster.
    fn rows_from_peer(&self, table: &str, rows: &[&[u8]]) {
        self.rows(table, rows)
    }
    /// `table` was created or deleted, its families changed, or a range of
    /// its rows dropped.
    fn table(&self, table: &str);
    /// Every write another daemon of the cluster acknowledges before
    /// `until` is reported here first ([`Changes::rows_from_peer`]): this
    /// daemon's leases at all of them last until then (docs/coherence.md).
    /// Told after each renewal; the present when some daemon holds no
    /// lease of this one.
    fn writes_reported_until(&self, until: std::time::Instant) {
        let _ = until;
    }
}

impl Shared {
    /// The engine table a request's `projects/P/instances/I/tables/T` names.
    pub(crate) fn table(&self, name: &str) -> Result<String, Status> {
        crate::names::table(name, &self.instance)
    }

    /// Refuses unless `who` has `want` on the mount's root (the daemon's
    /// user's, 0755): what `mkdir` and `rmdir` of a table take.
    pub(crate) fn root(
        &self,
        who: &engine::access::Identity,
        want: u32,
        what: &str,
    ) -> Result<(), Status> {
        if who.may(self.owner, self.group, 0o755, want) {
            return Ok(());
        }
        Err(crate::auth::denied(
            who,
            &format!("only the daemon's user (uid {}) may {what}", self.owner),
        ))
    }

    pub(crate) fn rows_changed(&self, table: &str, rows: &[&[u8]]) {
        if let Some(c) = &self.changes {
            c.rows(table, rows);
        }
    }

    pub(crate) fn table_changed(&self, table: &str) {
        if let Some(c) = &self.changes {
            c.table(table);
        }
    }
}

/// Runs `f` on the blocking pool (engine calls block).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("handler failed: {e}")))?
}
