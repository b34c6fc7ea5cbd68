//! What the engine keeps in the lock service (paper §4, "Bigtable uses
//! Chubby"): the master lock, the servers directory, the root tablet's
//! location, and each table's schema and access control.
//!
//! ```text
//! /bigtable/master              writer-locked by the active master; its name
//! /bigtable/servers/<name>      one ephemeral file per tablet server, writer-locked by it
//! /bigtable/daemons/<name>      one ephemeral file per daemon with a mount others invalidate
//! /bigtable/root-tablet         the tablet server serving the root tablet
//! /bigtable/tables/<t>/schema   the table's families, in the .schema text format
//! /bigtable/tables/<t>/acl      the table directory's owner, group and mode
//! /bigtable/numbers             the next SSTable/tablet number daemons sharing a store may take
//! ```
//!
//! A tablet server serves only while it holds its file's lock; the master
//! declares a server dead when it can take that lock itself. Schemas are
//! also in METADATA; when both exist, the lock service's copy wins.
//!
//! Every node below `/bigtable` is root's alone (files 0600, directories
//! 0700): other users of a shared cell (`.chubby/` is 1777) can neither
//! read these nor lock them, so none can hold up a master's election.

use crate::schema::{self, NumericNames, TableSchema};
use crate::{Error, Result};
use chubby::{
    Credentials, HandleId, LockMode, LockService, NodeSpec, OpenOptions, OwnerKey, Sequencer,
    SessionId,
};
use std::sync::Arc;
use std::time::Duration;

const ROOT: &str = "/bigtable";
pub const SERVERS_DIR: &str = "/bigtable/servers";
/// Every daemon that takes the internal RPC, whether it runs tablet
/// servers or not: where writers find the mounts to keep coherent.
const DAEMONS_DIR: &str = "/bigtable/daemons";
const MASTER_FILE: &str = "/bigtable/master";
const ROOT_TABLET_FILE: &str = "/bigtable/root-tablet";
const NUMBERS_FILE: &str = "/bigtable/numbers";
const TABLES_DIR: &str = "/bigtable/tables";
/// The engine's files: root's alone. Taking a lock on a node of root needs
/// write permission, so no other user can read, lock or write them.
const PRIVATE_FILE: u32 = 0o600;
/// The directories under `/bigtable`: root's alone (server addresses, table
/// names and schemas stay out of other users' sight).
const PRIVATE_DIR: u32 = 0o700;
/// `/bigtable` itself may be listed: it shows only the fixed names above.
const ROOT_DIR: u32 = 0o755;
/// How long a daemon waits for the numbers counter's lock.
const NUMBERS_WAIT: Duration = Duration::from_secs(30);

fn lock_err(what: &str, e: chubby::Error) -> Error {
    Error::Lock(format!("{what}: {e}"))
}

/// An owner key no FUSE lock owner uses: the high bit set, the pid, and a
/// count of owners made in this process.
fn new_owner() -> OwnerKey {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (1u64 << 63) | (u64::from(std::process::id()) << 24) | (n & 0xFF_FFFF)
}

/// Creates the engine's directories and files in the lock service, and
/// takes other users' access away from those an older version made
/// readable by everyone.
pub fn ensure_layout(lock: &dyn LockService) -> Result<()> {
    let creds = Credentials::root();
    ensure_dir(lock, &creds, ROOT, ROOT_DIR)?;
    for dir in [SERVERS_DIR, TABLES_DIR, DAEMONS_DIR] {
        ensure_dir(lock, &creds, dir, PRIVATE_DIR)?;
    }
    let file = |path: &str| match lock.create(&creds, path, &NodeSpec::file(PRIVATE_FILE)) {
        Ok(_) => Ok(()),
        Err(chubby::Error::Exists(_)) => make_private(lock, path, PRIVATE_FILE),
        Err(e) => Err(lock_err(&format!("create {path}"), e)),
    };
    file(MASTER_FILE)?;
    file(ROOT_TABLET_FILE)?;
    match lock.stat(&creds, NUMBERS_FILE.into()) {
        Ok(_) => make_private(lock, NUMBERS_FILE, PRIVATE_FILE),
        Err(chubby::Error::NotFound(_)) => Ok(()),
        Err(e) => Err(lock_err(&format!("stat {NUMBERS_FILE}"), e)),
    }
}

