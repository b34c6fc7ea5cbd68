//! The version set: the durable record of tables, schemas, tablets and the
//! SSTables each tablet reads, kept as a log of edits (LevelDB's MANIFEST).
//!
//! `manifest/CURRENT` names the live manifest file. Each record is a group of
//! edits applied atomically (a split removes the parent and adds both children
//! in one record). When the file grows past a limit, a new manifest starting
//! with a snapshot of the whole state is written and CURRENT is switched to it
//! by an atomic rename.

use crate::coding::{put_bytes, put_str, put_varint, Decoder};
use crate::log::{LogReader, LogWriter};
use crate::{Error, Result};
use gfs::FileStore;
use std::collections::BTreeMap;
use std::sync::Arc;

const CURRENT: &str = "manifest/CURRENT";
const REWRITE_BYTES: u64 = 4 << 20;

/// What the manifest knows of one SSTable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstMeta {
    pub number: u64,
    /// Locality group the file belongs to.
    pub group: String,
    pub size: u64,
    pub entries: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub max_seq: u64,
    /// Families with entries (cells or tombstones) in the file.
    pub families: Vec<String>,
    /// Whether the file holds row tombstones.
    pub row_tombstones: bool,
}

/// One tablet as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabletEntry {
    pub id: u64,
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
    /// Every entry of this tablet with a sequence number up to here is in its SSTables.
    pub flushed_seq: u64,
    pub files: Vec<SstMeta>,
}

/// One table as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    pub id: u64,
    pub name: String,
    pub schema: Vec<u8>,
    pub tablets: BTreeMap<u64, TabletEntry>,
}

/// A change to the version set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    CreateTable {
        id: u64,
        name: String,
        schema: Vec<u8>,
    },
    SetSchema {
        id: u64,
        schema: Vec<u8>,
    },
    DropTable {
        id: u64,
    },
    AddTablet {
        table: u64,
        tablet: TabletEntry,
    },
    RemoveTablet {
        table: u64,
        id: u64,
    },
    /// Adds and removes files of a tablet and moves its redo point.
    Files {
        table: u64,
        tablet: u64,
        add: Vec<SstMeta>,
        remove: Vec<u64>,
        flushed_seq: u64,
    },
    /// Counters that must never go backwards.
    Counters {
        next_id: u64,
        last_seq: u64,
    },
}

/// The state the edits build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionState {
    pub tables: BTreeMap<u64, TableEntry>,
    /// Next file number / table id / tablet id (one counter for all).
    pub next_id: u64,
    pub last_seq: u64,
}

impl VersionState {
    fn apply(&mut self, e: &Edit) -> Result<()> {
        let missing =
            |what: &str, id: u64| Error::corruption(format!("manifest: {what} {id} unknown"));
        match e {
            Edit::CreateTable { id, name, schema } => {
                self.tables.insert(
                    *id,
                    TableEntry {
                        id: *id,
                        name: name.clone(),
                        schema: schema.clone(),
                        tablets: BTreeMap::new(),
                    },
                );
                self.next_id = self.next_id.max(id + 1);
            }
            Edit::SetSchema { id, schema } => {
                self.tables
                    .get_mut(id)
                    .ok_or_else(|| missing("table", *id))?
                    .schema = schema.clone();
            }
            Edit::DropTable { id } => {
                self.tables.remove(id);
            }
            Edit::AddTablet { table, tablet } => {
                self.next_id = self.next_id.max(tablet.id + 1);
                for f in &tablet.files {
                    self.next_id = self.next_id.max(f.number + 1);
                }
                self.tables
                    .get_mut(table)
                    .ok_or_else(|| missing("table", *table))?
                    .tablets
                    .insert(tablet.id, tablet.clone());
            }
            Edit::RemoveTablet { table, id } => {
                self.tables
                    .get_mut(table)
                    .ok_or_else(|| missing("table", *table))?
                    .tablets
                    .remove(id);
            }
            Edit::Files {
                table,
                tablet,
                add,
                remove,
                flushed_seq,
            } => {
                let t = self
                    .tables
                    .get_mut(table)
                    .ok_or_else(|| missing("table", *table))?
                    .tablets
                    .get_mut(tablet)
                    .ok_or_else(|| missing("tablet", *tablet))?;
                t.files.retain(|f| !remove.contains(&f.number));
                for f in add {
                    self.next_id = self.next_id.max(f.number + 1);
                    t.files.push(f.clone());
                }
                t.flushed_seq = t.flushed_seq.max(*flushed_seq);
            }
            Edit::Counters { next_id, last_seq } => {
                self.next_id = self.next_id.max(*next_id);
                self.last_seq = self.last_seq.max(*last_seq);
            }
        }
        Ok(())
    }

