//! METADATA row keys and columns.
//!
//! A tablet's row key is `be64(table id) 0x00 end-row`, or
//! `be64(table id) 0x01` for a table's last tablet, so a table's tablets sort
//! by end row with the unbounded one last, and the tablet holding row `r` is
//! the first row at or after [`lookup_key`]`(table, r)`. Table definitions
//! are rows `be64(0) 0x02 name` inside the root tablet.

use super::codec::TabletMeta;
use crate::data::Mutation;
use crate::schema::{FamilySchema, GcRule, TableSchema};
use crate::{Error, Result};
use smallvec::SmallVec;

/// METADATA's own table id; user tables start at 1.
pub const METADATA_ID: u64 = 0;
/// METADATA's name; the leading dot keeps it out of user table names.
pub const METADATA_NAME: &str = ".METADATA";

/// Family holding the tablet's descriptor (`info`).
pub const FAMILY_TABLET: &str = "tablet";
/// Family holding the serving server (`server`).
pub const FAMILY_LOCATION: &str = "location";
/// Family holding the tablet's event log (`event`, one version per event).
pub const FAMILY_LOG: &str = "log";
/// Family holding a table definition (`def`).
pub const FAMILY_TABLE: &str = "table";

pub const Q_INFO: &[u8] = b"info";
pub const Q_SERVER: &[u8] = b"server";
pub const Q_EVENT: &[u8] = b"event";
pub const Q_DEF: &[u8] = b"def";

/// Events kept per tablet.
const EVENTS_KEPT: u32 = 16;

/// The root tablet covers METADATA rows below this key: the rows that
/// describe METADATA's own tablets and the table definitions.
pub fn root_end() -> Vec<u8> {
    1u64.to_be_bytes().to_vec()
}

/// The schema of METADATA: everything in memory, as in the paper.
pub fn metadata_schema() -> TableSchema {
    let fam = |name: &str, versions: u32| {
        let mut f = FamilySchema::new(name);
        f.in_memory = true;
        f.gc = GcRule::MaxVersions(versions);
        f
    };
    TableSchema::with_families([
        fam(FAMILY_TABLET, 1),
        fam(FAMILY_LOCATION, 1),
        fam(FAMILY_LOG, EVENTS_KEPT),
        fam(FAMILY_TABLE, 1),
    ])
}

/// Row key of the tablet of `table` ending at `end` (exclusive; None = last).
pub fn tablet_row_key(table: u64, end: Option<&[u8]>) -> Vec<u8> {
    let id = table.to_be_bytes();
    // Room for the byte `lookup_key` adds.
    let mut k = Vec::with_capacity(10 + end.map_or(0, <[u8]>::len));
    for part in tablet_row_key_parts(&id, end) {
        k.extend_from_slice(part);
    }
    k
}

/// The pieces of a tablet's row key, in order: the table id (big-endian),
/// then 0 and the end row, or 1 for the table's last tablet.
fn tablet_row_key_parts<'a>(id: &'a [u8; 8], end: Option<&'a [u8]>) -> [&'a [u8]; 3] {
    match end {
        Some(e) => [id, &[0], e],
        None => [id, &[1], &[]],
    }
}

/// The cells of a tablet's METADATA row: its descriptor and its location
/// (`server`; empty = unassigned). The master and tablet servers both write
/// them.
pub(crate) fn tablet_row_cells(meta: &TabletMeta, server: &[u8]) -> Vec<Mutation> {
    vec![
        Mutation::SetCell {
            family: FAMILY_TABLET.into(),
            qualifier: Q_INFO.to_vec(),
            timestamp: None,
            value: meta.encode(),
        },
        Mutation::SetCell {
            family: FAMILY_LOCATION.into(),
            qualifier: Q_SERVER.to_vec(),
            timestamp: None,
            value: server.to_vec(),
        },
    ]
}

/// The smallest row key at or after which the tablet holding `row` of
/// `table` is found: the tablet with the smallest end row greater than `row`.
pub fn lookup_key(table: u64, row: &[u8]) -> Vec<u8> {
    let mut k = tablet_row_key(table, Some(row));
    k.push(0);
    k
}

/// [`lookup_key`] in a buffer on the stack for rows up to 53 bytes: a
/// lookup in the client's location cache, once per read, allocates nothing.
pub fn lookup_key_small(table: u64, row: &[u8]) -> SmallVec<[u8; 64]> {
    let id = table.to_be_bytes();
    let mut k = SmallVec::new();
    for part in tablet_row_key_parts(&id, Some(row)) {
        k.extend_from_slice(part);
    }
    k.push(0);
    k
}

