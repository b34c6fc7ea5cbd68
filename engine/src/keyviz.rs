//! The key visualizer's counters: reads, writes and bytes per key range of
//! each table, per time column (a minute by default), over the last hours,
//! as Cloud Bigtable's Key Visualizer draws them. The tablet servers record
//! every row they read or write; the console (`-o http=`) draws the heatmap.
//!
//! Memory is bounded: at most [`Config::columns`] columns are kept, each with
//! at most [`Config::ranges`] ranges over all its tables (and
//! [`Config::ranges_per_table`] per table). A column that is full makes room
//! for a new row key by merging the two adjacent ranges of the table with
//! the fewest accesses between them, so hot keys keep ranges of their own
//! and cold stretches of the key space fold into wide ones.
//!
//! Recording is off (a relaxed load, nothing more) until [`enable`] is
//! called: only a daemon that serves the console pays for it.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Row keys are kept (and shown) up to this many bytes.
pub const KEY_PREFIX: usize = 32;

/// How much the visualizer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Seconds per time column.
    pub column_secs: u64,
    /// Columns kept (the newest ones).
    pub columns: usize,
    /// Ranges per column, over all tables.
    pub ranges: usize,
    /// Ranges per table in one column.
    pub ranges_per_table: usize,
}

impl Default for Config {
    /// Three hours of minutes, at most 1024 ranges a minute.
    fn default() -> Config {
        Config {
            column_secs: 60,
            columns: 180,
            ranges: 1024,
            ranges_per_table: 64,
        }
    }
}

/// Accesses to one key range in one column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Rows read (a scan counts once, at its first row).
    pub reads: u64,
    /// Rows written.
    pub writes: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.bytes += o.bytes;
    }
    fn weight(&self) -> u64 {
        self.reads + self.writes
    }
}

/// One time column: each table's ranges, by first row key.
#[derive(Debug, Default)]
struct Column {
    start: u64,
    tables: BTreeMap<String, BTreeMap<Vec<u8>, Counts>>,
    ranges: usize,
}

impl Column {
    fn record(&mut self, cfg: &Config, table: &str, row: &[u8], c: Counts) {
        let key = &row[..row.len().min(KEY_PREFIX)];
        if let Some(r) = self.tables.get_mut(table).and_then(|t| t.get_mut(key)) {
            r.add(c);
            return;
        }
        let full = self.ranges >= cfg.ranges;
        let Some(t) = self.tables.get_mut(table) else {
            if full {
                // No room for another table this minute: the busiest
                // table gives up a range.
                let Some(busiest) = self
                    .tables
                    .iter()
                    .max_by_key(|(_, t)| t.len())
                    .map(|(n, _)| n.clone())
                else {
                    return;
                };
                if let Some(t) = self.tables.get_mut(&busiest) {
                    if t.len() > 1 {
                        merge_coldest(t);
                        self.ranges -= 1;
                    } else {
                        return;
                    }
                }
            }
            self.tables
                .insert(table.to_string(), BTreeMap::from([(key.to_vec(), c)]));
            self.ranges += 1;
            return;
        };
        if full || t.len() >= cfg.ranges_per_table {
            if t.len() > 1 {
                merge_coldest(t);
                self.ranges -= 1;
            } else {
                // One range left: it takes the key (it starts at or before it
                // once it is the only one of the table).
                if let Some(r) = t.values_mut().next() {
                    r.add(c);
                }
                return;
            }
        }
        t.insert(key.to_vec(), c);
        self.ranges += 1;
    }
}

/// Merges the two adjacent ranges with the fewest accesses between them.
fn merge_coldest(t: &mut BTreeMap<Vec<u8>, Counts>) {
    let mut best: Option<(u64, &Vec<u8>)> = None;
    let mut prev: Option<(&Vec<u8>, &Counts)> = None;
    for (k, c) in t.iter() {
        if let Some((_, p)) = prev {
            let w = p.weight() + c.weight();
            if best.is_none_or(|(bw, _)| w < bw) {
                best = Some((w, k));
            }
        }
        prev = Some((k, c));
    }
    let Some((_, second)) = best else { return };
    let second = second.clone();
    if let Some(c) = t.remove(&second) {
        if let Some((_, first)) = t.range_mut(..second).next_back() {
            first.add(c);
        }
    }
}

