//! Writing compaction output: a sorted stream of entries becomes SSTables,
//! one set per locality group, cut at a target size on row boundaries.
//!
//! Minor compactions (memtable → SSTables) and major compactions route each
//! entry to the group its family belongs to in the current schema; row
//! tombstones go to every group so that each group's files carry the deletes
//! that cover them. Merging compactions keep their inputs' group.

use crate::key;
use crate::metadata::SstMeta;
use crate::own_lines;
use crate::schema::{LocalityGroup, TableSchema};
use crate::sstable::BlockCache;
use crate::sstable::{Table, TableBuilder, TableOptions};
use crate::tablet::Sst;
use crate::{Error, Result};
use gfs::FileStore;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Name of an SSTable file in the store.
pub fn sst_name(number: u64) -> String {
    format!("sst/{number:016}.sst")
}

/// The SSTable number a file name stands for.
pub fn sst_number(name: &str) -> Option<u64> {
    name.strip_prefix("sst/")?
        .strip_suffix(".sst")?
        .parse()
        .ok()
}

/// Where compaction output goes and how to open it.
pub struct OutputCtx<'a> {
    pub store: &'a Arc<dyn FileStore>,
    pub cache: &'a Arc<BlockCache>,
    pub target_bytes: u64,
    /// Allocates a fresh file number.
    pub new_number: &'a dyn Fn() -> Result<u64>,
}

/// Which group(s) an entry goes to.
pub struct Router {
    groups: Vec<LocalityGroup>,
    by_family: HashMap<Vec<u8>, usize>,
    /// Send everything to this group (merging compactions).
    fixed: Option<usize>,
}

impl Router {
    /// Routes by the schema's locality groups.
    pub fn by_schema(schema: &TableSchema) -> Router {
        let groups = schema.locality_groups();
        let mut by_family = HashMap::new();
        for (i, g) in groups.iter().enumerate() {
            for f in &g.families {
                by_family.insert(key::row_prefix(f.as_bytes()), i);
            }
        }
        Router {
            groups,
            by_family,
            fixed: None,
        }
    }

    /// Sends every entry to one group (keeping its settings from the schema,
    /// or defaults if the group is gone).
    pub fn fixed(schema: &TableSchema, group: &str) -> Router {
        let groups = schema.locality_groups();
        let g = groups
            .into_iter()
            .find(|g| g.name == group)
            .unwrap_or_else(|| LocalityGroup::named(group));
        Router {
            groups: vec![g],
            by_family: HashMap::new(),
            fixed: Some(0),
        }
    }

    fn route(&self, family_enc: &[u8], out: &mut Vec<usize>) {
        out.clear();
        if let Some(i) = self.fixed {
            out.push(i);
        } else if family_enc == key::row_prefix(b"").as_slice() {
            out.extend(0..self.groups.len());
        } else if let Some(&i) = self.by_family.get(family_enc) {
            out.push(i);
        }
        // A family no longer in the schema has nowhere to go: dropped.
    }
}

struct Output {
    builder: TableBuilder,
    number: u64,
    families: BTreeSet<Vec<u8>>,
    row_tombstones: bool,
    last_row: Vec<u8>,
}