/// Splits a tablet row key into (table id, end row).
pub fn parse_tablet_row_key(key: &[u8]) -> Option<(u64, Option<Vec<u8>>)> {
    let (id, rest) = key.split_first_chunk::<8>()?;
    let id = u64::from_be_bytes(*id);
    match rest.split_first()? {
        (0, end) => Some((id, Some(end.to_vec()))),
        (1, []) => Some((id, None)),
        _ => None,
    }
}

/// Row key of a table definition.
pub fn table_def_key(name: &str) -> Vec<u8> {
    let mut k = METADATA_ID.to_be_bytes().to_vec();
    k.push(2);
    k.extend_from_slice(name.as_bytes());
    k
}

/// First and end (exclusive) keys of the table-definition rows.
pub fn table_def_range() -> (Vec<u8>, Vec<u8>) {
    let mut start = METADATA_ID.to_be_bytes().to_vec();
    start.push(2);
    let mut end = METADATA_ID.to_be_bytes().to_vec();
    end.push(3);
    (start, end)
}

/// A table as METADATA defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// The table's id, which its tablets' METADATA rows carry.
    pub id: u64,
    /// Its name (the mount's directory).
    pub name: String,
    /// Its families and their settings.
    pub schema: TableSchema,
}

impl TableDef {
    /// The METADATA cell: the id, then the schema.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.id.to_be_bytes().to_vec();
        out.extend_from_slice(&self.schema.encode());
        out
    }

    /// Reads table `name`'s METADATA cell.
    pub fn decode(name: &str, value: &[u8]) -> Result<TableDef> {
        let (id, schema) = value.split_first_chunk::<8>().ok_or_else(|| {
            Error::corruption(format!("METADATA: table {name}: short definition"))
        })?;
        Ok(TableDef {
            id: u64::from_be_bytes(*id),
            name: name.to_string(),
            schema: TableSchema::decode(schema)?,
        })
    }

    /// The mutation that records this definition.
    pub fn mutation(&self) -> Mutation {
        Mutation::SetCell {
            family: FAMILY_TABLE.to_string(),
            qualifier: Q_DEF.to_vec(),
            timestamp: None,
            value: self.encode(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tablet_keys_sort_by_end_with_the_last_tablet_last() {
        let a = tablet_row_key(5, Some(b"m"));
        let b = tablet_row_key(5, Some(b"m\0"));
        let c = tablet_row_key(5, Some(b"z"));
        let d = tablet_row_key(5, None);
        let next = tablet_row_key(6, Some(b""));
        assert!(a < b && b < c && c < d && d < next);
        assert_eq!(parse_tablet_row_key(&a), Some((5, Some(b"m".to_vec()))));
        assert_eq!(parse_tablet_row_key(&d), Some((5, None)));
        assert_eq!(parse_tablet_row_key(b"short"), None);
    }

    #[test]
    fn lookup_finds_the_tablet_whose_end_is_above_the_row() {
        // Tablets of table 5: [.., "m") ["m", None).
        let rows = [tablet_row_key(5, Some(b"m")), tablet_row_key(5, None)];
        let find = |row: &[u8]| {
            let k = lookup_key(5, row);
            assert_eq!(lookup_key_small(5, row).as_slice(), k.as_slice());
            rows.iter().position(|r| *r >= k)
        };
        assert_eq!(find(b"a"), Some(0));
        assert_eq!(find(b"l\xff\xff"), Some(0));
        assert_eq!(
            find(b"m"),
            Some(1),
            "the end row belongs to the next tablet"
        );
        assert_eq!(find(b"zzz"), Some(1));
    }

    #[test]
    fn metadata_keys_of_user_tables_are_outside_the_root() {
        let root_end = root_end();
        assert!(lookup_key(METADATA_ID, &tablet_row_key(1, Some(b""))) < root_end);
        assert!(table_def_key("zzz") < root_end);
        assert!(tablet_row_key(1, Some(b"")) >= root_end);
        let (s, e) = table_def_range();
        assert!(s <= table_def_key("a") && table_def_key("a") < e);
    }

    #[test]
    fn table_definitions_roundtrip() {
        let d = TableDef {
            id: 7,
            name: "web".into(),
            schema: TableSchema::with_families([FamilySchema::new("anchor")]),
        };
        assert_eq!(TableDef::decode("web", &d.encode()).unwrap(), d);
        assert!(TableDef::decode("web", b"abc").is_err());
    }
}