/// The bucketed counters of the last hours.
pub struct KeyViz {
    cfg: Config,
    columns: Mutex<VecDeque<Column>>,
}

/// Which way a row was touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A read of the row (or a scan starting at it).
    Read,
    /// A write of so many bytes.
    Write(u64),
}

impl KeyViz {
    /// An empty visualizer keeping what `cfg` says.
    pub fn new(cfg: Config) -> KeyViz {
        KeyViz {
            cfg,
            columns: Mutex::new(VecDeque::new()),
        }
    }

    /// What it keeps.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Records one access to `row` of `table` at `now` (Unix seconds).
    pub fn record_at(&self, now: u64, table: &str, row: &[u8], a: Access) {
        let c = match a {
            Access::Read => Counts {
                reads: 1,
                ..Counts::default()
            },
            Access::Write(bytes) => Counts {
                writes: 1,
                bytes,
                ..Counts::default()
            },
        };
        let secs = self.cfg.column_secs.max(1);
        let start = now - now % secs;
        let mut cols = self.columns.lock();
        if cols.back().is_none_or(|c| c.start < start) {
            cols.push_back(Column {
                start,
                ..Column::default()
            });
            while cols.len() > self.cfg.columns {
                cols.pop_front();
            }
        }
        // A clock stepping back records into the newest column.
        if let Some(col) = cols.back_mut() {
            col.record(&self.cfg, table, row, c);
        }
    }

    /// Ranges held over all columns (what bounds the memory).
    pub fn ranges_held(&self) -> usize {
        self.columns.lock().iter().map(|c| c.ranges).sum()
    }

    /// The heatmap: for each table, up to `rows` key ranges down and the
    /// kept columns across.
    pub fn heatmap(&self, rows: usize) -> Heatmap {
        let cols = self.columns.lock();
        let columns: Vec<u64> = cols.iter().map(|c| c.start).collect();
        let mut names: Vec<&String> = cols.iter().flat_map(|c| c.tables.keys()).collect();
        names.sort();
        names.dedup();
        let tables = names
            .into_iter()
            .map(|name| {
                // Row boundaries: the ranges' first keys over every column,
                // thinned evenly to at most `rows`.
                let mut starts: Vec<&Vec<u8>> = cols
                    .iter()
                    .filter_map(|c| c.tables.get(name))
                    .flat_map(|t| t.keys())
                    .collect();
                starts.sort();
                starts.dedup();
                let n = starts.len();
                let keep = rows.max(1).min(n);
                let bounds: Vec<Vec<u8>> =
                    (0..keep).map(|i| starts[i * n / keep].clone()).collect();
                let mut cells = vec![vec![Counts::default(); cols.len()]; bounds.len()];
                for (ci, c) in cols.iter().enumerate() {
                    for (k, v) in c.tables.get(name).into_iter().flatten() {
                        let ri = bounds.partition_point(|b| b <= k).saturating_sub(1);
                        cells[ri][ci].add(*v);
                    }
                }
                TableMap {
                    table: name.clone(),
                    starts: bounds,
                    cells,
                }
            })
            .collect();
        Heatmap {
            column_secs: self.cfg.column_secs,
            columns,
            tables,
        }
    }
}

/// What the console draws.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heatmap {
    /// Seconds per column.
    pub column_secs: u64,
    /// Each column's start, Unix seconds, oldest first.
    pub columns: Vec<u64>,
    /// The tables, by name.
    pub tables: Vec<TableMap>,
}

/// One table's part of the heatmap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableMap {
    /// The table's name.
    pub table: String,
    /// Each row's first key (a row runs to the next one's, the last to the
    /// end of the table).
    pub starts: Vec<Vec<u8>>,
    /// `cells[row][column]`.
    pub cells: Vec<Vec<Counts>>,
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The daemon's visualizer.
pub fn global() -> &'static KeyViz {
    static G: OnceLock<KeyViz> = OnceLock::new();
    G.get_or_init(|| KeyViz::new(Config::default()))
}

