//! What the engine keeps in the lock service (paper §4, "Bigtable uses
//! Chubby"): the master lock, the servers directory, the root tablet's
//! location, and each table's schema and access control.
//!
//! ```text
//! /bigtable/master              writer-locked by the running master; who it is
//! /bigtable/servers/<name>      one ephemeral file per tablet server, writer-locked by it
//! /bigtable/root-tablet         the server holding the root of the tablet map
//! /bigtable/tables/<t>/schema   the table's families, in the .schema text format
//! /bigtable/tables/<t>/acl      the table directory's owner, group and mode
//! ```
//!
//! The lock service is the authority for schemas and ACLs: at startup its
//! copy wins over the one cached in the manifest, and a schema change is
//! written there first.

use crate::schema::{self, NumericNames, TableSchema};
use crate::{Error, Result};
use chubby::{
    Credentials, HandleId, LockMode, LockService, NodeSpec, OpenOptions, OwnerKey, Sequencer,
    SessionId,
};
use std::sync::Arc;

const ROOT: &str = "/bigtable";

/// The engine's session with the lock service.
pub struct Coordinator {
    lock: Arc<dyn LockService>,
    creds: Credentials,
    session: SessionId,
    owner: OwnerKey,
    server_handle: HandleId,
    master: Sequencer,
    server_name: String,
}

fn lock_err(what: &str, e: chubby::Error) -> Error {
    Error::Lock(format!("{what}: {e}"))
}

impl Coordinator {
    /// Becomes the master and registers tablet server `server_name`. Fails if
    /// another master holds the lock (a second daemon on the same cell).
    pub fn start(lock: Arc<dyn LockService>, server_name: &str) -> Result<Coordinator> {
        let creds = Credentials::root();
        for dir in [ROOT, "/bigtable/servers", "/bigtable/tables"] {
            ensure_dir(&*lock, &creds, dir)?;
        }
        let session = lock.open_session(&format!("bigtable pid {}", std::process::id()));
        // An owner key no FUSE lock owner will use: the high bit set, the pid,
        // and a count of coordinators started in this process.
        static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owner = (1u64 << 63) | (u64::from(std::process::id()) << 24) | (n & 0xFF_FFFF);
        let master_path = format!("{ROOT}/master");
        if let Err(e) = lock.create(&creds, &master_path, &NodeSpec::file(0o644)) {
            if !matches!(e, chubby::Error::Exists(_)) {
                return Err(lock_err("create /bigtable/master", e));
            }
        }
        let (master_handle, _) = lock
            .open_handle(
                session,
                &creds,
                &master_path,
                &OpenOptions {
                    read: true,
                    write: true,
                    ..OpenOptions::default()
                },
            )
            .map_err(|e| lock_err("open /bigtable/master", e))?;
        let grant = lock
            .try_lock(&creds, owner, master_handle.into(), LockMode::Exclusive)
            .map_err(|e| match e {
                chubby::Error::WouldBlock => {
                    Error::Lock("another master holds /bigtable/master".into())
                }
                e => lock_err("lock /bigtable/master", e),
            })?;
        let me = format!("{server_name} pid={}\n", std::process::id());
        lock.set_contents(&creds, master_handle.into(), me.as_bytes())
            .map_err(|e| lock_err("write /bigtable/master", e))?;

        // The tablet server's file: ephemeral, locked for as long as it lives.
        let server_path = format!("{ROOT}/servers/{server_name}");
        let spec = NodeSpec {
            ephemeral: true,
            ..NodeSpec::file(0o644)
        };
        let (server_handle, _) = lock
            .open_handle(
                session,
                &creds,
                &server_path,
                &OpenOptions {
                    read: true,
                    write: true,
                    create: Some(spec),
                    exclusive: false,
                },
            )
            .map_err(|e| lock_err("register tablet server", e))?;
        lock.try_lock(&creds, owner, server_handle.into(), LockMode::Exclusive)
            .map_err(|e| lock_err("lock tablet server file", e))?;
        lock.set_contents(&creds, server_handle.into(), me.as_bytes())
            .map_err(|e| lock_err("write tablet server file", e))?;

        let root_tablet = format!("{ROOT}/root-tablet");
        if let Err(e) = lock.create(&creds, &root_tablet, &NodeSpec::file(0o644)) {
            if !matches!(e, chubby::Error::Exists(_)) {
                return Err(lock_err("create /bigtable/root-tablet", e));
            }
        }
        lock.set_contents(
            &creds,
            root_tablet.as_str().into(),
            format!("{server_name}\n").as_bytes(),
        )
        .map_err(|e| lock_err("write /bigtable/root-tablet", e))?;

        Ok(Coordinator {
            lock,
            creds,
            session,
            owner,
            server_handle,
            master: grant.sequencer,
            server_name: server_name.to_string(),
        })
    }