    /// Edits that rebuild this state from nothing.
    fn snapshot(&self) -> Vec<Edit> {
        let mut edits = vec![Edit::Counters {
            next_id: self.next_id,
            last_seq: self.last_seq,
        }];
        for t in self.tables.values() {
            edits.push(Edit::CreateTable {
                id: t.id,
                name: t.name.clone(),
                schema: t.schema.clone(),
            });
            for tablet in t.tablets.values() {
                edits.push(Edit::AddTablet {
                    table: t.id,
                    tablet: tablet.clone(),
                });
            }
        }
        edits
    }

    /// Every SSTable number referenced by any tablet.
    pub fn live_files(&self) -> std::collections::HashSet<u64> {
        self.tables
            .values()
            .flat_map(|t| t.tablets.values())
            .flat_map(|t| t.files.iter().map(|f| f.number))
            .collect()
    }
}

fn encode_sst(out: &mut Vec<u8>, f: &SstMeta) {
    put_varint(out, f.number);
    put_str(out, &f.group);
    put_varint(out, f.size);
    put_varint(out, f.entries);
    put_bytes(out, &f.smallest);
    put_bytes(out, &f.largest);
    put_varint(out, f.max_seq);
    put_varint(out, f.families.len() as u64);
    for fam in &f.families {
        put_str(out, fam);
    }
    out.push(u8::from(f.row_tombstones));
}

fn decode_sst(d: &mut Decoder<'_>) -> Result<SstMeta> {
    Ok(SstMeta {
        number: d.varint()?,
        group: d.string()?,
        size: d.varint()?,
        entries: d.varint()?,
        smallest: d.bytes()?.to_vec(),
        largest: d.bytes()?.to_vec(),
        max_seq: d.varint()?,
        families: {
            let n = d.varint()?;
            let mut v = Vec::new();
            for _ in 0..n {
                v.push(d.string()?);
            }
            v
        },
        row_tombstones: d.bool()?,
    })
}

fn encode_opt(out: &mut Vec<u8>, b: &Option<Vec<u8>>) {
    match b {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            put_bytes(out, b);
        }
    }
}

fn decode_opt(d: &mut Decoder<'_>) -> Result<Option<Vec<u8>>> {
    Ok(if d.bool()? {
        Some(d.bytes()?.to_vec())
    } else {
        None
    })
}

fn encode_edit(out: &mut Vec<u8>, e: &Edit) {
    match e {
        Edit::CreateTable { id, name, schema } => {
            out.push(1);
            put_varint(out, *id);
            put_str(out, name);
            put_bytes(out, schema);
        }
        Edit::SetSchema { id, schema } => {
            out.push(2);
            put_varint(out, *id);
            put_bytes(out, schema);
        }
        Edit::DropTable { id } => {
            out.push(3);
            put_varint(out, *id);
        }
        Edit::AddTablet { table, tablet } => {
            out.push(4);
            put_varint(out, *table);
            put_varint(out, tablet.id);
            put_bytes(out, &tablet.start);
            encode_opt(out, &tablet.end);
            put_varint(out, tablet.flushed_seq);
            put_varint(out, tablet.files.len() as u64);
            for f in &tablet.files {
                encode_sst(out, f);
            }
        }
        Edit::RemoveTablet { table, id } => {
            out.push(5);
            put_varint(out, *table);
            put_varint(out, *id);
        }
        Edit::Files {
            table,
            tablet,
            add,
            remove,
            flushed_seq,
        } => {
            out.push(6);
            put_varint(out, *table);
            put_varint(out, *tablet);
            put_varint(out, add.len() as u64);
            for f in add {
                encode_sst(out, f);
            }
            put_varint(out, remove.len() as u64);
            for n in remove {
                put_varint(out, *n);
            }
            put_varint(out, *flushed_seq);
        }
        Edit::Counters { next_id, last_seq } => {
            out.push(7);
            put_varint(out, *next_id);
            put_varint(out, *last_seq);
        }
    }
}

