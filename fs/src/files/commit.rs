//! Closing and syncing: a cell's whole value is committed as one new
//! version on close (or fsync); `.schema` is applied the same way.

use super::*;

impl Ctx {
    /// FUSE `flush` (each `close`): commits what was written, so that when
    /// `close` returns the value is in the commit log. A close by a
    /// descriptor table (`closer`) that did not write through this open
    /// file commits nothing (None: commit whoever closes).
    pub fn flush(&self, fh: u64, closer: Option<u64>) -> FsResult<()> {
        let Some(h) = self.handles.get(fh) else {
            return Ok(());
        };
        if closer.is_some_and(|c| !self.handles.commits_on_close(fh, c)) {
            return Ok(());
        }
        let mut g = h.lock();
        match &mut *g {
            Handle::Cell(c) if c.failed.is_some() => {
                self.abandon_created(c);
                Err(c.failed.unwrap_or(Errno::EIO))
            }
            Handle::Cell(c) if c.dirty && c.wrote => self.commit_cell(c),
            Handle::Schema(s) if s.failed.is_some() => Err(s.failed.unwrap_or(Errno::EINVAL)),
            Handle::Schema(s) if s.dirty && s.wrote => self.commit_schema(s),
            Handle::Schema(s) if s.dirty => self.check_schema_truncation(s),
            Handle::Control(buf) => self.run_control(buf, true),
            Handle::Mutate(m) => {
                if let Some((code, _)) = m.failed.take() {
                    m.parser.reset();
                    return Err(code);
                }
                if m.parser.is_empty() {
                    return Ok(());
                }
                self.commit_batch(m)
            }
            _ => Ok(()),
        }
    }

    /// Whether releasing `fh` may commit something (and so belongs on a
    /// commit worker): what [`Ctx::release`] commits or abandons. A reader's
    /// release, or a writer's whose close committed, only drops its handle.
    pub fn release_commits(&self, fh: u64) -> bool {
        let Some(h) = self.handles.get(fh) else {
            return false;
        };
        let g = h.lock();
        match &*g {
            Handle::Cell(c) => (c.dirty && c.failed.is_none()) || c.created,
            Handle::Schema(s) => s.dirty,
            Handle::Mutate(m) => m.failed.is_none() && !m.parser.is_empty(),
            Handle::Control(_) => true,
            Handle::Scan(_) | Handle::Content(_) | Handle::Dir(_) => false,
        }
    }

    /// FUSE `release` (last close): commits anything left (a truncation or
    /// creation without writes) and drops the handle.
    pub fn release(&self, fh: u64) -> FsResult<()> {
        let Some(h) = self.handles.remove(fh) else {
            return Ok(());
        };
        let mut g = h.lock();
        let r = match &mut *g {
            Handle::Cell(c) => {
                if c.writable {
                    self.pages.writer_closed(c.ino);
                } else if !c.direct {
                    self.pages.reader_closed(c.ino);
                }
                let r = if c.dirty && c.failed.is_none() {
                    self.commit_cell(c)
                } else {
                    Ok(())
                };
                if c.created {
                    // Never committed (failed, or the commit failed).
                    self.abandon_created(c);
                }
                r
            }
            Handle::Schema(s) if s.dirty => self.commit_schema(s),
            Handle::Mutate(m) if m.failed.is_none() && !m.parser.is_empty() => self.commit_batch(m),
            _ => Ok(()),
        };
        if let Err(e) = r {
            log::warn!("release: a commit at the last close failed: {e:?}");
        }
        r
    }

    /// FUSE `fsync`: commits and makes the commit log durable.
    pub fn fsync(&self, fh: u64) -> FsResult<()> {
        if let Some(h) = self.handles.get(fh) {
            let mut g = h.lock();
            match &mut *g {
                Handle::Cell(c) if c.failed.is_some() => {
                    return Err(c.failed.unwrap_or(Errno::EIO))
                }
                Handle::Cell(c) if c.dirty => self.commit_cell(c)?,
                Handle::Schema(s) if s.dirty => self.commit_schema(s)?,
                Handle::Mutate(m) => {
                    if let Some((code, _)) = m.failed.take() {
                        m.parser.reset();
                        return Err(code);
                    }
                    if !m.parser.is_empty() {
                        self.commit_batch(m)?;
                    }
                }
                _ => {}
            }
        }
        self.data
            .store
            .sync()
            .map_err(|e| self.data.fail(&"fsync", &e))
    }

    /// A file this handle created will never be committed: it must vanish
    /// from listings and from the kernel's cache of names.
    pub(super) fn abandon_created(&self, c: &mut CellHandle) {
        if let Some((parent, name)) = self.forget_created(c) {
            self.invalidate_entry(&parent, name);
        }
    }

    /// Drops what this handle created from the pending listings; the
    /// directory and name it was created under, if it was.
    fn forget_created(&self, c: &mut CellHandle) -> Option<(Node, Vec<u8>)> {
        let created_as = c.created_as.take();
        if created_as.is_some() && c.created {
            if let Node::Cell {
                table,
                row,
                family,
                qualifier,
                ..
            } = &c.node
            {
                self.data.pending.drop_cell(table, row, family, qualifier);
            }
            c.created = false;
        }
        created_as
    }