/// Sets an existing node of the engine to `mode` and root's ownership if
/// it is not so already.
fn make_private(lock: &dyn LockService, path: &str, mode: u32) -> Result<()> {
    let creds = Credentials::root();
    let st = lock
        .stat(&creds, path.into())
        .map_err(|e| lock_err(&format!("stat {path}"), e))?;
    if st.uid != 0 || st.gid != 0 {
        lock.chown(&creds, path.into(), Some(0), Some(0))
            .map_err(|e| lock_err(&format!("chown {path}"), e))?;
    }
    if st.mode & 0o7777 != mode {
        lock.chmod(&creds, path.into(), mode)
            .map_err(|e| lock_err(&format!("chmod {path}"), e))?;
    }
    Ok(())
}

/// A session with one lock held through one handle: a tablet server's
/// registration or a master's mastership.
pub struct Lease {
    lock: Arc<dyn LockService>,
    session: SessionId,
    owner: OwnerKey,
    handle: HandleId,
    /// The lock's sequencer: what fences its holder's writes.
    pub sequencer: Sequencer,
    path: String,
}

impl Lease {
    /// Registers tablet server `name`: creates its ephemeral file in the
    /// servers directory and takes its lock.
    pub fn register_server(
        lock: Arc<dyn LockService>,
        name: &str,
        addr: Option<&str>,
        lock_delay: Duration,
    ) -> Result<Lease> {
        let path = format!("{SERVERS_DIR}/{name}");
        let spec = NodeSpec {
            ephemeral: true,
            ..NodeSpec::file(PRIVATE_FILE)
        };
        let lease = Self::take(lock, &path, Some(spec), holder_line(name, addr))?
            .ok_or_else(|| Error::Lock(format!("{path} is locked by another server")))?;
        let creds = Credentials::root();
        lease
            .lock
            .set_lock_delay(&creds, path.as_str().into(), lock_delay)
            .map_err(|e| lock_err("set a server's lock-delay", e))?;
        Ok(lease)
    }

    /// Registers the daemon that takes the internal RPC at `addr`: its
    /// ephemeral file in the daemons directory, locked (None: another
    /// process holds that address's file).
    pub fn register_daemon(lock: Arc<dyn LockService>, addr: &str) -> Result<Option<Lease>> {
        let name: String = addr
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = format!("{DAEMONS_DIR}/{name}");
        let spec = NodeSpec {
            ephemeral: true,
            ..NodeSpec::file(PRIVATE_FILE)
        };
        Self::take(lock, &path, Some(spec), holder_line(&name, Some(addr)))
    }

    /// Tries to become the master; `None` while another master holds the lock.
    /// A master that dies holding the lock delays the next by `lock_delay`.
    pub fn try_master(
        lock: Arc<dyn LockService>,
        name: &str,
        addr: Option<&str>,
        lock_delay: Duration,
    ) -> Result<Option<Lease>> {
        let lease = Self::take(lock, MASTER_FILE, None, holder_line(name, addr))?;
        if let Some(l) = &lease {
            l.lock
                .set_lock_delay(&Credentials::root(), MASTER_FILE.into(), lock_delay)
                .map_err(|e| lock_err("set the master lock's lock-delay", e))?;
        }
        Ok(lease)
    }

    fn take(
        lock: Arc<dyn LockService>,
        path: &str,
        create: Option<NodeSpec>,
        contents: String,
    ) -> Result<Option<Lease>> {
        let creds = Credentials::root();
        let session = lock.open_session(&format!("bigtable {path}"));
        let opened = lock.open_handle(
            session,
            &creds,
            path,
            &OpenOptions {
                read: true,
                write: true,
                create,
                exclusive: false,
            },
        );
        let handle = match opened {
            Ok((h, _)) => h,
            Err(e) => {
                let _ = lock.close_session(session);
                return Err(lock_err(&format!("open {path}"), e));
            }
        };
        let owner = new_owner();
        let grant = match lock.try_lock(&creds, owner, handle.into(), LockMode::Exclusive) {
            Ok(g) => g,
            Err(chubby::Error::WouldBlock) => {
                let _ = lock.close_session(session);
                return Ok(None);
            }
            Err(e) => {
                let _ = lock.close_session(session);
                return Err(lock_err(&format!("lock {path}"), e));
            }
        };
        lock.set_contents(&creds, handle.into(), contents.as_bytes())
            .map_err(|e| lock_err(&format!("write {path}"), e))?;
        Ok(Some(Lease {
            lock,
            session,
            owner,
            handle,
            sequencer: grant.sequencer,
            path: path.to_string(),
        }))
    }

