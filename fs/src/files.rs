//! Files: cells and versions (whole values committed on close), `.schema`,
//! `.mutate`, `.scan/<query>` and the status files; unlink, truncate,
//! rename, permissions and extended attributes.

use crate::ctx::Ctx;
use crate::handles::{CellHandle, Handle, MutateHandle, ScanHandle, SchemaHandle};
use crate::mutate::{format_results, group, BatchParser, Op};
use crate::names::{parse_lenient, parse_version_name, KeyName};
use crate::node::{Node, View, MUTATE, SCHEMA, VERSIONS};
use crate::options::{Entry, FsResult, Stats};
use crate::perms::{Caller, R, W};
use engine::schema::TableSchema;
use engine::{Mutation, RowMutation, RowOp, RowTxn, TimeRange};
use fuser::{Errno, FileAttr};
use std::time::Duration;

/// What one batch line changed: row, family (None: all), qualifier (None: many).
type Touched = (Vec<u8>, Option<String>, Option<Vec<u8>>);

/// Largest `.schema` text accepted.
const MAX_SCHEMA_TEXT: usize = 1 << 20;

pub use crate::reply::{Opened, SetAttr};

fn acc_writable(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// Copies `data` into `buf` at `offset`, zero-filling a gap.
fn write_at(buf: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset..end].copy_from_slice(data);
}

fn slice_at(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    let start = (offset as usize).min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data[start..end].to_vec()
}

impl Ctx {
    // ---- open / create ----

    /// FUSE `open`.
    pub fn open(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
        let mut o = self.open_handle(caller, ino, flags)?;
        if !acc_writable(flags) {
            o.noflush = true;
        }
        Ok(o)
    }

