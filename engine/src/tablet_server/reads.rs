//! Reads of one served tablet: a row, a column, or one tablet's part of a
//! scan. Each read takes the tablet's current version (memtables and
//! SSTables) and never blocks writers or compactions.

use super::{Served, TabletServer};
use crate::changes::WATERMARK_QUALIFIER;
use crate::concat;
use crate::data::*;
use crate::env::now_micros;
use crate::iterator::InternalIterator;
use crate::key;
use crate::merge::MergingIterator;
use crate::packed_row::PackedRow;
use crate::point::ColumnLookup;
use crate::protocol::{CellSource, ScanPart, TabletReads};
use crate::read::CellReader;
use crate::scan::ScanSpec;
use crate::schema::{TableSchema, CHANGES_FAMILY};
use crate::tablet::{select_files, Sst, TabletVersion};
use crate::value::Value;
use crate::{Error, Result};
use arc_swap::Guard;
use std::hash::Hasher;
use std::ops::Bound;
use std::sync::Arc;

/// Rows up to this size (of SSTable entries) are kept whole in the scan cache.
const SCAN_CACHE_ROW_BYTES: usize = 64 << 10;

fn check_row(row: &[u8]) -> Result<()> {
    if row.len() > MAX_ROW_KEY {
        return Err(Error::RowKeyTooLong(row.len()));
    }
    Ok(())
}

/// Cursors over a tablet version's memtables, newest first.
fn memtable_sources(v: &TabletVersion) -> Vec<Box<dyn InternalIterator>> {
    let mut sources: Vec<Box<dyn InternalIterator>> = Vec::with_capacity(2 + v.imm.len());
    // An empty memtable has nothing the caller's snapshot (taken before
    // the version) can see: entries up to it were inserted before it.
    if !v.mem.is_empty() {
        sources.push(Box::new(v.mem.iter()));
    }
    for m in v.imm.iter().rev() {
        sources.push(Box::new(m.iter()));
    }
    sources
}

/// One iterator over `sources`: the source itself when there is one.
fn merged(mut sources: Vec<Box<dyn InternalIterator>>) -> Box<dyn InternalIterator> {
    if sources.len() == 1 {
        if let Some(only) = sources.pop() {
            return only;
        }
    }
    Box::new(MergingIterator::new(sources))
}

fn read_target(server: &TabletServer, tablet: u64, row: &[u8]) -> Result<Arc<Served>> {
    check_row(row)?;
    let s = server.served(tablet)?;
    if !s.tablet.contains(row) {
        return Err(server.not_serving(tablet));
    }
    count_read(server, &s, row);
    crate::keyviz::record(&s.table.name, row, crate::keyviz::Access::Read);
    Ok(s)
}

fn count_read(server: &TabletServer, s: &Served, row: &[u8]) {
    server.counters.reads.incr();
    s.requests.incr();
    s.load.touch(row);
}

/// Adds the bytes of cells read to their tablet's load.
fn count_bytes<'a>(s: &Served, values: impl Iterator<Item = &'a Value>) {
    s.load.bytes.add(values.map(|v| v.len() as u64).sum());
}

