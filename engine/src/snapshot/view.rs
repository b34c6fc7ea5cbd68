//! Reading a snapshot: the table as it was at the cut, read-only, through
//! the same scanner and cell reader as the live table. Each tablet's files
//! are opened the first time a read reaches it; a file shared by split
//! tablets is read only inside each one's range. GC age limits are measured
//! from the cut, so the view does not age.

use super::Manifest;
use crate::client::{Parts, Scanner};
use crate::compaction::open_sst;
use crate::concat;
use crate::data::{Cell, RowRange};
use crate::env::Env;
use crate::key::MAX_SEQ;
use crate::merge::MergingIterator;
use crate::protocol::ScanPart;
use crate::read::CellReader;
use crate::scan::ScanSpec;
use crate::schema::TableSchema;
use crate::tablet::{select_files, Sst};
use crate::Result;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an opened view is used again before its manifest is read
/// anew (a snapshot deleted through another daemon is seen after this).
const VIEW_TTL: Duration = Duration::from_secs(2);

/// Views opened lately, by table and snapshot name: the mount reads a
/// snapshot one cell at a time, and opening one reads its manifest and
/// then each tablet's SSTable indexes.
#[derive(Default)]
pub struct Views {
    open: Mutex<HashMap<(String, String), (Instant, SnapshotView)>>,
}

impl Views {
    /// The view of `table`/`name`, opened by `open` unless one is fresh.
    pub(crate) fn get(
        &self,
        table: &str,
        name: &str,
        open: impl FnOnce() -> Result<SnapshotView>,
    ) -> Result<SnapshotView> {
        let key = (table.to_string(), name.to_string());
        if let Some((at, v)) = self.open.lock().get(&key) {
            if at.elapsed() < VIEW_TTL {
                return Ok(v.clone());
            }
        }
        let v = open()?;
        let mut views = self.open.lock();
        views.retain(|_, (at, _)| at.elapsed() < VIEW_TTL);
        views.insert(key, (Instant::now(), v.clone()));
        Ok(v)
    }

    /// Forgets `table`/`name` (deleted or restored over).
    pub(crate) fn forget(&self, table: &str, name: &str) {
        self.open
            .lock()
            .remove(&(table.to_string(), name.to_string()));
    }
}

/// A snapshot opened for reading (cheap to clone).
#[derive(Clone)]
pub struct SnapshotView {
    inner: Arc<Inner>,
}

/// A tablet's open files.
type Files = Arc<Vec<Arc<Sst>>>;

struct Inner {
    env: Arc<Env>,
    manifest: Manifest,
    schema: Arc<TableSchema>,
    /// Each tablet's files once opened, newest first.
    files: Vec<Mutex<Option<Files>>>,
}

impl SnapshotView {
    pub(crate) fn new(env: Arc<Env>, manifest: Manifest) -> SnapshotView {
        SnapshotView {
            inner: Arc::new(Inner {
                env,
                schema: Arc::new(manifest.schema.clone()),
                files: manifest.tablets.iter().map(|_| Mutex::new(None)).collect(),
                manifest,
            }),
        }
    }

    /// What the snapshot is.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The table's schema at the cut.
    pub fn schema(&self) -> Arc<TableSchema> {
        self.inner.schema.clone()
    }

    /// A scan of the snapshot, as [`crate::Bigtable::scan`] of the table then.
    pub fn scan(&self, spec: ScanSpec) -> Result<Scanner> {
        Ok(Scanner::over(Box::new(self.clone()), spec))
    }

    /// The cells of one row `spec` selects (its rows are ignored).
    pub fn read_row(&self, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let spec = ScanSpec {
            rows: RowRange {
                start: Bound::Included(row.to_vec()),
                end: Bound::Included(row.to_vec()),
            },
            ..spec.clone()
        };
        let mut scan = self.scan(spec)?;
        Ok(scan.next_row()?.map(|(_, cells)| cells).unwrap_or_default())
    }
}

impl Inner {
    /// The index of the tablet holding `row`.
    fn tablet_at(&self, row: &[u8]) -> usize {
        let tablets = &self.manifest.tablets;
        tablets
            .partition_point(|t| t.meta.start.as_slice() <= row)
            .saturating_sub(1)
    }

    fn files(&self, i: usize) -> Result<Files> {
        let mut slot = self.files[i].lock();
        if let Some(f) = &*slot {
            return Ok(f.clone());
        }
        let env = &self.env;
        let mut files = self.manifest.tablets[i]
            .meta
            .files
            .iter()
            .map(|m| open_sst(&env.store, &env.block_cache, m.clone(), false))
            .collect::<Result<Vec<_>>>()?;
        files.sort_by_key(|f| std::cmp::Reverse(f.meta.max_seq));
        let files = Arc::new(files);
        *slot = Some(files.clone());
        Ok(files)
    }
}

impl Parts for SnapshotView {
    fn part(&self, row: &[u8], spec: &ScanSpec) -> Result<ScanPart> {
        let s = &self.inner;
        let i = s.tablet_at(row);
        let t = &s.manifest.tablets[i].meta;
        let files = s.files(i)?;
        let sources = concat::sources(
            select_files(&files, spec.families.as_deref(), &s.schema)
                .into_iter()
                .cloned(),
        );
        let part = spec.clipped(&t.start, t.end.as_deref());
        let reader = CellReader::new(
            Box::new(MergingIterator::new(sources)),
            &part,
            s.schema.clone(),
            MAX_SEQ,
            s.manifest.taken_micros,
        )?;
        Ok((Box::new(reader), t.end.clone()))
    }
}