/// Writes `next()`'s entries into new SSTables; returns them opened.
pub fn write_outputs(
    ctx: &OutputCtx<'_>,
    router: &Router,
    mut next: impl FnMut() -> Result<Option<(Vec<u8>, Vec<u8>)>>,
) -> Result<Vec<Arc<Sst>>> {
    let mut open: Vec<Option<Output>> = router.groups.iter().map(|_| None).collect();
    let mut done = Vec::new();
    let mut targets = Vec::new();
    while let Some((k, v)) = next()? {
        let parts = key::split(&k)
            .ok_or_else(|| Error::corruption("compaction input holds a malformed key"))?;
        router.route(parts.family_enc, &mut targets);
        for &g in &targets {
            let slot = &mut open[g];
            // Cut files only between rows so a row's entries stay together.
            if let Some(o) = slot {
                if o.builder.estimated_size() >= ctx.target_bytes && o.last_row != parts.row_enc {
                    if let Some(o) = slot.take() {
                        done.push(finish(ctx, &router.groups[g], o)?);
                    }
                }
            }
            let o = match slot {
                Some(o) => o,
                None => {
                    let number = (ctx.new_number)()?;
                    let file = ctx.store.create(&sst_name(number))?;
                    slot.insert(Output {
                        builder: TableBuilder::new(file, table_options(&router.groups[g])),
                        number,
                        families: BTreeSet::new(),
                        row_tombstones: false,
                        last_row: Vec::new(),
                    })
                }
            };
            o.builder.add(&k, &v)?;
            if parts.kind == key::Kind::DeleteRow {
                o.row_tombstones = true;
            } else if !o.families.contains(parts.family_enc) {
                o.families.insert(parts.family_enc.to_vec());
            }
            if o.last_row != parts.row_enc {
                o.last_row = parts.row_enc.to_vec();
            }
        }
    }
    for (g, slot) in open.into_iter().enumerate() {
        if let Some(o) = slot {
            done.push(finish(ctx, &router.groups[g], o)?);
        }
    }
    Ok(done)
}

pub fn table_options(g: &LocalityGroup) -> TableOptions {
    TableOptions {
        block_size: g.block_size,
        compression: g.compression,
        bloom: g.bloom,
        ..TableOptions::default()
    }
}

fn finish(ctx: &OutputCtx<'_>, group: &LocalityGroup, o: Output) -> Result<Arc<Sst>> {
    let info = o.builder.finish()?;
    let families = o
        .families
        .iter()
        .filter_map(|f| key::decode_row(f))
        .map(|f| String::from_utf8_lossy(&f).into_owned())
        .collect();
    let meta = SstMeta {
        number: o.number,
        group: group.name.clone(),
        size: info.file_size,
        entries: info.entries,
        smallest: info.smallest,
        largest: info.largest,
        max_seq: info.max_seq,
        families,
        row_tombstones: o.row_tombstones,
        timestamps: info.timestamps,
    };
    open_sst(ctx.store, ctx.cache, meta, group.in_memory)
}

/// Opens an SSTable a tablet lists.
pub fn open_sst(
    store: &Arc<dyn FileStore>,
    cache: &Arc<BlockCache>,
    mut meta: SstMeta,
    in_memory: bool,
) -> Result<Arc<Sst>> {
    let file = store.open(&sst_name(meta.number))?;
    // Read by every point read that reaches the tablet, on every core.
    meta.group = own_lines::string(&meta.group);
    for f in &mut meta.families {
        *f = own_lines::string(f);
    }
    let table = if in_memory {
        Table::open_in_memory(file, meta.number)?
    } else {
        Table::open(file, meta.number, Some(cache.clone()))?
    };
    Ok(Arc::new(Sst { meta, table }))
}

/// The most files of `files` whose key ranges hold one same key: what a
/// point read may have to consult. Files of a sequential load are disjoint
/// (1 however many there are); files flushed from random writes all overlap.
pub fn stacked(files: &[&SstMeta]) -> usize {
    // Ranges are inclusive: at one key, starts count before ends.
    let mut edges: Vec<(&[u8], bool)> = files
        .iter()
        .flat_map(|m| [(m.smallest.as_slice(), false), (m.largest.as_slice(), true)])
        .collect();
    edges.sort_unstable();
    let (mut open, mut most) = (0usize, 0usize);
    for (_, end) in edges {
        if end {
            open -= 1;
        } else {
            open += 1;
            most = most.max(open);
        }
    }
    most
}

/// Whether a locality group's files call for a merging compaction: more
/// than `trigger` of them stacked on one key, or so many files that even
/// disjoint ones cost more open tables and index memory than a rewrite,
/// where a rewrite into files of `target_bytes` leaves at most half as
/// many. Files already about that size stay as they are: a tablet that
/// cannot split (one huge row, or options whose split size passes
/// `4 × trigger` files) rewrote all of them, again and again.
pub fn needs_merge(files: &[&SstMeta], trigger: usize, target_bytes: u64) -> bool {
    stacked(files) > trigger
        || (files.len() > trigger.saturating_mul(4) && merge_halves(files, target_bytes))
}

