//! The table definitions METADATA holds, as a client reads them: how a
//! daemon that runs no master learns the cluster's tables.

use super::{Client, Scanner};
use crate::coordination::Schemas;
use crate::data::RowRange;
use crate::metadata::{table_def_range, TableDef, FAMILY_TABLE, METADATA_ID, Q_DEF};
use crate::scan::ScanSpec;
use crate::Result;
use chubby::LockService;
use std::ops::Bound;
use std::sync::Arc;

/// One table's definition, and whether the lock service's schema (which
/// wins) differs from METADATA's.
pub(crate) struct ReadDef {
    pub def: TableDef,
    /// The schema METADATA has, when the lock service's replaced it.
    pub stale_in_metadata: bool,
    /// The lock service has no schema for it yet.
    pub missing_in_lock: bool,
}

/// The `table` family of METADATA's rows in `[start, end)`: table
/// definitions, and the trash's rows (`crate::trash`).
pub(crate) fn table_family_rows(client: &Arc<Client>, start: Vec<u8>, end: Vec<u8>) -> Scanner {
    let spec = ScanSpec {
        rows: RowRange {
            start: Bound::Included(start),
            end: Bound::Excluded(end),
        },
        families: Some(vec![FAMILY_TABLE.into()]),
        ..ScanSpec::default()
    };
    Scanner::new(client.clone(), METADATA_ID, spec)
}

/// Every table METADATA defines, each with the lock service's schema where
/// it has one.
pub(crate) fn read_table_defs(
    client: &Arc<Client>,
    lock: &dyn LockService,
) -> Result<Vec<ReadDef>> {
    let (start, end) = table_def_range();
    let mut scan = table_family_rows(client, start.clone(), end);
    let mut defs = Vec::new();
    while let Some((row, cells)) = scan.next_row()? {
        let Some(name) = row.get(start.len()..) else {
            continue;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        let Some(c) = cells.iter().find(|c| c.qualifier == Q_DEF) else {
            continue;
        };
        let mut def = TableDef::decode(&name, &c.value)?;
        let mut read = ReadDef {
            stale_in_metadata: false,
            missing_in_lock: false,
            def: def.clone(),
        };
        match Schemas(lock).load_schema(&name)? {
            Some(s) if s != def.schema => {
                def.schema = s;
                read.def = def;
                read.stale_in_metadata = true;
            }
            Some(_) => {}
            None => read.missing_in_lock = true,
        }
        defs.push(read);
    }
    Ok(defs)
}