    /// The master lock's sequencer (for fencing, and shown in status).
    pub fn master_sequencer(&self) -> &Sequencer {
        &self.master
    }

    /// Whether this process still holds the master lock.
    pub fn is_master(&self) -> bool {
        self.lock.check_sequencer(&self.master)
    }

    fn table_dir(table: &str) -> String {
        format!("{ROOT}/tables/{table}")
    }

    /// The schema stored for `table`, if any.
    pub fn load_schema(&self, table: &str) -> Result<Option<TableSchema>> {
        let dir = Self::table_dir(table);
        let text = match self
            .lock
            .read(&self.creds, format!("{dir}/schema").as_str().into())
        {
            Ok((t, _)) => t,
            Err(chubby::Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(lock_err("read schema", e)),
        };
        let text = String::from_utf8(text)
            .map_err(|_| Error::corruption(format!("{dir}/schema is not UTF-8")))?;
        let families = schema::parse(&text, &NumericNames)?;
        let mut s = TableSchema::with_families(families);
        if let Ok((acl, _)) = self
            .lock
            .read(&self.creds, format!("{dir}/acl").as_str().into())
        {
            parse_acl(&String::from_utf8_lossy(&acl), &mut s)?;
        }
        Ok(Some(s))
    }

    /// Stores `table`'s schema and ACL (each file replaced atomically).
    pub fn store_schema(&self, table: &str, s: &TableSchema) -> Result<()> {
        let dir = Self::table_dir(table);
        ensure_dir(&*self.lock, &self.creds, &dir)?;
        let text = schema::format(s, &NumericNames);
        let acl = format!("owner={} group={} mode={:04o}\n", s.owner, s.group, s.mode);
        for (name, body) in [("schema", text), ("acl", acl)] {
            let path = format!("{dir}/{name}");
            if let Err(e) = self.lock.create(&self.creds, &path, &NodeSpec::file(0o644)) {
                if !matches!(e, chubby::Error::Exists(_)) {
                    return Err(lock_err("store schema", e));
                }
            }
            self.lock
                .set_contents(&self.creds, path.as_str().into(), body.as_bytes())
                .map_err(|e| lock_err("store schema", e))?;
        }
        Ok(())
    }

    /// Forgets a dropped table.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let dir = Self::table_dir(table);
        for name in ["schema", "acl"] {
            match self.lock.unlink(&self.creds, &format!("{dir}/{name}")) {
                Ok(()) | Err(chubby::Error::NotFound(_)) => {}
                Err(e) => return Err(lock_err("drop table", e)),
            }
        }
        match self.lock.rmdir(&self.creds, &dir) {
            Ok(()) | Err(chubby::Error::NotFound(_)) => Ok(()),
            Err(e) => Err(lock_err("drop table", e)),
        }
    }

    pub fn status(&self) -> Vec<String> {
        vec![
            format!("master {} sequencer {}", self.server_name, self.master),
            format!("master_lock_held {}", self.is_master()),
        ]
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        // Orderly stop: release the locks without lock-delay; the ephemeral
        // server file vanishes with its handle.
        let _ = self
            .lock
            .unlock(self.owner, format!("{ROOT}/master").as_str().into());
        let _ = self.lock.close_handle(self.server_handle);
        let _ = self.lock.close_session(self.session);
    }
}

fn ensure_dir(lock: &dyn LockService, creds: &Credentials, dir: &str) -> Result<()> {
    match lock.create(creds, dir, &NodeSpec::dir(0o755)) {
        Ok(_) | Err(chubby::Error::Exists(_)) => Ok(()),
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
    fn one_master_at_a_time_and_schemas_roundtrip() {
        let (_d, lock) = cell();
        let c = Coordinator::start(lock.clone(), "ts-0").unwrap();
        assert!(c.is_master());
        assert!(matches!(
            Coordinator::start(lock.clone(), "ts-1"),
            Err(Error::Lock(_))
        ));
        let mut s = TableSchema::with_families([FamilySchema::new("anchor")]);
        s.owner = 1000;
        s.mode = 0o750;
        c.store_schema("web", &s).unwrap();
        assert_eq!(c.load_schema("web").unwrap(), Some(s));
        let root = Credentials::root();
        let servers = lock.list(&root, "/bigtable/servers").unwrap();
        assert_eq!(servers.len(), 1);
        c.drop_table("web").unwrap();
        assert_eq!(c.load_schema("web").unwrap(), None);
        drop(c);
        // The server file is ephemeral and the master lock was released.
        assert!(lock.list(&root, "/bigtable/servers").unwrap().is_empty());
        let again = Coordinator::start(lock, "ts-0").unwrap();
        assert!(again.is_master());
    }
}