/// Whether rewriting `files` into files of `target_bytes` would leave at
/// most half as many.
fn merge_halves(files: &[&SstMeta], target_bytes: u64) -> bool {
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let after = bytes.div_ceil(target_bytes.max(1)).max(1);
    files.len() as u64 >= 2 * after
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(smallest: &[u8], largest: &[u8]) -> SstMeta {
        SstMeta {
            smallest: smallest.to_vec(),
            largest: largest.to_vec(),
            ..SstMeta::default()
        }
    }

    #[test]
    fn stacked_counts_the_files_holding_one_key() {
        let disjoint = [meta(b"a", b"b"), meta(b"c", b"d"), meta(b"e", b"f")];
        let refs: Vec<&SstMeta> = disjoint.iter().collect();
        assert_eq!(stacked(&refs), 1);
        assert_eq!(stacked(&[]), 0);
        // Touching at one key counts as overlapping.
        let touching = [meta(b"a", b"c"), meta(b"c", b"d")];
        assert_eq!(stacked(&touching.iter().collect::<Vec<_>>()), 2);
        let nested = [
            meta(b"a", b"z"),
            meta(b"b", b"c"),
            meta(b"d", b"k"),
            meta(b"e", b"f"),
            meta(b"x", b"y"),
        ];
        assert_eq!(stacked(&nested.iter().collect::<Vec<_>>()), 3);
    }

    #[test]
    fn merge_needs_stacked_files_or_very_many() {
        let seq: Vec<SstMeta> = (0u8..10)
            .map(|i| meta(&[b'a', i, 0], &[b'a', i, 9]))
            .collect();
        let seq_refs: Vec<&SstMeta> = seq.iter().collect();
        // Each file 0 bytes: a rewrite leaves one.
        assert!(
            !needs_merge(&seq_refs, 3, 100),
            "10 disjoint files, trigger 3"
        );
        assert!(needs_merge(&seq_refs, 2, 100), "10 files > 4 x trigger 2");
        let random: Vec<SstMeta> = (0..4).map(|_| meta(b"a", b"z")).collect();
        assert!(needs_merge(&random.iter().collect::<Vec<_>>(), 3, 100));
        assert!(!needs_merge(
            &random[..3].iter().collect::<Vec<_>>(),
            3,
            100
        ));
    }

    #[test]
    fn many_disjoint_files_of_the_target_size_are_left_alone() {
        let sized = |size: u64| -> Vec<SstMeta> {
            (0u8..10)
                .map(|i| SstMeta {
                    size,
                    ..meta(&[b'a', i, 0], &[b'a', i, 9])
                })
                .collect()
        };
        // Full files: a rewrite leaves ten again (and was done forever).
        let full = sized(100);
        assert!(!needs_merge(&full.iter().collect::<Vec<_>>(), 2, 100));
        let most = sized(60);
        assert!(!needs_merge(&most.iter().collect::<Vec<_>>(), 2, 100));
        // Small ones: five of them fit in one.
        let small = sized(20);
        assert!(needs_merge(&small.iter().collect::<Vec<_>>(), 2, 100));
        // Stacked files are merged whatever their size.
        let stacked: Vec<SstMeta> = (0..4)
            .map(|_| SstMeta {
                size: 100,
                ..meta(b"a", b"z")
            })
            .collect();
        assert!(needs_merge(&stacked.iter().collect::<Vec<_>>(), 3, 100));
    }

    #[test]
    fn names_roundtrip() {
        assert_eq!(sst_number(&sst_name(42)), Some(42));
        assert_eq!(sst_number("sst/x.sst"), None);
        assert_eq!(sst_number("log/000001.log"), None);
    }
}
