//! Deleting many rows (DropRowRange) or a family's cells in every row (before
//! a family is dropped): scan the keys, delete in batches.

use engine::{Bigtable, Mutation, RowMutation, RowRange, ScanSpec, WriteOptions};

const BATCH: usize = 256;

/// Applies `change` to every row of `rows` that has a cell (in `family`, if given).
pub fn delete_rows(
    bt: &Bigtable,
    table: &str,
    rows: RowRange,
    family: Option<&str>,
) -> engine::Result<u64> {
    let spec = ScanSpec {
        rows,
        families: family.map(|f| vec![f.to_string()]),
        max_versions: Some(1),
        ..Default::default()
    };
    let mut scanner = bt.scan(table, spec)?;
    let mut batch = Vec::with_capacity(BATCH);
    let mut n = 0;
    let flush = |batch: &mut Vec<RowMutation>| -> engine::Result<()> {
        if !batch.is_empty() {
            bt.apply_batch(table, batch, WriteOptions::default())?;
            batch.clear();
        }
        Ok(())
    };
    while let Some((key, _)) = scanner.next_row()? {
        let m = match family {
            Some(f) => Mutation::DeleteFamily {
                family: f.to_string(),
            },
            None => Mutation::DeleteRow,
        };
        batch.push(RowMutation {
            row: key,
            mutations: vec![m],
        });
        n += 1;
        if batch.len() >= BATCH {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;
    Ok(n)
}