    /// `node` (a cell, or one of its versions) was unlinked: the handles
    /// open on it keep their buffers but will commit nothing, and a cell
    /// they created and never committed is gone from listings. Whether
    /// such a created cell was there (its unlink succeeds).
    pub(super) fn orphan_handles(&self, which: impl Fn(&Node) -> bool) -> bool {
        self.orphan(self.handles.cells_where(which))
    }

    /// [`Ctx::orphan_handles`] of handles already looked up.
    pub(super) fn orphan(&self, handles: Vec<std::sync::Arc<parking_lot::Mutex<Handle>>>) -> bool {
        let mut created = false;
        for h in handles {
            if let Handle::Cell(c) = &mut *h.lock() {
                c.unlinked = true;
                c.dirty = false;
                c.wrote = false;
                created |= c.created;
                // The kernel drops the name itself once the unlink is
                // answered (an invalidation now would wait for the
                // directory's lock, which the unlink holds).
                self.forget_created(c);
            }
        }
        created
    }

    /// Commits a cell handle's value as one new version (or an atomic append).
    pub(super) fn commit_cell(&self, c: &mut CellHandle) -> FsResult<()> {
        if c.unlinked {
            // As on any filesystem, the data of an unlinked file goes with it.
            c.dirty = false;
            c.wrote = false;
            return Ok(());
        }
        let what = format!("commit {}", c.node);
        let (table, row, family, qualifier, ts) = match &c.node {
            Node::Cell {
                table,
                row,
                family,
                qualifier,
                ..
            } => (table, row, family, qualifier, c.mtime),
            Node::Version {
                table,
                row,
                family,
                qualifier,
                ts,
                ..
            } => (table, row, family, qualifier, Some(*ts)),
            _ => return Err(Errno::EIO),
        };
        let opts = self.write_options();
        let mut written = None;
        if c.append_only && !c.created && c.mtime.is_none() && c.data.len() > c.base_len {
            let txn = RowTxn::new(
                row.to_vec(),
                vec![RowOp::Append {
                    family: family.to_string(),
                    qualifier: qualifier.clone(),
                    data: c.data[c.base_len..].to_vec(),
                }],
            );
            let out = self
                .data
                .store
                .apply_txns(table, &[txn], opts)
                .map_err(|e| self.data.fail(&what, &e))?;
            if let Some(v) = out
                .into_iter()
                .next()
                .and_then(|o| o.results.into_iter().next())
            {
                c.data = v;
                if let Some(charge) = &mut c.charge {
                    // Held in memory all the same; a refusal leaves the
                    // old charge (the commit is done either way).
                    let _ = charge.resize(c.data.len() as u64);
                }
            }
            c.base_len = c.data.len();
        } else {
            let m = RowMutation {
                row: row.to_vec(),
                mutations: vec![Mutation::SetCell {
                    family: family.to_string(),
                    qualifier: qualifier.clone(),
                    timestamp: ts,
                    value: c.data.clone(),
                }],
            };
            written = Some(
                self.data
                    .store
                    .apply(table, &m, opts)
                    .map_err(|e| self.data.fail(&what, &e))?,
            );
            c.append_only = false;
        }
        Stats::add(&self.data.stats.commits, 1);
        c.mtime = None;
        c.dirty = false;
        c.wrote = false;
        c.created_as = None;
        if c.created {
            c.created = false;
            self.data.pending.drop_cell(table, row, family, qualifier);
        }
        self.data.pending.data_written(table, row, family);
        // Readers may have cached pages of an older version: forget them
        // before they are invalidated (see `pages.rs`).
        let paged = self.pages.drop_ino(c.ino);
        if paged || c.append_only || ts.is_some() {
            // What the store holds may differ from what the kernel cached
            // (pages of an older version; concurrent appends merged; a
            // version behind the newest). The next open that finds its
            // size stale reads around the cache once.
            self.invalidate(&c.node);
        } else if let Some(w) = written {
            // No pages are cached, and the kernel's size came from this
            // handle's writes, which are the committed value: remember its
            // version so that the next open may use the page cache.
            self.inodes.set_reported(c.ino, w.bytes, w.timestamp);
        }
        if ts.is_some() {
            // The newest value may have changed too.
            let newest = Node::Cell {
                table: table.clone(),
                view: View::Now,
                row: row.clone(),
                family: family.clone(),
                qualifier: qualifier.clone(),
            };
            self.pages.drop_ino(self.ino_of(&newest));
            self.invalidate(&newest);
        }
        Ok(())
    }

    /// Applies written `.schema` text.
    pub(super) fn commit_schema(&self, s: &mut SchemaHandle) -> FsResult<()> {
        let what = format!("write {}/{SCHEMA}", s.table);
        let cur = self.data.schema(&s.table)?;
        let (text, replace_all) = if s.append_mode {
            (&s.data[s.base_len.min(s.data.len())..], false)
        } else {
            (&s.data[..], true)
        };
        let (new, dropped) = crate::schema_file::apply(&cur, text, replace_all)
            .map_err(|e| self.data.fail(&what, &e))?;
        self.check_schema_change(&s.caller, &cur, &new, &what, true)?;
        self.data
            .store
            .set_schema(&s.table, new)
            .map_err(|e| self.data.fail(&what, &e))?;
        if !dropped.is_empty() {
            log::info!("{what}: dropped families {dropped:?}");
        }
        s.dirty = false;
        s.wrote = false;
        s.base_len = s.data.len();
        self.invalidate_table(&s.table, None);
        self.inval.settle();
        Ok(())
    }
}