/// Starts recording (the console is served).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Records an access to a row, if the visualizer is on. The METADATA
/// table's own reads and writes are left out.
pub fn record(table: &str, row: &[u8], a: Access) {
    if !ENABLED.load(Ordering::Relaxed) || table == crate::metadata::METADATA_NAME {
        return;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    global().record_at(now, table, row, a);
}

/// Records a scan as a read of the row it starts at (or of the tablet's
/// first row).
pub fn record_scan(table: &str, start: &std::ops::Bound<Vec<u8>>, tablet_start: &[u8]) {
    record(table, scan_row(start, tablet_start), Access::Read);
}

/// The row a scan part counts at: where it starts in its tablet.
pub fn scan_row<'a>(start: &'a std::ops::Bound<Vec<u8>>, tablet_start: &'a [u8]) -> &'a [u8] {
    use std::ops::Bound::{Excluded, Included};
    match start {
        Included(k) | Excluded(k) if k.as_slice() > tablet_start => k.as_slice(),
        _ => tablet_start,
    }
}

/// Records writes of rows, with their sizes in bytes.
pub fn record_writes<'a>(
    table: &str,
    rows: impl Iterator<Item = &'a Vec<u8>>,
    bytes: impl Iterator<Item = u64>,
) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    for (row, b) in rows.zip(bytes) {
        record(table, row, Access::Write(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        Config {
            column_secs: 10,
            columns: 6,
            ranges: 40,
            ranges_per_table: 8,
        }
    }

    #[test]
    fn a_hot_key_keeps_a_range_of_its_own() {
        let kv = KeyViz::new(small());
        for i in 0..1000u32 {
            kv.record_at(5, "t", format!("k{:04}", i % 200).as_bytes(), Access::Read);
            kv.record_at(5, "t", b"k0150", Access::Write(10));
        }
        let h = kv.heatmap(100);
        let t = &h.tables[0];
        assert!(t.starts.len() <= 8, "{:?}", t.starts);
        let hot = t.starts.iter().position(|s| s == b"k0150").unwrap();
        assert_eq!(t.cells[hot][0].writes, 1000);
        assert_eq!(t.cells[hot][0].bytes, 10_000);
        let total: u64 = t.cells.iter().map(|r| r[0].reads).sum();
        assert_eq!(total, 1000, "merging loses no access");
    }

    #[test]
    fn columns_follow_the_clock_and_old_ones_go() {
        let kv = KeyViz::new(small());
        for t in 0..20u64 {
            kv.record_at(t * 10, "t", b"a", Access::Read);
        }
        let h = kv.heatmap(10);
        assert_eq!(h.columns, vec![140, 150, 160, 170, 180, 190]);
        assert_eq!(
            h.tables[0].cells[0],
            vec![
                Counts {
                    reads: 1,
                    ..Counts::default()
                };
                6
            ]
        );
    }

    #[test]
    fn memory_stays_bounded_with_many_tables_and_tablets() {
        let cfg = small();
        let kv = KeyViz::new(cfg);
        let mut rng = 1u64;
        // A long run: 10,000 tables, random keys, 300 columns' worth of time.
        for step in 0..200_000u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let table = format!("table{}", (rng >> 20) % 10_000);
            let row = format!("row{:016x}", rng >> 7);
            kv.record_at(step / 700 * 10, &table, row.as_bytes(), Access::Write(100));
            assert!(kv.ranges_held() <= cfg.columns * cfg.ranges);
        }
        let h = kv.heatmap(16);
        assert_eq!(h.columns.len(), cfg.columns);
        let cells: usize = h.tables.iter().map(|t| t.cells.len()).sum();
        assert!(cells <= cfg.columns * cfg.ranges, "{cells}");
        // Each column holds at most `ranges` ranges, each table at most
        // `ranges_per_table`.
        for c in kv.columns.lock().iter() {
            assert!(c.ranges <= cfg.ranges);
            assert_eq!(c.ranges, c.tables.values().map(|t| t.len()).sum::<usize>());
            assert!(c.tables.values().all(|t| t.len() <= cfg.ranges_per_table));
        }
    }
}