    /// Whether the lock is still held (false once the session expired, the
    /// file was deleted or someone else took the lock). Asked many times a
    /// second: answered from what the lock service was told (etcd's watch)
    /// when that shows it held, else by the exact check.
    pub fn held(&self) -> bool {
        self.lock.known_valid(&self.sequencer) || self.lock.check_sequencer(&self.sequencer)
    }

    /// Ends the session as a crash would: the lock enters its lock-delay.
    pub fn expire(&self) {
        self.lock.release_owner_dead(self.owner);
        let _ = self.lock.close_session(self.session);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Orderly stop: no lock-delay; an ephemeral file vanishes with its handle.
        let _ = self.lock.unlock(self.owner, self.path.as_str().into());
        let _ = self.lock.close_handle(self.handle);
        let _ = self.lock.close_session(self.session);
    }
}

/// What a lock holder writes in its file: its name, its process and, when
/// other daemons may call it, the address they dial.
fn holder_line(name: &str, addr: Option<&str>) -> String {
    match addr {
        Some(a) => format!("{name} pid={} addr={a}\n", std::process::id()),
        None => format!("{name} pid={}\n", std::process::id()),
    }
}

/// The `addr=` word of a holder's file.
fn holder_addr(contents: &[u8]) -> Option<String> {
    String::from_utf8_lossy(contents)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr=").map(str::to_string))
}

/// The address tablet server `name` takes calls on (None: not registered,
/// or a server that other daemons cannot call).
pub fn server_address(lock: &dyn LockService, name: &str) -> Option<String> {
    let path = format!("{SERVERS_DIR}/{name}");
    let (contents, _) = lock.read(&Credentials::root(), path.as_str().into()).ok()?;
    holder_addr(&contents)
}

/// The active master's name and the address it takes calls on.
pub fn master_address(lock: &dyn LockService) -> Option<(String, String)> {
    let (contents, _) = lock.read(&Credentials::root(), MASTER_FILE.into()).ok()?;
    let name = String::from_utf8_lossy(&contents)
        .split_whitespace()
        .next()?
        .to_string();
    Some((name, holder_addr(&contents)?))
}

/// The addresses of every registered daemon (see [`Lease::register_daemon`]).
pub fn daemon_addresses(lock: &dyn LockService) -> Vec<String> {
    let creds = Credentials::root();
    let Ok(entries) = lock.list(&creds, DAEMONS_DIR) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| daemon_address(lock, &e.name))
        .collect()
}

/// The names in the daemons directory as the lock service was told of
/// them (etcd's watch), else as a listing reads them.
pub fn known_daemons(lock: &dyn LockService) -> Vec<String> {
    match lock.known_list(DAEMONS_DIR) {
        Some(names) => names,
        None => lock
            .list(&Credentials::root(), DAEMONS_DIR)
            .map(|es| es.into_iter().map(|e| e.name).collect())
            .unwrap_or_default(),
    }
}

/// The address registered daemon `name` takes calls on (a name is made
/// from its address, so this never changes).
pub fn daemon_address(lock: &dyn LockService, name: &str) -> Option<String> {
    let path = format!("{DAEMONS_DIR}/{name}");
    let (contents, _) = lock.read(&Credentials::root(), path.as_str().into()).ok()?;
    holder_addr(&contents)
}

/// Names of the files in the servers directory.
pub fn list_servers(lock: &dyn LockService) -> Result<Vec<String>> {
    let entries = lock
        .list(&Credentials::root(), SERVERS_DIR)
        .map_err(|e| lock_err("list servers", e))?;
    Ok(entries.into_iter().map(|e| e.name).collect())
}

/// The servers directory as the lock service was told of it (etcd's
/// watch), else as [`list_servers`] reads it: for the master's rounds, not
/// for what must not miss a server that has just registered.
pub fn known_servers(lock: &dyn LockService) -> Result<Vec<String>> {
    match lock.known_list(SERVERS_DIR) {
        Some(names) => Ok(names),
        None => list_servers(lock),
    }
}

/// Whether someone holds the lock of `path`, asked without a write: with
/// `exact`, the holders the lock service reports (a read); else what it was
/// told of (etcd's watch; the embedded cell always says no, so the caller
/// goes on to try the lock as it always did).
pub fn looks_held(lock: &dyn LockService, path: &str, exact: bool) -> bool {
    if exact {
        lock.holders(path.into()).is_ok_and(|h| !h.is_empty())
    } else {
        lock.known_held(path)
    }
}