    fn open_handle(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
        let node = self.inodes.get(ino).ok_or(Errno::ENOENT)?;
        let writable = acc_writable(flags);
        let what = format!("open {node}");
        if writable && node.read_only() {
            return Err(self.data.refuse(&what, Errno::EROFS, "read-only view"));
        }
        let trunc = flags & libc::O_TRUNC != 0;
        let append = flags & libc::O_APPEND != 0;
        match &*node {
            Node::Cell {
                table,
                view,
                row,
                family,
                qualifier,
            } => {
                let cur = self.data.newest(table, *view, row, family, qualifier)?;
                if cur.is_none()
                    && !(view.is_now() && self.data.pending.has_cell(table, row, family, qualifier))
                {
                    return Err(Errno::ENOENT);
                }
                Ok(self.open_value(&node, cur, writable, trunc, append))
            }
            Node::Version {
                table,
                view,
                row,
                family,
                qualifier,
                ts,
            } => {
                let cur = self
                    .data
                    .version(table, *view, row, family, qualifier, *ts)?;
                if cur.is_none() {
                    return Err(Errno::ENOENT);
                }
                Ok(self.open_value(&node, cur, writable, trunc, false))
            }
            Node::Schema(t) => {
                let s = self.data.schema(t)?;
                let text = if trunc {
                    Vec::new()
                } else {
                    crate::schema_file::render(&s)
                };
                let fh = self.handles.insert(Handle::Schema(SchemaHandle {
                    table: t.clone(),
                    caller: caller.clone().with_groups(),
                    append_mode: append,
                    base_len: text.len(),
                    dirty: trunc && writable,
                    wrote: false,
                    data: text,
                }));
                Ok(Opened {
                    fh,
                    direct_io: true,
                    ..Default::default()
                })
            }
            Node::Mutate(t) => {
                self.data.schema(t)?;
                let fh = self.handles.insert(Handle::Mutate(MutateHandle {
                    table: t.clone(),
                    caller: caller.clone().with_groups(),
                    parser: BatchParser::default(),
                    failed: None,
                    results: Vec::new(),
                    read_pos: 0,
                }));
                Ok(Opened {
                    fh,
                    direct_io: true,
                    ..Default::default()
                })
            }
            Node::Scan { table, query } => {
                let q = crate::query::parse(query)
                    .map_err(|why| self.data.refuse(&what, Errno::EINVAL, &why))?;
                let schema = self.data.schema(table)?;
                let caller = caller.clone().with_groups();
                let mut readable = None;
                if let Some(fams) = &q.spec.families {
                    for f in fams {
                        let fs = schema.families.get(f).ok_or_else(|| {
                            self.data.refuse(
                                &what,
                                Errno::ENOENT,
                                &format!("no column family {f:?}"),
                            )
                        })?;
                        if !caller.may(fs.owner, fs.group, fs.mode, R) {
                            return Err(self.data.refuse(
                                &what,
                                Errno::EACCES,
                                &format!("family {f} is not readable"),
                            ));
                        }
                    }
                } else if schema
                    .families
                    .values()
                    .any(|f| !caller.may(f.owner, f.group, f.mode, R))
                {
                    // Families the caller may not read are left out of the output.
                    readable = Some(
                        schema
                            .families
                            .values()
                            .filter(|f| caller.may(f.owner, f.group, f.mode, R))
                            .map(|f| f.name.clone())
                            .collect(),
                    );
                }
                Stats::add(&self.data.stats.scans, 1);
                let fh = self.handles.insert(Handle::Scan(ScanHandle {
                    table: table.clone(),
                    query: q,
                    readable,
                    stream: None,
                    buf: Vec::new(),
                    start: 0,
                    done: false,
                }));
                Ok(Opened {
                    fh,
                    direct_io: true,
                    ..Default::default()
                })
            }
            Node::Status(f) => {
                let fh = self
                    .handles
                    .insert(Handle::Content(self.status_content(*f)));
                Ok(Opened {
                    fh,
                    direct_io: true,
                    ..Default::default()
                })
            }
            n if n.is_dir() => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    /// A handle on a cell or version holding `cur` (or nothing yet).
    fn open_value(
        &self,
        node: &Node,
        cur: Option<engine::Cell>,
        writable: bool,
        trunc: bool,
        append: bool,
    ) -> Opened {
        let ino = node.ino();
        let (value, ts) = cur.map_or((Vec::new(), 0), |c| (c.value, c.timestamp));
        // Cells bypass the page cache: a writer's unclosed bytes (and an
        // O_TRUNC open) would otherwise land in pages that concurrent readers
        // share, and readers must only ever see committed values.
        let direct = true;
        let truncated = trunc && writable;
        let data = if truncated { Vec::new() } else { value };
        let dirty = truncated && (ts != 0 || !data.is_empty());
        let handle = Handle::Cell(CellHandle {
            node: node.clone(),
            writable,
            append_mode: append && writable,
            base_len: data.len(),
            append_only: append && writable && !truncated && matches!(node, Node::Cell { .. }),
            data,
            dirty,
            wrote: false,
            created: false,
            direct,
            failed: None,
            created_as: None,
        });
        let fh = if writable {
            self.handles.insert_writer(handle, ino)
        } else {
            self.handles.insert(handle)
        };
        Opened {
            fh,
            direct_io: direct,
            ..Default::default()
        }
    }

    /// FUSE `create`: a new cell (or exact version) file, committed on close.
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        flags: i32,
    ) -> FsResult<(Entry, Opened)> {
        let p = self.inodes.get(parent).ok_or(Errno::ENOENT)?;
        let what = format!("create {p}/{}", String::from_utf8_lossy(name));
        if p.read_only() {
            return Err(self.data.refuse(&what, Errno::EROFS, "read-only view"));
        }
        let excl = flags & libc::O_EXCL != 0;
        let node = match &*p {
            Node::Family {
                table, row, family, ..
            } => {
                if name == VERSIONS.as_bytes() {
                    return Err(Errno::EEXIST);
                }
                let kn = parse_lenient(name).ok_or(Errno::EINVAL)?;
                let q = match &kn {
                    KeyName::Key(k) => k.clone(),
                    KeyName::Hashed { .. } => self
                        .data
                        .resolve_qualifier(table, View::Now, row, family, &kn)?
                        .ok_or_else(|| {
                            self.data.refuse(
                                &what,
                                Errno::EINVAL,
                                "a hashed name can only name an existing cell",
                            )
                        })?,
                };
                if q.len() > engine::MAX_QUALIFIER {
                    return Err(self
                        .data
                        .refuse(&what, Errno::ENAMETOOLONG, "qualifier too long"));
                }
                Node::Cell {
                    table: table.clone(),
                    view: View::Now,
                    row: row.clone(),
                    family: family.clone(),
                    qualifier: q,
                }
            }
            Node::VersionsColumn {
                table,
                row,
                family,
                qualifier,
                ..
            } => {
                let ts = parse_version_name(name).ok_or_else(|| {
                    self.data.refuse(
                        &what,
                        Errno::EINVAL,
                        "a version file is named by its timestamp: 16 or more decimal digits",
                    )
                })?;
                Node::Version {
                    table: table.clone(),
                    view: View::Now,
                    row: row.clone(),
                    family: family.clone(),
                    qualifier: qualifier.clone(),
                    ts,
                }
            }
            Node::Table(t) if name == SCHEMA.as_bytes() || name == MUTATE.as_bytes() => {
                let name = String::from_utf8_lossy(name).into_owned();
                if excl && !self.data.pending.is_hidden(t, &name) {
                    return Err(Errno::EEXIST);
                }
                self.data.pending.unhide(t, &name);
                let node = if name == SCHEMA {
                    Node::Schema(t.clone())
                } else {
                    Node::Mutate(t.clone())
                };
                let attr = self.node_attr(&node)?;
                self.register(&node)?;
                let opened = self.open(caller, node.ino(), flags | libc::O_TRUNC)?;
                return Ok((self.entry(&node, attr), opened));
            }
            n if !n.is_dir() => return Err(Errno::ENOTDIR),
            _ => {
                return Err(self.data.refuse(
                    &what,
                    Errno::EPERM,
                    "only cells and versions are files",
                ))
            }
        };
        let (table, row, family, qualifier) = match &node {
            Node::Cell {
                table,
                row,
                family,
                qualifier,
                ..
            }
            | Node::Version {
                table,
                row,
                family,
                qualifier,
                ..
            } => (
                table.clone(),
                row.clone(),
                family.clone(),
                qualifier.clone(),
            ),
            _ => return Err(Errno::EIO),
        };
        // It may exist after all (a racing creator, or a name the kernel had not cached).
        let existing = match &node {
            Node::Version { ts, .. } => {
                self.data
                    .version(&table, View::Now, &row, &family, &qualifier, *ts)?
            }
            _ => self
                .data
                .newest(&table, View::Now, &row, &family, &qualifier)?,
        };
        if excl
            && (existing.is_some()
                || self
                    .data
                    .pending
                    .has_cell(&table, &row, &family, &qualifier))
        {
            return Err(Errno::EEXIST);
        }
        let fam = self.data.family_schema(&table, &family)?;
        let ino = self.register(&node)?;
        let opened = match existing {
            Some(cur) => {
                let attr = self.value_attr(ino, &fam, Some(&cur));
                let trunc = flags & libc::O_TRUNC != 0;
                let o = self.open_value(&node, Some(cur), true, trunc, flags & libc::O_APPEND != 0);
                return Ok((self.entry(&node, attr), o));
            }
            None => {
                if matches!(node, Node::Cell { .. }) {
                    self.data
                        .pending
                        .add_cell(&table, &row, &family, &qualifier);
                }
                let fh = self.handles.insert_writer(
                    Handle::Cell(CellHandle {
                        node: node.clone(),
                        writable: true,
                        append_mode: flags & libc::O_APPEND != 0,
                        base_len: 0,
                        append_only: false,
                        data: Vec::new(),
                        dirty: true,
                        wrote: false,
                        created: matches!(node, Node::Cell { .. }),
                        created_as: Some(((*p).clone(), name.to_vec())),
                        direct: true,
                        failed: None,
                    }),
                    ino,
                );
                Opened {
                    fh,
                    direct_io: true,
                    ..Default::default()
                }
            }
        };
        let attr = self.value_attr(ino, &fam, None);
        Ok((self.entry(&node, attr), opened))
    }

    // ---- read / write ----

    /// FUSE `read`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        Stats::add(&self.data.stats.reads, 1);
        let h = self.handles.get(fh).ok_or(Errno::EBADF)?;
        let mut g = h.lock();
        let out = match &mut *g {
            Handle::Cell(c) => slice_at(&c.data, offset, size),
            Handle::Schema(s) => slice_at(&s.data, offset, size),
            Handle::Content(c) => slice_at(c, offset, size),
            Handle::Mutate(m) => {
                // Reading commits what was written, then returns the results as a stream.
                if !m.parser.is_empty() {
                    let _ = self.commit_batch(m);
                }
                let start = m.read_pos.min(m.results.len());
                let end = start.saturating_add(size as usize).min(m.results.len());
                m.read_pos = end;
                m.results[start..end].to_vec()
            }
            Handle::Scan(s) => self.read_scan(s, offset, size)?,
            Handle::Dir(_) => return Err(Errno::EISDIR),
        };
        Stats::add(&self.data.stats.read_bytes, out.len() as u64);
        Ok(out)
    }