/// Sources of one row in a tablet: memtables plus the row's SSTable
/// entries, served from the scan cache when possible.
fn row_sources(
    server: &TabletServer,
    v: &TabletVersion,
    schema: &TableSchema,
    row: &[u8],
    families: Option<&[String]>,
) -> Result<Vec<Box<dyn InternalIterator>>> {
    let mut sources = memtable_sources(v);
    // files_version is unique to this tablet's SSTable set, so entries
    // cached for an older set are never found again (they age out).
    let cache_id = match families {
        None => v.files_version,
        Some(f) => {
            // Hashed as they come: no string is built per read.
            let mut h = seahash::SeaHasher::new();
            h.write_u64(v.files_version);
            for name in f {
                h.write(name.as_bytes());
                h.write_u8(0);
            }
            h.finish()
        }
    };
    let scan_cache = &server.env.scan_cache;
    // A read of some families can use the row cached whole: the cell
    // reader skips the other families (a walk lists a row, then its
    // family, and would otherwise cache and read the row twice).
    let ids = [cache_id, v.files_version];
    let ids = if families.is_some() {
        &ids[..]
    } else {
        &ids[..1]
    };
    if let Some(hit) = scan_cache.get_first(ids, row) {
        sources.push(Box::new(hit.iter()));
        return Ok(sources);
    }
    let row_enc = key::row_prefix(row);
    let iters: Vec<Box<dyn InternalIterator>> = select_files(&v.files, families, schema)
        .into_iter()
        .filter(|f| f.table.may_contain_row_enc(&row_enc))
        .map(|f| Box::new(f.table.iter()) as Box<dyn InternalIterator>)
        .collect();
    // Small rows are read once into the scan cache; a wide row is read
    // straight from its SSTables (copying it whole would cost more than
    // the cache saves).
    let mut merged = MergingIterator::new(iters);
    let end = key::row_end(row);
    merged.seek(&key::row_start(row))?;
    let mut packed = PackedRow::builder(row);
    while merged.valid() && merged.key() < end.as_slice() {
        if packed.packed_bytes() > SCAN_CACHE_ROW_BYTES {
            for f in select_files(&v.files, families, schema) {
                if f.table.may_contain_row(row) {
                    sources.push(Box::new(f.table.iter()));
                }
            }
            return Ok(sources);
        }
        packed.push(merged.key(), merged.value());
        merged.next()?;
    }
    let packed = packed.finish();
    sources.push(Box::new(packed.iter()));
    scan_cache.insert(cache_id, packed);
    Ok(sources)
}

/// Whether `filter` outputs any cell of `row` (a check-and-mutate predicate).
pub(super) fn row_matches(
    server: &TabletServer,
    s: &Served,
    row: &[u8],
    filter: &crate::filter::RowFilter,
) -> Result<bool> {
    let mut spec = ScanSpec::row(row);
    spec.filter = Some(filter.clone());
    spec.cell_limit = Some(1);
    Ok(row_reader(server, s, row, &spec)?.next_cell()?.is_some())
}

/// One row of a served tablet as `spec` selects it (its row range is
/// the row), read from a snapshot taken now.
fn row_reader(
    server: &TabletServer,
    s: &Served,
    row: &[u8],
    spec: &ScanSpec,
) -> Result<CellReader> {
    let snapshot = server.core.visible_seq();
    let v = s.tablet.version();
    let schema = s.table.schema();
    let sources = row_sources(server, &v, &schema, row, spec.families.as_deref())?;
    CellReader::new(
        Box::new(MergingIterator::new(sources)),
        spec,
        schema,
        snapshot,
        now_micros(),
    )
}

/// One column's versions: a point lookup in each source (see
/// [`crate::point`]), or the general reader for a column with many versions.
fn column_of(server: &TabletServer, s: &Served, column: ColumnRead<'_>) -> Result<Vec<Version>> {
    let ColumnRead {
        row,
        family,
        qualifier,
        max_versions,
    } = column;
    let snapshot = server.core.visible_seq();
    let v = s.tablet.current();
    let schema = s.table.schema_now();
    let Some(fam) = schema.family(family) else {
        return Ok(Vec::new()); // as the reader skips families not in the schema
    };
    let mut lookup = ColumnLookup::new(row, family, qualifier, snapshot);
    // The column itself, or a family or row tombstone covering it.
    let files = select_files(&v.files, Some(&[family]), &schema);
    let holds = |f: &Sst, lookup: &ColumnLookup| {
        f.table.overlaps(lookup.row_enc(), lookup.end())
            && f.table
                .may_contain_any_column(lookup.row_enc(), &lookup.bloom_columns())
    };
    // An aggregate cell folds its operands: the reader does that.
    let mut complete =
        fam.aggregate.is_none() && (v.mem.is_empty() || lookup.gather(&mut v.mem.iter())?);
    for m in v.imm.iter().rev() {
        complete = complete && lookup.gather(&mut m.iter())?;
    }
    // Each file is tested and read in one pass (the files are walked
    // again only in the rare case below).
    for f in &files {
        if !complete {
            break;
        }
        if holds(f, &lookup) {
            complete = lookup.gather(&mut f.table.iter_below(lookup.end()))?;
        }
    }
    // The clock only matters to an age rule (a system call saved per read).
    let now = if fam.gc.uses_age() { now_micros() } else { 0 };
    if complete {
        return lookup.resolve(Some(&fam.gc), TimeRange::ALL, max_versions, now);
    }
    // Many versions: the reader seeks straight to the column in each
    // source and stops once it has the versions wanted.
    let mut sources = memtable_sources(&v);
    for f in files {
        if holds(f, &lookup) {
            sources.push(Box::new(f.table.iter()));
        }
    }
    let reader = CellReader::column(
        merged(sources),
        Guard::into_inner(schema),
        row,
        family,
        qualifier,
        TimeRange::ALL,
        max_versions,
        snapshot,
        now,
    )?;
    reader
        .map(|c| {
            c.map(|c| Version {
                timestamp: c.timestamp,
                value: c.value,
            })
        })
        .collect()
}