/// The master's check of a server (paper §5.2): if it can take the server's
/// lock, the server is dead; the master then deletes its file so the server
/// can never serve again. Returns whether the server is dead. A lock that
/// [`looks_held`] is not tried: trying writes to the lock service.
pub fn reap_server(lock: &dyn LockService, name: &str, exact: bool) -> Result<bool> {
    let creds = Credentials::root();
    let path = format!("{SERVERS_DIR}/{name}");
    if looks_held(lock, &path, exact) {
        return Ok(false);
    }
    // A server writes its file after taking its lock: an empty file is one
    // still registering (its ephemeral file vanishes if it dies meanwhile).
    match lock.read(&creds, path.as_str().into()) {
        Ok((contents, _)) if contents.is_empty() => return Ok(false),
        Ok(_) => {}
        Err(chubby::Error::NotFound(_)) => {
            log::info!("{path} is gone: its server is dead");
            return Ok(true);
        }
        Err(e) => return Err(lock_err(&format!("read {path}"), e)),
    }
    let owner = new_owner();
    match lock.try_lock(&creds, owner, path.as_str().into(), LockMode::Exclusive) {
        Ok(_) => {
            log::info!("{path} was not locked: its server is dead");
            let _ = lock.unlock(owner, path.as_str().into());
            match lock.unlink(&creds, &path) {
                Ok(()) | Err(chubby::Error::NotFound(_)) => Ok(true),
                Err(e) => Err(lock_err("delete a dead server's file", e)),
            }
        }
        Err(chubby::Error::NotFound(_)) => Ok(true),
        Err(chubby::Error::WouldBlock) => Ok(false),
        Err(e) => Err(lock_err(&format!("check {path}"), e)),
    }
}

/// Reserves `count` numbers no daemon has taken, none below `floor`:
/// returns the first. The counter is read and advanced under its lock,
/// held through a session of its own so that a daemon dying meanwhile
/// lets it go.
pub fn reserve_numbers(lock: &dyn LockService, floor: u64, count: u64) -> Result<u64> {
    let creds = Credentials::root();
    let session = lock.open_session("bigtable numbers");
    let result = (|| {
        let (handle, _) = lock
            .open_handle(
                session,
                &creds,
                NUMBERS_FILE,
                &OpenOptions {
                    read: true,
                    write: true,
                    create: Some(NodeSpec::file(PRIVATE_FILE)),
                    exclusive: false,
                },
            )
            .map_err(|e| lock_err("open /bigtable/numbers", e))?;
        let owner = new_owner();
        let deadline = std::time::Instant::now() + NUMBERS_WAIT;
        lock.lock_wait(
            &creds,
            owner,
            handle.into(),
            LockMode::Exclusive,
            Some(deadline),
            &|| false,
        )
        .map_err(|e| lock_err("lock /bigtable/numbers", e))?;
        let (text, _) = lock
            .read(&creds, handle.into())
            .map_err(|e| lock_err("read /bigtable/numbers", e))?;
        let stored = String::from_utf8_lossy(&text).trim().parse::<u64>().ok();
        if stored.is_none() && !text.is_empty() {
            return Err(Error::corruption(format!(
                "/bigtable/numbers holds {:?}, not a number",
                String::from_utf8_lossy(&text)
            )));
        }
        let start = stored.unwrap_or(0).max(floor);
        lock.set_contents(
            &creds,
            handle.into(),
            format!("{}\n", start + count).as_bytes(),
        )
        .map_err(|e| lock_err("write /bigtable/numbers", e))?;
        let _ = lock.unlock(owner, handle.into());
        Ok(start)
    })();
    let _ = lock.close_session(session);
    result
}

/// Whether another master looks active (see [`looks_held`]): a standby
/// then does not try the master lock.
pub fn master_looks_held(lock: &dyn LockService, exact: bool) -> bool {
    looks_held(lock, MASTER_FILE, exact)
}

/// The server named in `/bigtable/root-tablet` ("" if none).
pub fn root_location(lock: &dyn LockService) -> Result<String> {
    match lock.read(&Credentials::root(), ROOT_TABLET_FILE.into()) {
        Ok((b, _)) => Ok(String::from_utf8_lossy(&b).trim().to_string()),
        Err(chubby::Error::NotFound(_)) => Ok(String::new()),
        Err(e) => Err(lock_err("read /bigtable/root-tablet", e)),
    }
}

