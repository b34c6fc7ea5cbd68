//! The trash: a table deleted while `Options::trash_period` is not zero is
//! kept whole for that long. Its tablets' METADATA rows stay as they were
//! (so the master's collection keeps their SSTables and logs live, with no
//! list of its own), unassigned, and its definition moves from the
//! `table:def` row named by the table to a trash row named by its id (so a
//! new table may take the name at once). Undeleting writes the definition
//! back, under the old name or a new one, and the tablets are assigned
//! again; purging, or the period running out, deletes the rows and the
//! next collection frees the files. The master does each change
//! (`master/trash.rs`); this file holds the rows' form and the reads.

use crate::client::{parse_meta_row, table_family_rows, Client, Scanner};
use crate::db::Bigtable;
use crate::error::{Error, Result};
use crate::metadata::{tablet_row_key, FAMILY_TABLE, FAMILY_TABLET, METADATA_ID};
use crate::scan::ScanSpec;
use crate::schema::TableSchema;
use crate::Mutation;
use crate::RowRange;
use std::ops::Bound;
use std::sync::Arc;

/// The qualifier of a trash row's cell.
const Q_TRASH: &[u8] = b"trash";
/// The byte after METADATA's id that starts trash rows (table
/// definitions use 2).
const TRASH_TAG: u8 = 3;

/// A deleted table in the trash.
#[derive(Debug, Clone, PartialEq)]
pub struct TrashEntry {
    /// The table's id (kept on undelete; ids are never reused).
    pub id: u64,
    /// The name it had.
    pub name: String,
    /// When it was deleted, in µs since the epoch.
    pub deleted_at: u64,
    /// Its schema (owner, group and mode decide who may undelete it).
    pub schema: TableSchema,
}

/// What a trashed table keeps in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrashCost {
    /// Tablets (METADATA rows).
    pub tablets: u64,
    /// SSTables referenced (shared files counted once per tablet).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl TrashEntry {
    /// The METADATA row of table `id`'s trash entry.
    pub(crate) fn key(id: u64) -> Vec<u8> {
        let mut k = METADATA_ID.to_be_bytes().to_vec();
        k.push(TRASH_TAG);
        k.extend_from_slice(&id.to_be_bytes());
        k
    }

    /// The cell that records it: deletion time, name, then the schema.
    pub(crate) fn mutation(&self) -> Mutation {
        let mut v = self.deleted_at.to_be_bytes().to_vec();
        v.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        v.extend_from_slice(self.name.as_bytes());
        v.extend_from_slice(&self.schema.encode());
        Mutation::SetCell {
            family: FAMILY_TABLE.into(),
            qualifier: Q_TRASH.to_vec(),
            timestamp: None,
            value: v,
        }
    }

    fn decode(id: u64, v: &[u8]) -> Result<TrashEntry> {
        let bad = || Error::corruption(format!("METADATA: trash entry {id}: short"));
        let (at, rest) = v.split_first_chunk::<8>().ok_or_else(bad)?;
        let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_be_bytes(*len) as usize;
        let name = rest.get(..len).ok_or_else(bad)?;
        Ok(TrashEntry {
            id,
            name: String::from_utf8(name.to_vec())
                .map_err(|_| Error::corruption(format!("trash entry {id}: name not UTF-8")))?,
            deleted_at: u64::from_be_bytes(*at),
            schema: TableSchema::decode(&rest[len..])?,
        })
    }
}

/// Every trash entry, oldest id first.
pub(crate) fn read_trash(client: &Arc<Client>) -> Result<Vec<TrashEntry>> {
    let start = TrashEntry::key(0);
    let mut end = METADATA_ID.to_be_bytes().to_vec();
    end.push(TRASH_TAG + 1);
    let mut scan = table_family_rows(client, start.clone(), end);
    let mut out = Vec::new();
    while let Some((row, cells)) = scan.next_row()? {
        let Some(id) = row
            .get(start.len() - 8..)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
        else {
            continue;
        };
        if let Some(c) = cells.iter().find(|c| c.qualifier == Q_TRASH) {
            out.push(TrashEntry::decode(u64::from_be_bytes(id), &c.value)?);
        }
    }
    Ok(out)
}

/// What table `id`'s tablets keep in the store.
pub(crate) fn cost(client: &Arc<Client>, id: u64) -> Result<TrashCost> {
    let spec = ScanSpec {
        rows: RowRange {
            start: Bound::Included(tablet_row_key(id, Some(b""))),
            end: Bound::Included(tablet_row_key(id, None)),
        },
        families: Some(vec![FAMILY_TABLET.into()]),
        ..ScanSpec::default()
    };
    let mut scan = Scanner::new(client.clone(), METADATA_ID, spec);
    let mut c = TrashCost::default();
    while let Some((row, cells)) = scan.next_row()? {
        if let Some(r) = parse_meta_row(&row, &cells)? {
            c.tablets += 1;
            c.files += r.meta.files.len() as u64;
            c.bytes += r.meta.files.iter().map(|f| f.size).sum::<u64>();
        }
    }
    Ok(c)
}

impl Bigtable {
    /// How long a deleted table stays in the trash (zero: no trash).
    pub fn trash_period(&self) -> std::time::Duration {
        self.env().opts.trash_period
    }

    /// The tables in the trash, with what each keeps in the store.
    pub fn trash(&self) -> Result<Vec<(TrashEntry, TrashCost)>> {
        let client = self.client()?;
        read_trash(client)?
            .into_iter()
            .map(|e| {
                let c = cost(client, e.id)?;
                Ok((e, c))
            })
            .collect()
    }

    /// Brings trashed table `id` back as `name` (its old name if None).
    pub fn undelete_table(&self, id: u64, name: Option<&str>) -> Result<String> {
        self.master(|m| m.undelete_table(id, name))
    }

    /// Deletes trashed table `id` for good (its files go at the next
    /// collection).
    pub fn purge_trash(&self, id: u64) -> Result<()> {
        self.master(|m| m.purge_trash(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FamilySchema;

    #[test]
    fn entry_roundtrips_and_sorts_after_definitions() {
        let e = TrashEntry {
            id: 42,
            name: "web@x".into(),
            deleted_at: 1_700_000_000_000_000,
            schema: TableSchema::with_families([FamilySchema::new("f")]),
        };
        let Mutation::SetCell { value, .. } = e.mutation() else {
            panic!()
        };
        assert_eq!(TrashEntry::decode(42, &value).unwrap(), e);
        assert!(TrashEntry::decode(42, &value[..10]).is_err());
        let (_, defs_end) = crate::metadata::table_def_range();
        assert!(TrashEntry::key(0) >= defs_end);
        assert!(TrashEntry::key(1) < TrashEntry::key(2));
    }
}