    /// FUSE `write`.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        Stats::add(&self.data.stats.writes, 1);
        Stats::add(&self.data.stats.write_bytes, data.len() as u64);
        let h = self.handles.get(fh).ok_or(Errno::EBADF)?;
        let mut g = h.lock();
        match &mut *g {
            Handle::Cell(c) => {
                if !c.writable {
                    return Err(Errno::EBADF);
                }
                let off = if c.append_mode {
                    c.data.len()
                } else {
                    offset as usize
                };
                if let Some(e) = c.failed {
                    return Err(e);
                }
                let end = off.saturating_add(data.len());
                if end > self.opts.max_value_size {
                    c.failed = Some(Errno::EFBIG);
                    return Err(self.data.refuse(
                        &format!("write {}", c.node),
                        Errno::EFBIG,
                        &format!(
                            "a value is at most {} bytes; nothing of this file will be committed",
                            self.opts.max_value_size
                        ),
                    ));
                }
                if !c.append_mode {
                    c.append_only = false;
                }
                write_at(&mut c.data, off, data);
                c.dirty = true;
                c.wrote = true;
            }
            Handle::Schema(s) => {
                let off = if s.append_mode {
                    s.data.len()
                } else {
                    offset as usize
                };
                if off + data.len() > MAX_SCHEMA_TEXT {
                    return Err(Errno::EFBIG);
                }
                write_at(&mut s.data, off, data);
                s.dirty = true;
                s.wrote = true;
            }
            Handle::Mutate(m) => self.feed_batch(m, data)?,
            Handle::Scan(_) | Handle::Content(_) => return Err(Errno::EROFS),
            Handle::Dir(_) => return Err(Errno::EISDIR),
        }
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
    }

    /// FUSE `copy_file_range` (cp, mv across rows): a read from one handle
    /// and a write to the other, without the data crossing to the caller.
    pub fn copy_file_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> FsResult<u32> {
        let len = u32::try_from(len.min(crate::options::MAX_WRITE as u64))
            .unwrap_or(crate::options::MAX_WRITE);
        let data = self.read(fh_in, off_in, len)?;
        if data.is_empty() {
            return Ok(0);
        }
        self.write(fh_out, off_out, &data)
    }

    // ---- close / fsync ----

    /// FUSE `flush` (each `close`): commits what was written, so that when
    /// `close` returns the value is in the commit log.
    pub fn flush(&self, fh: u64) -> FsResult<()> {
        let Some(h) = self.handles.get(fh) else {
            return Ok(());
        };
        let mut g = h.lock();
        match &mut *g {
            Handle::Cell(c) if c.failed.is_some() => {
                self.abandon_created(c);
                Err(c.failed.unwrap_or(Errno::EIO))
            }
            Handle::Cell(c) if c.dirty && c.wrote => self.commit_cell(c),
            Handle::Schema(s) if s.dirty && s.wrote => self.commit_schema(s),
            Handle::Mutate(m) => {
                if let Some((code, _)) = m.failed.take() {
                    m.parser = BatchParser::default();
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

    /// FUSE `release` (last close): commits anything left (a truncation or
    /// creation without writes) and drops the handle.
    pub fn release(&self, fh: u64) -> FsResult<()> {
        let Some(h) = self.handles.remove(fh) else {
            return Ok(());
        };
        let mut g = h.lock();
        let r = match &mut *g {
            Handle::Cell(c) => {
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
                        m.parser = BatchParser::default();
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
    fn abandon_created(&self, c: &mut CellHandle) {
        if let Some((parent, name)) = c.created_as.take() {
            if c.created {
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
            self.invalidate_entry(&parent, name);
        }
    }

    /// Commits a cell handle's value as one new version (or an atomic append).
    fn commit_cell(&self, c: &mut CellHandle) -> FsResult<()> {
        let what = format!("commit {}", c.node);
        let (table, row, family, qualifier, ts) = match &c.node {
            Node::Cell {
                table,
                row,
                family,
                qualifier,
                ..
            } => (table, row, family, qualifier, None),
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
        if c.append_only && !c.created && c.data.len() > c.base_len {
            let txn = RowTxn::new(
                row.clone(),
                vec![RowOp::Append {
                    family: family.clone(),
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
            }
            c.base_len = c.data.len();
        } else {
            let m = RowMutation {
                row: row.clone(),
                mutations: vec![Mutation::SetCell {
                    family: family.clone(),
                    qualifier: qualifier.clone(),
                    timestamp: ts,
                    value: c.data.clone(),
                }],
            };
            self.data
                .store
                .apply(table, &m, opts)
                .map_err(|e| self.data.fail(&what, &e))?;
            c.append_only = false;
        }
        Stats::add(&self.data.stats.commits, 1);
        c.dirty = false;
        c.wrote = false;
        c.created_as = None;
        if c.created {
            c.created = false;
            self.data.pending.drop_cell(table, row, family, qualifier);
        }
        self.data.pending.data_written(table, row, family);
        if c.append_only || ts.is_some() {
            // What the store holds may differ from what the kernel cached
            // (concurrent appends merged; a version behind the newest).
            self.invalidate(&c.node);
        } else if let Ok(Some(cur)) = self.data.store.read_cell(table, row, family, qualifier) {
            // The kernel's pages and size came from this handle's writes and
            // are exactly the committed value: keep them, and remember the
            // version so that the next open may use them.
            if cur.value.len() == c.data.len() {
                self.inodes
                    .set_reported(c.node.ino(), cur.value.len() as u64, cur.timestamp);
            }
        }
        if ts.is_some() {
            // The newest value may have changed too.
            self.invalidate(&Node::Cell {
                table: table.clone(),
                view: View::Now,
                row: row.clone(),
                family: family.clone(),
                qualifier: qualifier.clone(),
            });
        }
        Ok(())
    }

    /// Applies written `.schema` text.
    fn commit_schema(&self, s: &mut SchemaHandle) -> FsResult<()> {
        let what = format!("write {}/{SCHEMA}", s.table);
        let cur = self.data.schema(&s.table)?;
        let (text, replace_all) = if s.append_mode {
            (&s.data[s.base_len.min(s.data.len())..], false)
        } else {
            (&s.data[..], true)
        };
        let (new, dropped) = crate::schema_file::apply(&cur, text, replace_all)
            .map_err(|e| self.data.fail(&what, &e))?;
        if crate::schema_file::changes_permissions(&cur, &new)
            && !(s.caller.is_root() || s.caller.uid == cur.owner)
        {
            return Err(self.data.refuse(
                &what,
                Errno::EPERM,
                "only the table's owner may change a family's owner, group or mode",
            ));
        }
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

    // ---- .mutate ----

    /// Parses written batch text; a bad line fails this write.
    fn feed_batch(&self, m: &mut MutateHandle, data: &[u8]) -> FsResult<()> {
        if let Some((code, _)) = &m.failed {
            return Err(*code);
        }
        let what = format!("{}/{MUTATE}", m.table);
        let lines = match m.parser.feed(data) {
            Ok(l) => l.to_vec(),
            Err(e) => return Err(self.batch_failed(m, Errno::EINVAL, e.to_string(), &what)),
        };
        if lines.is_empty() {
            return Ok(());
        }
        let schema = self.data.schema(&m.table)?;
        for l in &lines {
            if let Err((code, why)) = self.check_op(&schema, &m.caller, &l.op) {
                return Err(self.batch_failed(m, code, format!("line {}: {why}", l.line), &what));
            }
        }
        Ok(())
    }

    /// Schema and permission checks of one batch line.
    fn check_op(
        &self,
        schema: &TableSchema,
        caller: &Caller,
        op: &Op,
    ) -> Result<(), (Errno, String)> {
        let want = if op.reads() { R } else { 0 } | if op.writes() { W } else { 0 };
        let families: Vec<&engine::schema::FamilySchema> = match op.family() {
            Some(f) => vec![schema
                .families
                .get(f)
                .ok_or_else(|| (Errno::ENOENT, format!("no column family {f:?} in table")))?],
            None => schema.families.values().collect(),
        };
        for f in families {
            if !caller.may(f.owner, f.group, f.mode, want) {
                return Err((
                    Errno::EACCES,
                    format!("permission denied on family {}", f.name),
                ));
            }
        }
        if op.row().len() > engine::MAX_ROW_KEY {
            return Err((
                Errno::ENAMETOOLONG,
                format!(
                    "row key is {} bytes; the limit is {}",
                    op.row().len(),
                    engine::MAX_ROW_KEY
                ),
            ));
        }
        if let Op::Set { qualifier, .. }
        | Op::Delete { qualifier, .. }
        | Op::Increment { qualifier, .. }
        | Op::Append { qualifier, .. }
        | Op::Guard { qualifier, .. } = op
        {
            if qualifier.len() > engine::MAX_QUALIFIER {
                return Err((
                    Errno::ENAMETOOLONG,
                    format!(
                        "qualifier is {} bytes; the limit is {}",
                        qualifier.len(),
                        engine::MAX_QUALIFIER
                    ),
                ));
            }
        }
        if let Op::Set { value, .. } | Op::Append { value, .. } = op {
            if value.len() > self.opts.max_value_size {
                return Err((
                    Errno::EFBIG,
                    format!(
                        "value is {} bytes; the limit is {}",
                        value.len(),
                        self.opts.max_value_size
                    ),
                ));
            }
        }
        Ok(())
    }

    fn batch_failed(&self, m: &mut MutateHandle, code: Errno, why: String, what: &str) -> Errno {
        log::info!("{what}: {why}");
        Stats::add(&self.data.stats.errors, 1);
        m.results
            .extend_from_slice(format!("error {why}\n").as_bytes());
        m.failed = Some((code, why));
        code
    }

    /// Validates and applies the written batch.
    fn commit_batch(&self, m: &mut MutateHandle) -> FsResult<()> {
        let what = format!("{}/{MUTATE}", m.table);
        let lines = match m.parser.finish() {
            Ok(l) => l,
            Err(e) => return Err(self.batch_failed(m, Errno::EINVAL, e.to_string(), &what)),
        };
        if lines.is_empty() {
            return Ok(());
        }
        let schema = self.data.schema(&m.table)?;
        // The last line (without newline) was not checked by write.
        if let Some(l) = lines.last() {
            if let Err((code, why)) = self.check_op(&schema, &m.caller, &l.op) {
                return Err(self.batch_failed(m, code, format!("line {}: {why}", l.line), &what));
            }
        }
        let touched: Vec<Touched> = lines
            .iter()
            .map(|l| {
                let q = match &l.op {
                    Op::Set { qualifier, .. }
                    | Op::Delete { qualifier, .. }
                    | Op::Increment { qualifier, .. }
                    | Op::Append { qualifier, .. } => Some(qualifier.clone()),
                    _ => None,
                };
                (l.op.row().to_vec(), l.op.family().map(str::to_string), q)
            })
            .collect();
        let txns =
            group(lines).map_err(|e| self.batch_failed(m, Errno::EINVAL, e.to_string(), &what))?;
        let raw: Vec<RowTxn> = txns.iter().map(|t| t.txn.clone()).collect();
        let outcomes = match self
            .data
            .store
            .apply_txns(&m.table, &raw, self.write_options())
        {
            Ok(o) => o,
            Err(e) => {
                let line = match &e {
                    engine::Error::BadBatchEntry { index, .. } => {
                        txns.get(*index).map(|t| t.first_line)
                    }
                    _ => None,
                };
                let code = crate::errno::errno(&e);
                let why = match line {
                    Some(l) => format!("line {l}: {e}"),
                    None => e.to_string(),
                };
                return Err(self.batch_failed(m, code, why, &what));
            }
        };
        Stats::add(&self.data.stats.batches, 1);
        Stats::add(&self.data.stats.batch_rows, raw.len() as u64);
        m.results
            .extend_from_slice(&format_results(&txns, &outcomes));
        // Tell the kernel what changed under it.
        for (row, family, qualifier) in touched {
            match (family, qualifier) {
                (Some(f), Some(q)) => {
                    let cell = Node::Cell {
                        table: m.table.clone(),
                        view: View::Now,
                        row: row.clone(),
                        family: f.clone(),
                        qualifier: q,
                    };
                    self.invalidate(&cell);
                    self.data.pending.data_written(&m.table, &row, &f);
                }
                (family, _) => self.invalidate_row(&m.table, &row, family.as_deref()),
            }
            if self.inodes.is_known(&Node::Row {
                table: m.table.clone(),
                view: View::Now,
                row: row.clone(),
            }) {
                self.invalidate_row(&m.table, &row, None);
            }
        }
        Ok(())
    }

    // ---- .scan ----

    fn read_scan(&self, s: &mut ScanHandle, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let what = format!("scan of {}", s.table);
        if offset < s.start {
            // Read backwards: start over.
            s.stream = None;
            s.buf.clear();
            s.start = 0;
            s.done = false;
        }
        // Drop what lies before this read (readers go forward).
        let skip = ((offset - s.start) as usize).min(s.buf.len());
        s.buf.drain(..skip);
        s.start += skip as u64;
        let want_end = offset + size as u64;
        while !s.done && s.start + (s.buf.len() as u64) < want_end {
            if s.stream.is_none() {
                s.stream = Some(
                    self.data
                        .store
                        .scan(&s.table, s.query.spec.clone())
                        .map_err(|e| self.data.fail(&what, &e))?,
                );
            }
            let Some(stream) = s.stream.as_mut() else {
                break;
            };
            match stream.next_row().map_err(|e| self.data.fail(&what, &e))? {
                None => s.done = true,
                Some((_, cells)) => {
                    for c in cells {
                        if s.readable.as_ref().is_some_and(|r| !r.contains(&c.family)) {
                            continue;
                        }
                        crate::output::write_cell(s.query.format, &c, &mut s.buf);
                    }
                    // Skip output wholly before the read offset.
                    if s.start < offset {
                        let skip = ((offset - s.start) as usize).min(s.buf.len());
                        s.buf.drain(..skip);
                        s.start += skip as u64;
                    }
                }
            }
        }
        let from = (offset.saturating_sub(s.start) as usize).min(s.buf.len());
        let to = (from + size as usize).min(s.buf.len());
        Ok(s.buf[from..to].to_vec())
    }

    // ---- unlink / rename ----

    /// FUSE `unlink`.
    pub fn unlink(&self, _caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
        let p = self.inodes.get(parent).ok_or(Errno::ENOENT)?;
        let what = format!("unlink {p}/{}", String::from_utf8_lossy(name));
        if p.read_only() {
            return Err(self.data.refuse(&what, Errno::EROFS, "read-only view"));
        }
        match &*p {
            // The file hides until created again (see Pending::hide).
            Node::Table(t) if name == SCHEMA.as_bytes() || name == MUTATE.as_bytes() => {
                if self.data.pending.hide(t, &String::from_utf8_lossy(name)) {
                    self.invalidate_entry(&p, name.to_vec());
                    Ok(())
                } else {
                    Err(Errno::ENOENT)
                }
            }
            Node::Family { .. } if name == VERSIONS.as_bytes() => Err(Errno::EISDIR),
            Node::Family {
                table, row, family, ..
            } => {
                let kn = parse_lenient(name).ok_or(Errno::ENOENT)?;
                let q = self
                    .data
                    .resolve_qualifier(table, View::Now, row, family, &kn)?
                    .ok_or(Errno::ENOENT)?;
                if self
                    .data
                    .newest(table, View::Now, row, family, &q)?
                    .is_none()
                {
                    return if self.data.pending.has_cell(table, row, family, &q) {
                        Ok(())
                    } else {
                        Err(Errno::ENOENT)
                    };
                }
                let m =
                    RowMutation::new(row.clone()).delete_cells(family, q.clone(), TimeRange::ALL);
                self.data
                    .store
                    .apply(table, &m, self.write_options())
                    .map_err(|e| self.data.fail(&what, &e))?;
                // The directories stay until rmdir, as on any filesystem.
                self.data.pending.add_row(table, row);
                self.data.pending.add_family(table, row, family);
                self.invalidate(&Node::VersionsColumn {
                    table: table.clone(),
                    view: View::Now,
                    row: row.clone(),
                    family: family.clone(),
                    qualifier: q,
                });
                Ok(())
            }
            Node::VersionsColumn {
                table,
                row,
                family,
                qualifier,
                ..
            } => {
                let ts = parse_version_name(name).ok_or(Errno::ENOENT)?;
                if self
                    .data
                    .version(table, View::Now, row, family, qualifier, ts)?
                    .is_none()
                {
                    return Err(Errno::ENOENT);
                }
                let m = RowMutation::new(row.clone()).delete_cells(
                    family,
                    qualifier.clone(),
                    TimeRange::exactly(ts),
                );
                self.data
                    .store
                    .apply(table, &m, self.write_options())
                    .map_err(|e| self.data.fail(&what, &e))?;
                self.data.pending.add_row(table, row);
                self.data.pending.add_family(table, row, family);
                self.data.pending.add_column(table, row, family, qualifier);
                self.invalidate(&Node::Cell {
                    table: table.clone(),
                    view: View::Now,
                    row: row.clone(),
                    family: family.clone(),
                    qualifier: qualifier.clone(),
                });
                Ok(())
            }
            n if !n.is_dir() => Err(Errno::ENOTDIR),
            _ => Err(self
                .data
                .refuse(&what, Errno::EPERM, "not a cell or version")),
        }
    }

    /// FUSE `rename`: a cell moves within its row (all versions, atomically);
    /// anything else is EXDEV, so mv(1) copies and deletes instead.
    pub fn rename(
        &self,
        _caller: &Caller,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        let p = self.inodes.get(parent).ok_or(Errno::ENOENT)?;
        let np = self.inodes.get(newparent).ok_or(Errno::ENOENT)?;
        let what = format!(
            "rename {p}/{} to {np}/{}",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(newname)
        );
        if p.read_only() || np.read_only() {
            return Err(self.data.refuse(&what, Errno::EROFS, "read-only view"));
        }
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(Errno::EINVAL);
        }
        let (
            Node::Family {
                table, row, family, ..
            },
            Node::Family {
                table: t2,
                row: r2,
                family: f2,
                ..
            },
        ) = (&*p, &*np)
        else {
            return Err(self.data.refuse(
                &what,
                Errno::EXDEV,
                "only a cell can be renamed, within its row",
            ));
        };
        if table != t2 || row != r2 {
            return Err(self.data.refuse(
                &what,
                Errno::EXDEV,
                "a cell can be renamed only within its row",
            ));
        }
        if name == VERSIONS.as_bytes() || newname == VERSIONS.as_bytes() {
            return Err(Errno::EBUSY);
        }
        let src = self
            .data
            .resolve_qualifier(
                table,
                View::Now,
                row,
                family,
                &parse_lenient(name).ok_or(Errno::ENOENT)?,
            )?
            .ok_or(Errno::ENOENT)?;
        let dst = match parse_lenient(newname).ok_or(Errno::EINVAL)? {
            KeyName::Key(k) => k,
            kn => self
                .data
                .resolve_qualifier(table, View::Now, row, f2, &kn)?
                .ok_or(Errno::EINVAL)?,
        };
        if family == f2 && src == dst {
            return Ok(());
        }
        let versions = self.data.versions(table, View::Now, row, family, &src)?;
        if versions.is_empty() {
            return Err(if self.data.pending.has_cell(table, row, family, &src) {
                Errno::EBUSY
            } else {
                Errno::ENOENT
            });
        }
        if flags & libc::RENAME_NOREPLACE != 0
            && self.data.newest(table, View::Now, row, f2, &dst)?.is_some()
        {
            return Err(Errno::EEXIST);
        }
        let mut m = RowMutation::new(row.clone()).delete_cells(f2, dst.clone(), TimeRange::ALL);
        for v in versions.iter().rev() {
            m = m.set_at(f2, dst.clone(), v.timestamp, v.value.clone());
        }
        m = m.delete_cells(family, src.clone(), TimeRange::ALL);
        self.data
            .store
            .apply(table, &m, self.write_options())
            .map_err(|e| self.data.fail(&what, &e))?;
        let from = Node::Cell {
            table: table.clone(),
            view: View::Now,
            row: row.clone(),
            family: family.clone(),
            qualifier: src.clone(),
        };
        let to = Node::Cell {
            table: table.clone(),
            view: View::Now,
            row: row.clone(),
            family: f2.clone(),
            qualifier: dst.clone(),
        };
        self.inodes.rebind(&from, &to);
        self.data.pending.add_family(table, row, family);
        self.data.pending.data_written(table, row, f2);
        if family != f2 {
            self.data.pending.add_row(table, row);
        }
        self.invalidate(&Node::Cell {
            table: table.clone(),
            view: View::Now,
            row: row.clone(),
            family: f2.clone(),
            qualifier: dst,
        });
        Ok(())
    }

    // ---- attributes ----

    /// Attributes of an open file as its handle sees it.
    pub(crate) fn handle_attr(&self, fh: u64, node: &Node) -> Option<FileAttr> {
        let h = self.handles.get(fh)?;
        let (len, dirty) = {
            let g = h.lock();
            let Handle::Cell(c) = &*g else { return None };
            if c.node != *node {
                return None;
            }
            (c.data.len() as u64, c.dirty)
        };
        let fam = self
            .data
            .family_schema(node.table()?, node.family()?)
            .ok()?;
        let mut a = self.make_attr(
            node.ino(),
            fuser::FileType::RegularFile,
            fam.mode & 0o666,
            fam.owner,
            fam.group,
            len,
            std::time::SystemTime::now(),
        );
        if !dirty {
            if let Ok(cur) = self.node_attr(node) {
                a.mtime = cur.mtime;
                a.ctime = cur.ctime;
                a.atime = cur.atime;
            }
        }
        Some(a)
    }

    /// FUSE `setattr`: chmod/chown of tables and families, truncation of
    /// cells; times are accepted and ignored.
    pub fn setattr(
        &self,
        _caller: &Caller,
        ino: u64,
        fh: Option<u64>,
        set: SetAttr,
    ) -> FsResult<(FileAttr, Duration)> {
        let node = self.inodes.get(ino).ok_or(Errno::ENOENT)?;
        let what = format!("setattr {node}");
        let perms = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        if node.read_only() && (perms || set.size.is_some() || set.times) {
            return Err(self.data.refuse(&what, Errno::EROFS, "read-only view"));
        }
        if let Some(size) = set.size {
            self.truncate(&node, fh, size)?;
        }
        if perms {
            match &*node {
                Node::Table(t) => {
                    let cur = self.data.schema(t)?;
                    let mut s = (*cur).clone();
                    if let Some(m) = set.mode {
                        s.mode = m & 0o7777;
                    }
                    s.owner = set.uid.unwrap_or(s.owner);
                    s.group = set.gid.unwrap_or(s.group);
                    if s != *cur {
                        self.data
                            .store
                            .set_schema(t, s)
                            .map_err(|e| self.data.fail(&what, &e))?;
                        self.invalidate_table(t, None);
                    }
                }
                Node::Family { table, family, .. } | Node::VersionsDir { table, family, .. } => {
                    let cur = self.data.schema(table)?;
                    let mut s = (*cur).clone();
                    let f = s.families.get_mut(family).ok_or(Errno::ENOENT)?;
                    if let Some(m) = set.mode {
                        f.mode = m & 0o7777;
                    }
                    f.owner = set.uid.unwrap_or(f.owner);
                    f.group = set.gid.unwrap_or(f.group);
                    // tar and cp -p chmod every family directory they make: only
                    // a real change touches the schema.
                    if s != *cur {
                        self.data
                            .store
                            .set_schema(table, s)
                            .map_err(|e| self.data.fail(&what, &e))?;
                        self.invalidate_table(table, Some(family));
                    }
                }
                Node::Root | Node::StatusDir => {
                    return Err(self.data.refuse(
                        &what,
                        Errno::EPERM,
                        "the root and status directories have fixed permissions",
                    ))
                }
                n => {
                    // Rows, cells and the rest have no permissions of their own
                    // (they show their table's or family's). Like vfat's `quiet`
                    // option, chmod/chown on them succeed and change nothing, so
                    // that tar, cp -p and rsync -a can copy trees in.
                    if fh.is_none() {
                        self.node_attr(n)?;
                    }
                    log::debug!("{what}: ignored (permissions belong to tables and families)");
                }
            }
        }
        if let Some(fh) = fh {
            if let Some(a) = self.handle_attr(fh, &node) {
                return Ok((a, self.attr_ttl(&node)));
            }
        }
        Ok((self.node_attr(&node)?, self.attr_ttl(&node)))
    }

    fn truncate(&self, node: &Node, fh: Option<u64>, size: u64) -> FsResult<()> {
        let what = format!("truncate {node}");
        if size as usize > self.opts.max_value_size {
            return Err(self
                .data
                .refuse(&what, Errno::EFBIG, "above the value limit"));
        }
        if let Some(h) = fh.and_then(|fh| self.handles.get(fh)) {
            let mut g = h.lock();
            match &mut *g {
                Handle::Cell(c) if c.node == *node => {
                    if !c.writable {
                        return Err(Errno::EBADF);
                    }
                    c.data.resize(size as usize, 0);
                    c.append_only = false;
                    c.dirty = true;
                    c.wrote = true;
                    return Ok(());
                }
                Handle::Schema(s) => {
                    s.data.resize(size as usize, 0);
                    s.base_len = s.base_len.min(s.data.len());
                    s.dirty = true;
                    s.wrote = true;
                    return Ok(());
                }
                Handle::Mutate(m) => {
                    if size == 0 {
                        m.parser = BatchParser::default();
                        m.failed = None;
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
        match node {
            Node::Cell {
                table,
                view: View::Now,
                row,
                family,
                qualifier,
            }
            | Node::Version {
                table,
                view: View::Now,
                row,
                family,
                qualifier,
                ..
            } => {
                let ts = if let Node::Version { ts, .. } = node {
                    Some(*ts)
                } else {
                    None
                };
                let cur = match ts {
                    Some(t) => self
                        .data
                        .version(table, View::Now, row, family, qualifier, t)?,
                    None => self.data.newest(table, View::Now, row, family, qualifier)?,
                };
                let mut value = match cur {
                    Some(c) => c.value,
                    None if self.data.pending.has_cell(table, row, family, qualifier) => Vec::new(),
                    None => return Err(Errno::ENOENT),
                };
                if value.len() as u64 == size {
                    return Ok(());
                }
                value.resize(size as usize, 0);
                let m = RowMutation {
                    row: row.clone(),
                    mutations: vec![Mutation::SetCell {
                        family: family.clone(),
                        qualifier: qualifier.clone(),
                        timestamp: ts,
                        value,
                    }],
                };
                self.data
                    .store
                    .apply(table, &m, self.write_options())
                    .map_err(|e| self.data.fail(&what, &e))?;
                self.data.pending.data_written(table, row, family);
                Ok(())
            }
            Node::Mutate(_) => Ok(()),
            Node::Schema(t) => {
                let cur = self.data.schema(t)?;
                let mut text = crate::schema_file::render(&cur);
                text.resize(size as usize, b'\n');
                let (new, _) = crate::schema_file::apply(&cur, &text, true)
                    .map_err(|e| self.data.fail(&what, &e))?;
                self.data
                    .store
                    .set_schema(t, new)
                    .map_err(|e| self.data.fail(&what, &e))
            }
            n if n.is_dir() => Err(Errno::EISDIR),
            _ => Err(Errno::EPERM),
        }
    }

    // ---- extended attributes ----

    fn xattrs(&self, node: &Node) -> Vec<(&'static str, Vec<u8>)> {
        let mut out = Vec::new();
        match node {
            Node::Row { row, .. } => out.push(("user.bigtable.key", row.clone())),
            Node::Cell {
                table,
                view,
                row,
                family,
                qualifier,
            } => {
                out.push(("user.bigtable.key", qualifier.clone()));
                if let Ok(Some(c)) = self.data.newest(table, *view, row, family, qualifier) {
                    out.push((
                        "user.bigtable.timestamp",
                        c.timestamp.to_string().into_bytes(),
                    ));
                }
            }
            Node::VersionsColumn { qualifier, .. } => {
                out.push(("user.bigtable.key", qualifier.clone()))
            }
            Node::Version { qualifier, ts, .. } => {
                out.push(("user.bigtable.key", qualifier.clone()));
                out.push(("user.bigtable.timestamp", ts.to_string().into_bytes()));
            }
            _ => {}
        }
        out
    }

    /// FUSE `getxattr`: `user.bigtable.key` (the full row key or qualifier)
    /// and `user.bigtable.timestamp`.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        let node = self.inodes.get(ino).ok_or(Errno::ENOENT)?;
        self.xattrs(&node)
            .into_iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, v)| v)
            .ok_or(Errno::NO_XATTR)
    }

    /// FUSE `listxattr`: NUL-terminated names.
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        let node = self.inodes.get(ino).ok_or(Errno::ENOENT)?;
        let mut out = Vec::new();
        for (n, _) in self.xattrs(&node) {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_at_fills_gaps() {
        let mut b = b"abc".to_vec();
        write_at(&mut b, 5, b"xy");
        assert_eq!(b, b"abc\0\0xy");
        write_at(&mut b, 1, b"Z");
        assert_eq!(b, b"aZc\0\0xy");
        assert_eq!(slice_at(&b, 5, 10), b"xy");
        assert_eq!(slice_at(&b, 50, 10), b"");
    }
}