/// The newest visible version of one cell of a served tablet.
pub(super) fn cell_of(
    server: &TabletServer,
    s: &Served,
    row: &[u8],
    family: &str,
    qualifier: &[u8],
) -> Result<Option<Version>> {
    let column = ColumnRead {
        row,
        family,
        qualifier,
        max_versions: Some(1),
    };
    Ok(column_of(server, s, column)?.pop())
}

impl TabletReads for TabletServer {
    /// The visible cells of one row selected by `spec` (its row range is ignored).
    fn read_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let s = read_target(self, tablet, row)?;
        let mut spec = spec.clone();
        spec.rows = RowRange {
            start: Bound::Included(row.to_vec()),
            end: Bound::Included(row.to_vec()),
        };
        let cells = row_reader(self, &s, row, &spec)?.collect::<Result<Vec<Cell>>>()?;
        count_bytes(&s, cells.iter().map(|c| &c.value));
        Ok(cells)
    }

    /// The row's cells; if it has none, the next row of the tablet with a
    /// cell `spec` selects (read from the row on, one cell), else the
    /// tablet's end. A write between the two reads is the caller's to
    /// notice (the mount's row memo drops what a write overtook).
    fn peek_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        let cells = self.read_row(tablet, row, spec)?;
        if !cells.is_empty() {
            return Ok(RowPeek::Cells(cells));
        }
        let next = ScanSpec {
            rows: RowRange {
                start: Bound::Excluded(row.to_vec()),
                end: Bound::Unbounded,
            },
            families: spec.families.clone(),
            column_regex: spec.column_regex.clone(),
            time_range: spec.time_range,
            max_versions: Some(1),
            cell_limit: Some(1),
            filter: spec.filter.clone(),
            ..Default::default()
        };
        // The same request: counted once (as the read above), not again as
        // a scan, so that load balancing sees one request.
        let s = self.served(tablet)?;
        let (mut part, end) = scan_part_of(self, &s, &next)?;
        let until = match part.next_cell()? {
            Some(c) => Some(c.row),
            None => end,
        };
        Ok(RowPeek::Absent { until })
    }

    /// The newest `max_versions` visible versions of one column (all if None).
    fn read_column(&self, tablet: u64, column: ColumnRead<'_>) -> Result<Vec<Version>> {
        check_row(column.row)?;
        self.with_served(tablet, |s| {
            if !s.tablet.contains(column.row) {
                return Err(self.not_serving(tablet));
            }
            count_read(self, s, column.row);
            let cells = column_of(self, s, column)?;
            count_bytes(s, cells.iter().map(|v| &v.value));
            Ok(cells)
        })
    }

    /// Tablet `tablet`'s part of a scan: `spec`'s rows clipped to the tablet,
    /// read from a snapshot taken now. Returns the reader and the tablet's
    /// end row (where the scan goes on), or None for the table's last tablet.
    fn scan_part(&self, tablet: u64, spec: &ScanSpec) -> Result<ScanPart> {
        let s = self.served(tablet)?;
        self.counters.scans.incr();
        s.requests.incr();
        s.load
            .touch(crate::keyviz::scan_row(&spec.rows.start, &s.tablet.start));
        crate::keyviz::record_scan(&s.table.name, &spec.rows.start, &s.tablet.start);
        scan_part_of(self, &s, spec)
    }
}

