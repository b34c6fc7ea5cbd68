//! Reading a table's tablets back from METADATA rows that a crash may have
//! left half-changed.
//!
//! A split writes the new left half's row first and then shrinks the right
//! half's row; a merge first widens the right tablet's row and then deletes
//! the left one. Either way a crash in between leaves two rows whose ranges
//! overlap, and the rule that resolves both is the same: a row starts where
//! the row before it ends. That finishes an interrupted split and undoes an
//! interrupted merge (the widened row keeps the left files as foreign files
//! until its next major compaction).

use super::codec::TabletMeta;

/// One table's tablets, given its rows in key order (by end row), with each
/// start moved to the previous row's end (the first to `first`). Returns the
/// tablets and the ones whose stored row must be rewritten.
pub fn effective_tablets(
    rows: Vec<TabletMeta>,
    first: &[u8],
) -> (Vec<TabletMeta>, Vec<TabletMeta>) {
    let mut out: Vec<TabletMeta> = Vec::with_capacity(rows.len());
    let mut fixed = Vec::new();
    for mut t in rows {
        let want = match out.last() {
            Some(prev) => prev.end.clone().unwrap_or_default(),
            None => first.to_vec(),
        };
        if out.last().is_some_and(|p| p.end.is_none()) {
            // Rows after an unbounded tablet cannot exist; ignore them.
            continue;
        }
        if t.start != want {
            if t.start > want {
                log::warn!(
                    "METADATA: table {} has a gap before tablet {}; extending it",
                    t.table,
                    t.id
                );
            }
            t.start = want;
            if t.end.as_ref().is_some_and(|e| *e <= t.start) {
                continue;
            }
            fixed.push(t.clone());
        }
        out.push(t);
    }
    (out, fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: u64, start: &[u8], end: Option<&[u8]>) -> TabletMeta {
        TabletMeta {
            id,
            table: 1,
            start: start.to_vec(),
            end: end.map(|e| e.to_vec()),
            files: Vec::new(),
            redo: None,
        }
    }

    #[test]
    fn consistent_rows_are_kept_as_they_are() {
        let rows = vec![t(1, b"", Some(b"m")), t(2, b"m", None)];
        let (out, fixed) = effective_tablets(rows.clone(), b"");
        assert_eq!(out, rows);
        assert!(fixed.is_empty());
    }

    #[test]
    fn an_interrupted_split_is_finished() {
        // Left half written, right half (the old row) not yet shrunk.
        let (out, fixed) = effective_tablets(vec![t(5, b"", Some(b"m")), t(1, b"", None)], b"");
        assert_eq!(out, vec![t(5, b"", Some(b"m")), t(1, b"m", None)]);
        assert_eq!(fixed, vec![t(1, b"m", None)]);
    }

    #[test]
    fn an_interrupted_merge_is_undone() {
        // The right tablet was widened to cover the left, which still exists.
        let rows = vec![t(1, b"", Some(b"m")), t(2, b"", Some(b"x"))];
        let (out, _) = effective_tablets(rows, b"");
        assert_eq!(out, vec![t(1, b"", Some(b"m")), t(2, b"m", Some(b"x"))]);
    }
}
