//! An in-memory [`Store`] with Bigtable's semantics, for testing the
//! filesystem without the engine or a mount.

use crate::store::{RowStream, Store};
use engine::schema::TableSchema;
use engine::{
    Cell, Error, Guard, Mutation, Predicate, Result, RowMutation, RowOp, RowPeek, RowTxn, ScanSpec,
    TabletInfo, TxnOutcome, WriteOptions, Written,
};
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Versions = BTreeMap<Reverse<u64>, Vec<u8>>;
type Row = BTreeMap<(String, Vec<u8>), Versions>;

struct Table {
    schema: Arc<TableSchema>,
    rows: BTreeMap<Vec<u8>, Row>,
}

/// See the module comment.
pub struct MockStore {
    tables: Mutex<BTreeMap<String, Table>>,
    clock: AtomicU64,
    /// Values above this many bytes are refused, as the engine does.
    max_value: usize,
    /// Run once, after the next row read returns its cells (tests place
    /// a concurrent event between a read and what follows it).
    after_read: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Default for MockStore {
    fn default() -> Self {
        MockStore {
            tables: Mutex::new(BTreeMap::new()),
            clock: AtomicU64::new(1_700_000_000_000_000),
            max_value: engine::DEFAULT_MAX_VALUE,
            after_read: Mutex::new(None),
        }
    }
}

fn matches(spec: &ScanSpec, family: &str, qualifier: &[u8]) -> bool {
    if let Some(fs) = &spec.families {
        if !fs.iter().any(|f| f == family) {
            return false;
        }
    }
    if let Some(re) = &spec.column_regex {
        let Ok(re) = crate::query::compile_column_regex(re) else {
            return false;
        };
        let mut col = family.as_bytes().to_vec();
        col.push(b':');
        col.extend_from_slice(qualifier);
        if !re.is_match(&col) {
            return false;
        }
    }
    true
}

fn select(row_key: &[u8], row: &Row, spec: &ScanSpec) -> Vec<Cell> {
    let mut out = Vec::new();
    for ((family, qualifier), versions) in row {
        if !matches(spec, family, qualifier) {
            continue;
        }
        let mut n = 0u32;
        for (Reverse(ts), value) in versions {
            if !spec.time_range.contains(*ts) {
                continue;
            }
            if spec.max_versions.is_some_and(|m| n >= m) {
                break;
            }
            n += 1;
            out.push(Cell {
                row: row_key.to_vec(),
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp: *ts,
                value: value.clone().into(),
            });
        }
    }
    match &spec.filter {
        // The engine's evaluator; callers validated the filter (and the
        // mock's tests stay far below its limits).
        Some(f) => match f.compile() {
            Ok(c) => c
                .try_apply(row_key, out)
                .map(|cells| cells.into_iter().map(|l| l.cell).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        },
        None => out,
    }
}

impl MockStore {
    /// A store refusing values above `max_value` bytes.
    pub fn with_max_value(max_value: usize) -> MockStore {
        MockStore {
            max_value,
            ..Default::default()
        }
    }

    /// Runs `f` once, right after the next row or cell read has read
    /// (and let go of the store).
    pub fn after_next_read(&self, f: impl FnOnce() + Send + 'static) {
        *self.after_read.lock() = Some(Box::new(f));
    }

    /// `r`, once the read it is the result of let go of the store and the
    /// hook of [`MockStore::after_next_read`] (if any) ran.
    fn then_after_read<R>(&self, r: R) -> R {
        let then = self.after_read.lock().take();
        if let Some(f) = then {
            f();
        }
        r
    }

    fn now(&self) -> u64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let mut cur = self.clock.load(Ordering::SeqCst);
        loop {
            let next = wall.max(cur + 1);
            match self
                .clock
                .compare_exchange(cur, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(c) => cur = c,
            }
        }
    }

    fn check_family(t: &Table, table: &str, family: &str) -> Result<()> {
        if t.schema.families.contains_key(family) {
            Ok(())
        } else {
            Err(Error::UnknownFamily {
                table: table.into(),
                family: family.into(),
            })
        }
    }

    fn validate(&self, t: &Table, table: &str, row: &[u8], ops: &[RowOp]) -> Result<()> {
        if row.is_empty() {
            return Err(Error::invalid("empty row key"));
        }
        if row.len() > engine::MAX_ROW_KEY {
            return Err(Error::RowKeyTooLong(row.len()));
        }
        for op in ops {
            match op {
                RowOp::Mutate(Mutation::SetCell { family, value, .. }) => {
                    Self::check_family(t, table, family)?;
                    if value.len() > self.max_value {
                        return Err(Error::ValueTooLarge {
                            size: value.len(),
                            limit: self.max_value,
                        });
                    }
                }
                RowOp::Mutate(Mutation::DeleteCells { family, .. })
                | RowOp::Mutate(Mutation::DeleteFamily { family })
                | RowOp::Increment { family, .. }
                | RowOp::Append { family, .. } => Self::check_family(t, table, family)?,
                RowOp::Mutate(Mutation::DeleteRow) => {}
                RowOp::Mutate(Mutation::AddToCell { family, .. }) => {
                    Self::check_family(t, table, family)?;
                    if t.schema.families[family].aggregate.is_none() {
                        return Err(Error::invalid("AddToCell needs an aggregate family"));
                    }
                }
            }
        }
        Ok(())
    }

    fn newest(row: Option<&Row>, family: &str, qualifier: &[u8]) -> Option<Vec<u8>> {
        row?.get(&(family.to_string(), qualifier.to_vec()))?
            .values()
            .next()
            .cloned()
    }

    fn run(&self, t: &mut Table, row_key: &[u8], ops: &[RowOp]) -> Result<Vec<Vec<u8>>> {
        let mut results = Vec::new();
        let mut row = t.rows.remove(row_key).unwrap_or_default();
        // One time for the row's transaction, as the engine stamps it: two
        // cells of one column that name none are one version, the last.
        let mut stamp = None;
        let mut now = || *stamp.get_or_insert_with(|| self.now());
        for op in ops {
            match op {
                RowOp::Mutate(Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                }) => {
                    let ts = timestamp.unwrap_or_else(&mut now);
                    row.entry((family.clone(), qualifier.clone()))
                        .or_default()
                        .insert(Reverse(ts), value.clone());
                }
                RowOp::Mutate(Mutation::DeleteCells {
                    family,
                    qualifier,
                    range,
                }) => {
                    if let Some(v) = row.get_mut(&(family.clone(), qualifier.clone())) {
                        v.retain(|Reverse(ts), _| !range.contains(*ts));
                    }
                }
                RowOp::Mutate(Mutation::DeleteFamily { family }) => {
                    row.retain(|(f, _), _| f != family)
                }
                RowOp::Mutate(Mutation::DeleteRow) => row.clear(),
                RowOp::Mutate(Mutation::AddToCell {
                    family,
                    qualifier,
                    timestamp,
                    input,
                }) => {
                    let Some(agg) = t.schema.families.get(family).and_then(|f| f.aggregate) else {
                        return Err(Error::invalid("AddToCell needs an aggregate family"));
                    };
                    let cells = row.entry((family.clone(), qualifier.clone())).or_default();
                    let new = match cells.get(&Reverse(*timestamp)) {
                        Some(old) => {
                            let mut acc = old.clone();
                            agg.fold_into(&mut acc, &input.to_be_bytes());
                            acc
                        }
                        None => input.to_be_bytes().to_vec(),
                    };
                    cells.insert(Reverse(*timestamp), new);
                }
                RowOp::Increment {
                    family,
                    qualifier,
                    delta,
                } => {
                    let old = match Self::newest(Some(&row), family, qualifier) {
                        None => 0,
                        Some(v) => i64::from_be_bytes(
                            <[u8; 8]>::try_from(v.as_slice())
                                .map_err(|_| Error::NotACounter(v.len()))?,
                        ),
                    };
                    let new = old.wrapping_add(*delta);
                    let bytes = new.to_be_bytes().to_vec();
                    row.entry((family.clone(), qualifier.clone()))
                        .or_default()
                        .insert(Reverse(now()), bytes.clone());
                    results.push(bytes);
                }
                RowOp::Append {
                    family,
                    qualifier,
                    data,
                } => {
                    let mut v = Self::newest(Some(&row), family, qualifier).unwrap_or_default();
                    v.extend_from_slice(data);
                    if v.len() > self.max_value {
                        return Err(Error::ValueTooLarge {
                            size: v.len(),
                            limit: self.max_value,
                        });
                    }
                    row.entry((family.clone(), qualifier.clone()))
                        .or_default()
                        .insert(Reverse(now()), v.clone());
                    results.push(v);
                }
            }
        }
        row.retain(|_, v| !v.is_empty());
        if !row.is_empty() {
            t.rows.insert(row_key.to_vec(), row);
        }
        Ok(results)
    }