fn decode_edit(d: &mut Decoder<'_>) -> Result<Edit> {
    Ok(match d.u8()? {
        1 => Edit::CreateTable {
            id: d.varint()?,
            name: d.string()?,
            schema: d.bytes()?.to_vec(),
        },
        2 => Edit::SetSchema {
            id: d.varint()?,
            schema: d.bytes()?.to_vec(),
        },
        3 => Edit::DropTable { id: d.varint()? },
        4 => {
            let table = d.varint()?;
            let id = d.varint()?;
            let start = d.bytes()?.to_vec();
            let end = decode_opt(d)?;
            let flushed_seq = d.varint()?;
            let n = d.varint()?;
            let mut files = Vec::new();
            for _ in 0..n {
                files.push(decode_sst(d)?);
            }
            Edit::AddTablet {
                table,
                tablet: TabletEntry {
                    id,
                    start,
                    end,
                    flushed_seq,
                    files,
                },
            }
        }
        5 => Edit::RemoveTablet {
            table: d.varint()?,
            id: d.varint()?,
        },
        6 => {
            let table = d.varint()?;
            let tablet = d.varint()?;
            let n = d.varint()?;
            let mut add = Vec::new();
            for _ in 0..n {
                add.push(decode_sst(d)?);
            }
            let n = d.varint()?;
            let mut remove = Vec::new();
            for _ in 0..n {
                remove.push(d.varint()?);
            }
            Edit::Files {
                table,
                tablet,
                add,
                remove,
                flushed_seq: d.varint()?,
            }
        }
        7 => Edit::Counters {
            next_id: d.varint()?,
            last_seq: d.varint()?,
        },
        t => {
            return Err(Error::corruption(format!(
                "manifest: unknown edit type {t}"
            )))
        }
    })
}

fn encode_record(edits: &[Edit]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, edits.len() as u64);
    for e in edits {
        encode_edit(&mut out, e);
    }
    out
}

fn decode_record(buf: &[u8]) -> Result<Vec<Edit>> {
    let mut d = Decoder::new(buf, "manifest record");
    let n = d.varint()?;
    let mut edits = Vec::new();
    for _ in 0..n {
        edits.push(decode_edit(&mut d)?);
    }
    if !d.is_empty() {
        return Err(Error::corruption("manifest record: trailing bytes"));
    }
    Ok(edits)
}

/// The open manifest: the current state plus the writer of the live file.
pub struct Manifest {
    store: Arc<dyn FileStore>,
    state: VersionState,
    writer: LogWriter,
    file_number: u64,
}