/// Served tablet `s`'s part of a scan (see [`TabletReads::scan_part`]),
/// not counted: the caller counts the request.
fn scan_part_of(server: &TabletServer, s: &Served, spec: &ScanSpec) -> Result<ScanPart> {
    let t = &s.tablet;
    // A read of the change log: up to the watermark, taken before the
    // snapshot so that everything up to it is in the snapshot.
    let change_read = matches!(spec.families.as_deref(), Some([f]) if f == CHANGES_FAMILY);
    let watermark = change_read.then(|| server.inflight.watermark(now_micros));
    let v = t.version();
    let schema = s.table.schema();
    let mut part = spec.clipped(&t.start, t.end.as_deref());
    if let Some(w) = watermark {
        part.time_range.end = part.time_range.end.min(w.saturating_add(1));
    }
    let files = select_files(&v.files, spec.families.as_deref(), &schema)
        .into_iter()
        // Changes since T skip the files whose newest record is older:
        // the change log's index by time.
        .filter(|f| !(change_read && f.newest_cell().is_some_and(|n| n < part.time_range.start)))
        .cloned();
    // Every memtable, even an empty one: the snapshot is taken after the
    // version (see `memtable_sources`). An empty one is left out of the
    // merge's heap when the scan positions it.
    let mut sources: Vec<Box<dyn InternalIterator>> = vec![Box::new(v.mem.iter())];
    for m in v.imm.iter().rev() {
        sources.push(Box::new(m.iter()));
    }
    // The disjoint files of a sequential load are read one after another.
    sources.extend(concat::sources(files));
    let reader = CellReader::new(
        Box::new(MergingIterator::new(sources)),
        &part,
        schema,
        server.core.visible_seq(),
        now_micros(),
    )?;
    match watermark {
        Some(w) => {
            let row = match &part.rows.start {
                Bound::Included(r) | Bound::Excluded(r) => r.clone(),
                Bound::Unbounded => Vec::new(),
            };
            let marker = Cell {
                row,
                family: CHANGES_FAMILY.to_string(),
                qualifier: WATERMARK_QUALIFIER.to_vec(),
                timestamp: w,
                value: Default::default(),
            };
            Ok((Box::new(Marked(Some(marker), reader, None)), t.end.clone()))
        }
        None => Ok((Box::new(reader), t.end.clone())),
    }
}

/// A change-log scan part: the watermark marker, then the records (the
/// third field: the marker while a view step stops at it).
struct Marked(Option<Cell>, CellReader, Option<Cell>);

impl CellSource for Marked {
    fn next_cell(&mut self) -> Result<Option<Cell>> {
        match self.0.take() {
            Some(c) => Ok(Some(c)),
            None => self.1.next_cell(),
        }
    }
    fn advance_view(&mut self) -> Result<bool> {
        self.2 = self.0.take();
        if self.2.is_some() {
            return Ok(true);
        }
        self.1.advance_view()
    }
    fn current(&self) -> Option<CellView<'_>> {
        match &self.2 {
            Some(c) => Some(c.view()),
            None => self.1.current(),
        }
    }
}

/// A scan part's cells, as the protocol hands them out.
impl CellSource for CellReader {
    fn next_cell(&mut self) -> Result<Option<Cell>> {
        CellReader::next_cell(self)
    }
    fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        CellReader::next_row_key(self)
    }
    fn advance_view(&mut self) -> Result<bool> {
        CellReader::advance_view(self)
    }
    fn current(&self) -> Option<CellView<'_>> {
        CellReader::current(self)
    }
}