    /// Rows of a table (for assertions).
    pub fn row_count(&self, table: &str) -> usize {
        self.tables.lock().get(table).map_or(0, |t| t.rows.len())
    }
}

struct VecStream(std::vec::IntoIter<(Vec<u8>, Vec<Cell>)>);

impl RowStream for VecStream {
    fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        Ok(self.0.next())
    }
}

impl Store for MockStore {
    fn list_tables(&self) -> Vec<String> {
        self.tables.lock().keys().cloned().collect()
    }
    fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(Error::invalid(format!("bad table name {name:?}")));
        }
        let mut g = self.tables.lock();
        if g.contains_key(name) {
            return Err(Error::TableExists(name.into()));
        }
        g.insert(
            name.into(),
            Table {
                schema: Arc::new(schema),
                rows: BTreeMap::new(),
            },
        );
        Ok(())
    }
    fn delete_table(&self, name: &str) -> Result<()> {
        let mut g = self.tables.lock();
        let t = g
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.into()))?;
        t.schema.check_deletable(name)?;
        g.remove(name);
        Ok(())
    }
    fn schema(&self, table: &str) -> Result<Arc<TableSchema>> {
        self.tables
            .lock()
            .get(table)
            .map(|t| t.schema.clone())
            .ok_or_else(|| Error::TableNotFound(table.into()))
    }
    fn set_schema(&self, table: &str, schema: TableSchema) -> Result<()> {
        let mut g = self.tables.lock();
        let t = g
            .get_mut(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        t.schema.check_change(table, &schema)?;
        for f in t.schema.families.keys() {
            if !schema.families.contains_key(f)
                && t.rows.values().any(|r| r.keys().any(|(rf, _)| rf == f))
            {
                return Err(Error::FamilyNotEmpty(f.clone()));
            }
        }
        t.schema = Arc::new(schema);
        Ok(())
    }
    fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<Written> {
        // One timestamp for the row's cells that name none, as the engine
        // stamps a row, and it is what the write reports.
        let ts = self.now();
        let txn = RowTxn::new(
            m.row.clone(),
            m.mutations
                .iter()
                .map(|mu| RowOp::Mutate(mu.stamped(ts)))
                .collect(),
        );
        self.apply_txns(table, &[txn], opts)?;
        Ok(Written {
            timestamp: ts,
            bytes: engine::mutation::value_bytes(m),
        })
    }
    fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        // In memory, a synced write is no different.
        _opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        let mut g = self.tables.lock();
        let t = g
            .get_mut(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        for (index, txn) in txns.iter().enumerate() {
            self.validate(t, table, &txn.row, &txn.ops)
                .and_then(|_| self.validate(t, table, &txn.row, &txn.otherwise))
                .map_err(|e| Error::BadBatchEntry {
                    index,
                    source: Box::new(e),
                })?;
        }
        let mut out = Vec::new();
        for txn in txns {
            let held = match &txn.guard {
                None => true,
                Some(Guard::Cell(c)) => {
                    let cur = Self::newest(t.rows.get(&txn.row), &c.family, &c.qualifier);
                    match &c.predicate {
                        Predicate::Exists => cur.is_some(),
                        Predicate::Equals(v) => cur.as_ref() == Some(v),
                    }
                }
                Some(Guard::Filter(f)) => {
                    let spec = ScanSpec {
                        filter: Some(f.clone()),
                        ..Default::default()
                    };
                    t.rows
                        .get(&txn.row)
                        .is_some_and(|r| !select(&txn.row, r, &spec).is_empty())
                }
            };
            let ops = if held { &txn.ops } else { &txn.otherwise };
            let results = self.run(t, &txn.row, ops)?;
            out.push(TxnOutcome {
                guard_held: held,
                results,
            });
        }
        Ok(out)
    }
    fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let read = || -> Result<Vec<Cell>> {
            let g = self.tables.lock();
            let t = g
                .get(table)
                .ok_or_else(|| Error::TableNotFound(table.into()))?;
            let mut cells = t
                .rows
                .get(row)
                .map(|r| select(row, r, spec))
                .unwrap_or_default();
            if let Some(n) = spec.cell_limit {
                cells.truncate(n as usize);
            }
            if let Some(limit) = spec.byte_limit {
                // The cell that reaches the limit is the last.
                let mut bytes = 0;
                if let Some(last) = cells.iter().position(|c| {
                    bytes += c.value.len() as u64;
                    bytes >= limit
                }) {
                    cells.truncate(last + 1);
                }
            }
            Ok(cells)
        };
        self.then_after_read(read())
    }
    fn peek_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        let cells = self.read_row(table, row, spec)?;
        if !cells.is_empty() {
            return Ok(RowPeek::Cells(cells));
        }
        // One tablet: the next row with a cell the read selects, or the end.
        let g = self.tables.lock();
        let t = g
            .get(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        let until = t
            .rows
            .range::<Vec<u8>, _>((Bound::Excluded(row.to_vec()), Bound::Unbounded))
            .find(|(k, r)| !select(k, r, spec).is_empty())
            .map(|(k, _)| k.clone());
        Ok(RowPeek::Absent { until })
    }
    fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        let read = || -> Result<Option<Cell>> {
            let g = self.tables.lock();
            let t = g
                .get(table)
                .ok_or_else(|| Error::TableNotFound(table.into()))?;
            Ok(t.rows.get(row).and_then(|r| {
                let (Reverse(ts), v) = r
                    .get(&(family.to_string(), qualifier.to_vec()))?
                    .iter()
                    .next()?;
                Some(Cell {
                    row: row.to_vec(),
                    family: family.into(),
                    qualifier: qualifier.to_vec(),
                    timestamp: *ts,
                    value: v.clone().into(),
                })
            }))
        };
        self.then_after_read(read())
    }
    fn scan(&self, table: &str, spec: ScanSpec) -> Result<Box<dyn RowStream>> {
        let g = self.tables.lock();
        let t = g
            .get(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        let range = (
            match &spec.rows.start {
                Bound::Included(s) => Bound::Included(s.clone()),
                Bound::Excluded(s) => Bound::Excluded(s.clone()),
                Bound::Unbounded => Bound::Unbounded,
            },
            match &spec.rows.end {
                Bound::Included(s) => Bound::Included(s.clone()),
                Bound::Excluded(s) => Bound::Excluded(s.clone()),
                Bound::Unbounded => Bound::Unbounded,
            },
        );
        if matches!((&range.0, &range.1), (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) if a > b)
        {
            return Ok(Box::new(VecStream(Vec::new().into_iter())));
        }
        let mut rows = Vec::new();
        let mut cells_left = spec.cell_limit.unwrap_or(u64::MAX);
        for (k, r) in t.rows.range::<Vec<u8>, _>(range) {
            if spec.row_limit.is_some_and(|n| rows.len() as u64 >= n) || cells_left == 0 {
                break;
            }
            let mut cells = select(k, r, &spec);
            if cells.is_empty() {
                continue;
            }
            cells.truncate(cells_left.min(usize::MAX as u64) as usize);
            cells_left -= cells.len() as u64;
            rows.push((k.clone(), cells));
        }
        Ok(Box::new(VecStream(rows.into_iter())))
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        self.schema(table)?;
        Ok(vec![TabletInfo {
            id: 1,
            table: table.into(),
            start: Vec::new(),
            end: None,
            memtable_bytes: 0,
            sstable_bytes: 0,
            sstables: 0,
            server: "mock".into(),
        }])
    }
    fn status(&self) -> Vec<String> {
        vec!["mock store".into()]
    }
}