impl Manifest {
    /// Loads the manifest named by CURRENT (or starts an empty one).
    pub fn open(store: Arc<dyn FileStore>) -> Result<Manifest> {
        let mut state = VersionState {
            next_id: 1,
            ..Default::default()
        };
        let mut old_number = 0;
        if store.exists(CURRENT)? {
            let f = store.open(CURRENT)?;
            let name = String::from_utf8(f.read_at(0, f.len()? as usize)?)
                .map_err(|_| Error::corruption("manifest/CURRENT is not UTF-8"))?;
            let name = name.trim().to_string();
            old_number = name
                .rsplit('-')
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Error::corruption(format!("manifest/CURRENT names {name:?}")))?;
            let mut reader = LogReader::new(store.open(&name)?, name.as_str())?;
            while let Some(payload) = reader.read_record()? {
                for e in decode_record(&payload)? {
                    state.apply(&e)?;
                }
            }
            let report = reader.report();
            if report.corrupt_regions > 0 {
                // A manifest record lost in the middle could drop a file from a
                // tablet; refuse to guess.
                return Err(Error::corruption(format!(
                    "{name}: {} corrupt region(s) in the manifest",
                    report.corrupt_regions
                )));
            }
        }
        let file_number = old_number + 1;
        let (writer, _) = Self::write_new(&store, file_number, &state)?;
        Ok(Manifest {
            store,
            state,
            writer,
            file_number,
        })
    }

    fn file_name(n: u64) -> String {
        format!("manifest/MANIFEST-{n:06}")
    }

    /// Writes a fresh manifest holding a snapshot of `state` and points CURRENT at it.
    fn write_new(
        store: &Arc<dyn FileStore>,
        number: u64,
        state: &VersionState,
    ) -> Result<(LogWriter, String)> {
        let name = Self::file_name(number);
        if store.exists(&name)? {
            store.delete(&name)?;
        }
        let mut writer = LogWriter::new(store.create(&name)?, name.as_str());
        writer.add_records(&[encode_record(&state.snapshot())], true)?;
        let tmp = "manifest/CURRENT.tmp";
        if store.exists(tmp)? {
            store.delete(tmp)?;
        }
        let mut f = store.create(tmp)?;
        f.append_sync(&[format!("{name}\n").as_bytes()])?;
        store.rename(tmp, CURRENT)?;
        // Older manifests are no longer needed.
        for old in store.list("manifest/MANIFEST-")? {
            if old != name {
                store.delete(&old)?;
            }
        }
        Ok((writer, name))
    }

    pub fn state(&self) -> &VersionState {
        &self.state
    }

    /// Allocates a fresh id (file number, table id, tablet id).
    pub fn next_id(&mut self) -> u64 {
        let id = self.state.next_id;
        self.state.next_id += 1;
        id
    }

    /// Durably records a group of edits and applies them to the state.
    pub fn log(&mut self, mut edits: Vec<Edit>, last_seq: u64) -> Result<()> {
        // Validate against a copy first so a bad edit changes nothing.
        let mut next = self.state.clone();
        edits.push(Edit::Counters {
            next_id: self.state.next_id,
            last_seq,
        });
        for e in &edits {
            next.apply(e)?;
        }
        self.writer.add_records(&[encode_record(&edits)], true)?;
        self.state = next;
        if self.writer.len() > REWRITE_BYTES {
            self.file_number += 1;
            let (writer, _) = Self::write_new(&self.store, self.file_number, &self.state)?;
            self.writer = writer;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sst(n: u64) -> SstMeta {
        SstMeta {
            number: n,
            group: "default".into(),
            size: 100,
            entries: 3,
            smallest: b"a".to_vec(),
            largest: b"z".to_vec(),
            max_seq: 9,
            families: vec!["cf".into()],
            row_tombstones: n.is_multiple_of(2),
        }
    }

    #[test]
    fn edits_survive_reopen_and_rewrite() {
        let store: Arc<dyn FileStore> = Arc::new(gfs::MemStore::new());
        {
            let mut m = Manifest::open(store.clone()).unwrap();
            let t = m.next_id();
            m.log(
                vec![Edit::CreateTable {
                    id: t,
                    name: "web".into(),
                    schema: b"s".to_vec(),
                }],
                0,
            )
            .unwrap();
            let tab = m.next_id();
            m.log(
                vec![Edit::AddTablet {
                    table: t,
                    tablet: TabletEntry {
                        id: tab,
                        start: vec![],
                        end: None,
                        flushed_seq: 0,
                        files: vec![],
                    },
                }],
                5,
            )
            .unwrap();
            for i in 0..2000u64 {
                let n = m.next_id();
                m.log(
                    vec![Edit::Files {
                        table: t,
                        tablet: tab,
                        add: vec![sst(n)],
                        remove: if i > 0 { vec![n - 1] } else { vec![] },
                        flushed_seq: i,
                    }],
                    i,
                )
                .unwrap();
            }
        }
        let m = Manifest::open(store.clone()).unwrap();
        let st = m.state();
        let table = st.tables.values().next().unwrap();
        assert_eq!(table.name, "web");
        let tablet = table.tablets.values().next().unwrap();
        assert_eq!(tablet.files.len(), 1);
        assert_eq!(tablet.flushed_seq, 1999);
        assert!(st.next_id > tablet.files[0].number);
        assert_eq!(store.list("manifest/MANIFEST-").unwrap().len(), 1);
    }

    #[test]
    fn garbage_record_is_an_error() {
        assert!(decode_record(&[1, 99]).is_err());
        assert!(decode_record(&[2, 3]).is_err());
        let rec = encode_record(&[Edit::DropTable { id: 3 }]);
        for cut in 0..rec.len() {
            assert!(decode_record(&rec[..cut]).is_err());
        }
    }
}