/// Records the root tablet's server; only the holder of `master` may.
pub fn set_root_location(lock: &dyn LockService, master: &Sequencer, server: &str) -> Result<()> {
    if !lock.check_sequencer(master) {
        return Err(Error::Lock("no longer the master".into()));
    }
    lock.set_contents(
        &Credentials::root(),
        ROOT_TABLET_FILE.into(),
        format!("{server}\n").as_bytes(),
    )
    .map_err(|e| lock_err("write /bigtable/root-tablet", e))?;
    Ok(())
}

/// The active master's name as its file says ("" if none).
pub fn master_name(lock: &dyn LockService) -> String {
    match lock.read(&Credentials::root(), MASTER_FILE.into()) {
        Ok((b, _)) => String::from_utf8_lossy(&b)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string(),
        Err(_) => String::new(),
    }
}

/// Schemas and ACLs in the lock service.
pub struct Schemas<'a>(pub &'a dyn LockService);

impl Schemas<'_> {
    fn table_dir(table: &str) -> String {
        format!("{TABLES_DIR}/{table}")
    }

    /// The schema stored for `table`, if any.
    pub fn load_schema(&self, table: &str) -> Result<Option<TableSchema>> {
        let dir = Self::table_dir(table);
        let text = match self.0.read(
            &Credentials::root(),
            format!("{dir}/schema").as_str().into(),
        ) {
            Ok((t, _)) => t,
            Err(chubby::Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(lock_err("read schema", e)),
        };
        let text = String::from_utf8(text)
            .map_err(|_| Error::corruption(format!("{dir}/schema is not UTF-8")))?;
        // The families and the `.table` line (deletion protection).
        let (mut s, _) = TableSchema::default().apply_text(&text, &NumericNames, true)?;
        if let Ok((acl, _)) = self
            .0
            .read(&Credentials::root(), format!("{dir}/acl").as_str().into())
        {
            parse_acl(&String::from_utf8_lossy(&acl), &mut s)?;
        }
        Ok(Some(s))
    }

    /// Stores `table`'s schema and ACL (each file replaced atomically).
    pub fn store_schema(&self, table: &str, s: &TableSchema) -> Result<()> {
        let dir = Self::table_dir(table);
        ensure_dir(self.0, &Credentials::root(), &dir, PRIVATE_DIR)?;
        let text = schema::format(s, &NumericNames);
        let acl = format!("owner={} group={} mode={:04o}\n", s.owner, s.group, s.mode);
        for (name, body) in [("schema", text), ("acl", acl)] {
            let path = format!("{dir}/{name}");
            if let Err(e) =
                self.0
                    .create(&Credentials::root(), &path, &NodeSpec::file(PRIVATE_FILE))
            {
                if !matches!(e, chubby::Error::Exists(_)) {
                    return Err(lock_err("store schema", e));
                }
            }
            self.0
                .set_contents(&Credentials::root(), path.as_str().into(), body.as_bytes())
                .map_err(|e| lock_err("store schema", e))?;
        }
        Ok(())
    }

    /// Forgets a dropped table.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let dir = Self::table_dir(table);
        for name in ["schema", "acl"] {
            match self
                .0
                .unlink(&Credentials::root(), &format!("{dir}/{name}"))
            {
                Ok(()) | Err(chubby::Error::NotFound(_)) => {}
                Err(e) => return Err(lock_err("drop table", e)),
            }
        }
        match self.0.rmdir(&Credentials::root(), &dir) {
            Ok(()) | Err(chubby::Error::NotFound(_)) => Ok(()),
            Err(e) => Err(lock_err("drop table", e)),
        }
    }
}

fn ensure_dir(lock: &dyn LockService, creds: &Credentials, dir: &str, mode: u32) -> Result<()> {
    match lock.create(creds, dir, &NodeSpec::dir(mode)) {
        Ok(_) => Ok(()),
        Err(chubby::Error::Exists(_)) => make_private(lock, dir, mode),
        Err(e) => Err(lock_err(&format!("create {dir}"), e)),
    }
}

fn parse_acl(text: &str, s: &mut TableSchema) -> Result<()> {
    for word in text.split_whitespace() {
        let bad = || Error::corruption(format!("table acl: bad setting {word:?}"));
        let (k, v) = word.split_once('=').ok_or_else(bad)?;
        match k {
            "owner" => s.owner = v.parse().map_err(|_| bad())?,
            "group" => s.group = v.parse().map_err(|_| bad())?,
            "mode" => s.mode = u32::from_str_radix(v, 8).map_err(|_| bad())?,
            _ => return Err(bad()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FamilySchema;

    fn cell() -> (tempfile::TempDir, Arc<dyn LockService>) {
        let dir = tempfile::tempdir().unwrap();
        let cell = chubby::LocalCell::open(dir.path(), chubby::CellOptions::default()).unwrap();
        (dir, cell)
    }

    #[test]
    fn one_master_at_a_time_and_dead_servers_are_reaped() {
        let (_d, lock) = cell();
        ensure_layout(&*lock).unwrap();
        let m = Lease::try_master(lock.clone(), "m0", None, Duration::from_millis(1))
            .unwrap()
            .unwrap();
        assert!(m.held());
        assert!(
            Lease::try_master(lock.clone(), "m1", None, Duration::from_millis(1))
                .unwrap()
                .is_none()
        );
        assert_eq!(master_name(&*lock), "m0");
        let s = Lease::register_server(
            lock.clone(),
            "ts-0",
            Some("127.0.0.1:9"),
            Duration::from_millis(1),
        )
        .unwrap();
        assert_eq!(list_servers(&*lock).unwrap(), vec!["ts-0".to_string()]);
        assert_eq!(
            server_address(&*lock, "ts-0").as_deref(),
            Some("127.0.0.1:9"),
            "other daemons find the address the server registered"
        );
        assert_eq!(server_address(&*lock, "ts-9"), None);
        assert!(
            !reap_server(&*lock, "ts-0", false).unwrap(),
            "a live server is not reaped"
        );
        assert!(!reap_server(&*lock, "ts-0", true).unwrap());
        s.expire();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !reap_server(&*lock, "ts-0", false).unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "lock-delay never ended"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!s.held());
        assert!(list_servers(&*lock).unwrap().is_empty());
        set_root_location(&*lock, &m.sequencer, "ts-1").unwrap();
        assert_eq!(root_location(&*lock).unwrap(), "ts-1");
        drop(m);
        let m1 = Lease::try_master(lock.clone(), "m1", None, Duration::from_millis(1))
            .unwrap()
            .unwrap();
        assert!(m1.held());
    }

    #[test]
    fn the_engines_nodes_are_roots_alone() {
        let (_d, lock) = cell();
        // An older layout: readable by everyone.
        let root = Credentials::root();
        lock.create(&root, ROOT, &NodeSpec::dir(0o755)).unwrap();
        lock.create(&root, MASTER_FILE, &NodeSpec::file(0o644))
            .unwrap();
        lock.create(&root, NUMBERS_FILE, &NodeSpec::file(0o666))
            .unwrap();
        ensure_layout(&*lock).unwrap();
        reserve_numbers(&*lock, 1, 1).unwrap();
        Schemas(&*lock)
            .store_schema("t", &TableSchema::with_families([FamilySchema::new("f")]))
            .unwrap();
        let _m = Lease::try_master(lock.clone(), "m0", None, Duration::from_millis(1))
            .unwrap()
            .unwrap();
        let _s =
            Lease::register_server(lock.clone(), "ts-0", None, Duration::from_millis(1)).unwrap();
        let mode = |p: &str| lock.stat(&root, p.into()).unwrap().mode;
        for f in [
            MASTER_FILE,
            ROOT_TABLET_FILE,
            NUMBERS_FILE,
            "/bigtable/servers/ts-0",
        ] {
            assert_eq!(mode(f), 0o600, "{f}");
        }
        for d in [SERVERS_DIR, TABLES_DIR, "/bigtable/tables/t"] {
            assert_eq!(mode(d), 0o700, "{d}");
        }
        let nobody = Credentials {
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        };
        for f in [MASTER_FILE, NUMBERS_FILE] {
            assert!(lock.read(&nobody, f.into()).is_err(), "{f} read");
            assert!(
                lock.try_lock(&nobody, 7, f.into(), LockMode::Shared)
                    .is_err(),
                "{f} locked"
            );
        }
        assert!(lock.list(&nobody, TABLES_DIR).is_err());
    }

    #[test]
    fn schemas_roundtrip() {
        let (_d, lock) = cell();
        ensure_layout(&*lock).unwrap();
        let c = Schemas(&*lock);
        let mut s = TableSchema::with_families([FamilySchema::new("anchor")]);
        s.owner = 1000;
        s.mode = 0o750;
        s.deletion_protection = true;
        c.store_schema("web", &s).unwrap();
        assert_eq!(c.load_schema("web").unwrap(), Some(s));
        c.drop_table("web").unwrap();
        assert_eq!(c.load_schema("web").unwrap(), None);
    }
}
