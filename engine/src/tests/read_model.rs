//! Randomized check of [`CellReader`] and [`CompactionFilter`] against a
//! brute-force reference model of Bigtable's visibility rules, and of the
//! point lookup ([`ColumnLookup`]) against both.

use crate::compaction_filter::CompactionFilter;
use crate::data::{Cell, RowRange, TimeRange};
use crate::iterator::VecIterator;
use crate::key::{self, Kind, ParsedKey, SeqNo, TOMBSTONE_TS};
use crate::mutation::{decode_range, encode_range};
use crate::point::ColumnLookup;
use crate::read::{compile_column_regex, CellReader};
use crate::scan::ScanSpec;
use crate::schema::{FamilySchema, GcMode, GcRule, TableSchema};
use crate::Result;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

const ROWS: &[&[u8]] = &[b"", b"a", b"a\0", b"a\0b", b"ab", b"b", b"\xff"];
const FAMILIES: &[&str] = &["a", "b", "gone"];
const QUALIFIERS: &[&[u8]] = &[b"", b"q", b"q\0", b"r", b"\xff"];

fn random_entries(rng: &mut StdRng) -> Entries {
    let n = rng.gen_range(0..60);
    let mut seqs: Vec<SeqNo> = (1..=n as u64).collect();
    seqs.shuffle(rng);
    // Sometimes crowd few columns, so that versions, tombstones and GC interact.
    let rows = &ROWS[..rng.gen_range(1..=ROWS.len())];
    let quals = &QUALIFIERS[..rng.gen_range(1..=QUALIFIERS.len())];
    let mut out = Vec::new();
    for seq in seqs {
        let row = *rows.choose(rng).unwrap();
        let fam = *FAMILIES.choose(rng).unwrap();
        let q = *quals.choose(rng).unwrap();
        let r = rng.gen_range(0..100);
        let (k, v) = if r < 62 {
            let ts = rng.gen_range(0..6);
            let v = format!("v{seq}").into_bytes();
            (key::encode(row, fam.as_bytes(), q, ts, seq, Kind::Put), v)
        } else if r < 80 {
            let start = rng.gen_range(0..6);
            let end = if rng.gen_bool(0.2) {
                u64::MAX
            } else {
                rng.gen_range(start + 1..8)
            };
            (
                key::encode(
                    row,
                    fam.as_bytes(),
                    q,
                    TOMBSTONE_TS,
                    seq,
                    Kind::DeleteColumn,
                ),
                encode_range(start, end).to_vec(),
            )
        } else if r < 93 {
            (
                key::encode(
                    row,
                    fam.as_bytes(),
                    b"",
                    TOMBSTONE_TS,
                    seq,
                    Kind::DeleteFamily,
                ),
                Vec::new(),
            )
        } else {
            (
                key::encode(row, b"", b"", TOMBSTONE_TS, seq, Kind::DeleteRow),
                Vec::new(),
            )
        };
        out.push((k, v));
    }
    // The same entry can reach a reader from two sources (memtable and SSTable).
    for _ in 0..rng.gen_range(0..3) {
        if let Some(e) = out.choose(rng).cloned() {
            out.push(e);
        }
    }
    out.sort();
    out
}

fn random_gc(rng: &mut StdRng) -> GcRule {
    if rng.gen_bool(0.5) {
        return random_tree(rng, 2);
    }
    GcRule::flat(
        [None, Some(1), Some(2), Some(3)][rng.gen_range(0..4)],
        [None, Some(1), Some(3)][rng.gen_range(0..3)],
        if rng.gen_bool(0.5) {
            GcMode::Union
        } else {
            GcMode::Intersection
        },
    )
}

/// A nested rule (Cloud Bigtable's GcRule tree).
fn random_tree(rng: &mut StdRng, depth: usize) -> GcRule {
    let kids = |rng: &mut StdRng| -> Vec<GcRule> {
        (0..rng.gen_range(1..=3))
            .map(|_| random_tree(rng, depth - 1))
            .collect()
    };
    match rng.gen_range(0..if depth == 0 { 2 } else { 4 }) {
        0 => GcRule::MaxVersions(rng.gen_range(1..=3)),
        1 => GcRule::MaxAge([1, 3][rng.gen_range(0..2)]),
        2 => GcRule::Union(kids(rng)),
        _ => GcRule::Intersection(kids(rng)),
    }
}

fn random_schema(rng: &mut StdRng) -> Arc<TableSchema> {
    let mut fams = Vec::new();
    for name in ["a", "b"] {
        let mut f = FamilySchema::new(name);
        f.gc = random_gc(rng);
        fams.push(f);
    }
    Arc::new(TableSchema::with_families(fams))
}

fn random_bound(rng: &mut StdRng) -> Bound<Vec<u8>> {
    let r = ROWS.choose(rng).unwrap().to_vec();
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(r),
        _ => Bound::Excluded(r),
    }
}

fn random_spec(rng: &mut StdRng) -> ScanSpec {
    let mut s = ScanSpec::default();
    if rng.gen_bool(0.4) {
        s.rows = RowRange {
            start: random_bound(rng),
            end: random_bound(rng),
        };
    }
    if rng.gen_bool(0.3) {
        s.families = Some(match rng.gen_range(0..3) {
            0 => vec!["a".into()],
            1 => vec!["b".into(), "gone".into()],
            _ => vec![],
        });
    }
    if rng.gen_bool(0.3) {
        s.column_regex =
            Some(["a:q.*", "(a|b):", ".*:r", "b:.", r"a:q\x00"][rng.gen_range(0..5)].to_string());
    }
    if rng.gen_bool(0.3) {
        let start = rng.gen_range(0..6);
        s.time_range = TimeRange {
            start,
            end: rng.gen_range(start..8),
        };
    }
    if rng.gen_bool(0.3) {
        s.max_versions = Some(rng.gen_range(0..3));
    }
    if rng.gen_bool(0.2) {
        s.row_limit = Some(rng.gen_range(0..4));
    }
    if rng.gen_bool(0.2) {
        s.cell_limit = Some(rng.gen_range(0..6));
    }
    if rng.gen_bool(0.2) {
        // Values are a few bytes (`v<seq>`).
        s.byte_limit = Some(rng.gen_range(0..16));
    }
    s
}

/// The reference: brute force over each column, straight from the rules.
fn reference(
    input: &Entries,
    spec: &ScanSpec,
    schema: &TableSchema,
    snap: SeqNo,
    now: u64,
) -> Vec<Cell> {
    let parsed: Vec<(ParsedKey, Vec<u8>)> = input
        .iter()
        .map(|(k, v)| (key::decode(k).unwrap(), v.clone()))
        .filter(|(p, _)| p.seq <= snap)
        .collect();
    let row_tomb = |row: &[u8]| {
        parsed
            .iter()
            .filter(|(p, _)| p.kind == Kind::DeleteRow && p.row == row)
            .map(|(p, _)| p.seq)
            .max()
            .unwrap_or(0)
    };
    let fam_tomb = |row: &[u8], fam: &[u8]| {
        parsed
            .iter()
            .filter(|(p, _)| p.kind == Kind::DeleteFamily && p.row == row && p.family == fam)
            .map(|(p, _)| p.seq)
            .max()
            .unwrap_or(0)
    };
    let columns: BTreeSet<(Vec<u8>, Vec<u8>, Vec<u8>)> = parsed
        .iter()
        .filter(|(p, _)| p.kind == Kind::Put)
        .map(|(p, _)| (p.row.clone(), p.family.clone(), p.qualifier.clone()))
        .collect();
    let regex = spec
        .column_regex
        .as_deref()
        .map(|p| compile_column_regex(p).unwrap());
    let mut cells = Vec::new();
    for (row, fam, q) in columns {
        if !spec.rows.contains(&row) {
            continue;
        }
        let name = String::from_utf8(fam.clone()).unwrap();
        let Some(fs) = schema.family(&name) else {
            continue;
        };
        let tombs: Vec<(SeqNo, u64, u64)> = parsed
            .iter()
            .filter(|(p, _)| {
                p.kind == Kind::DeleteColumn && p.row == row && p.family == fam && p.qualifier == q
            })
            .map(|(p, v)| {
                let (s, e) = decode_range(v).unwrap();
                (p.seq, s, e)
            })
            .collect();
        let hide = row_tomb(&row).max(fam_tomb(&row, &fam));
        // Highest-sequence put per timestamp.
        let mut by_ts: BTreeMap<u64, (SeqNo, Vec<u8>)> = BTreeMap::new();
        for (p, v) in &parsed {
            if p.kind == Kind::Put && p.row == row && p.family == fam && p.qualifier == q {
                let e = by_ts.entry(p.timestamp).or_insert((p.seq, v.clone()));
                if p.seq > e.0 {
                    *e = (p.seq, v.clone());
                }
            }
        }
        let visible: Vec<(u64, Vec<u8>)> = by_ts
            .into_iter()
            .rev()
            .filter(|(ts, (seq, _))| {
                *seq >= hide
                    && !tombs
                        .iter()
                        .any(|&(s, st, en)| *seq < s && st <= *ts && *ts < en)
            })
            .map(|(ts, (_, v))| (ts, v))
            .collect();
        let kept: Vec<(u64, Vec<u8>)> = visible
            .into_iter()
            .enumerate()
            .filter(|(i, (ts, _))| !fs.gc.collects(*i, *ts, now))
            .map(|(_, c)| c)
            .collect();
        if spec.families.as_ref().is_some_and(|f| !f.contains(&name)) {
            continue;
        }
        if let Some(re) = &regex {
            let mut text = fam.clone();
            text.push(b':');
            text.extend_from_slice(&q);
            if !re.is_match(&text) {
                continue;
            }
        }
        let in_range = kept
            .into_iter()
            .filter(|(ts, _)| spec.time_range.contains(*ts))
            .take(spec.max_versions.map_or(usize::MAX, |n| n as usize));
        for (ts, v) in in_range {
            cells.push(Cell {
                row: row.clone(),
                family: name.clone(),
                qualifier: q.clone(),
                timestamp: ts,
                value: v.into(),
            });
        }
    }
    // Row and cell limits.
    let mut out: Vec<Cell> = Vec::new();
    let mut rows = 0u64;
    let mut bytes = 0u64;
    for c in cells {
        if spec.cell_limit.is_some_and(|l| out.len() as u64 >= l)
            || spec.byte_limit.is_some_and(|l| bytes >= l)
        {
            break;
        }
        let new_row = out.last().is_none_or(|l| l.row != c.row);
        if new_row {
            if spec.row_limit.is_some_and(|l| rows >= l) {
                break;
            }
            rows += 1;
        }
        bytes += c.value.len() as u64;
        out.push(c);
    }
    out
}

fn iter_of(v: &Entries) -> Box<VecIterator> {
    Box::new(VecIterator::new(Arc::new(v.clone())))
}

fn read(
    v: &Entries,
    spec: &ScanSpec,
    schema: &Arc<TableSchema>,
    snap: SeqNo,
    now: u64,
) -> Vec<Cell> {
    CellReader::new(iter_of(v), spec, schema.clone(), snap, now)
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap()
}

fn compact(v: &Entries, schema: &Arc<TableSchema>, major: bool, now: u64) -> Entries {
    CompactionFilter::new(iter_of(v), major, schema.clone(), now)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap()
}

#[test]
fn reader_matches_reference() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for case in 0..3000 {
        let input = random_entries(&mut rng);
        let schema = random_schema(&mut rng);
        let spec = random_spec(&mut rng);
        let max_seq = input.len() as u64;
        let snap = if rng.gen_bool(0.5) {
            u64::MAX
        } else {
            rng.gen_range(0..=max_seq + 1)
        };
        let now = rng.gen_range(0..10);
        let want = reference(&input, &spec, &schema, snap, now);
        let got = read(&input, &spec, &schema, snap, now);
        assert_eq!(
            got, want,
            "case {case}: spec {spec:?} snap {snap} now {now} schema {schema:?}"
        );

        // Row at a time gives the same cells, grouped.
        let mut r = CellReader::new(iter_of(&input), &spec, schema.clone(), snap, now).unwrap();
        let mut flat = Vec::new();
        while let Some((row, cells)) = r.next_row().unwrap() {
            assert!(cells.iter().all(|c| c.row == row));
            assert!(
                flat.last().is_none_or(|c: &Cell| c.row < row),
                "rows strictly increase"
            );
            flat.extend(cells);
        }
        assert_eq!(flat, want, "case {case} by rows");

        // Cells viewed in place are the same cells; so are they after a
        // row read whole (whose read-ahead cell the next view shows).
        let mut r = CellReader::new(iter_of(&input), &spec, schema.clone(), snap, now).unwrap();
        let mut viewed = Vec::new();
        if rng.gen_bool(0.5) {
            if let Some((_, cells)) = r.next_row().unwrap() {
                viewed.extend(cells);
            }
        }
        while r.advance_view().unwrap() {
            viewed.push(r.current().expect("a view step shows its cell").to_cell());
        }
        assert!(r.current().is_none(), "case {case}: the end shows no cell");
        assert_eq!(viewed, want, "case {case} viewed");

        // Row keys alone (the cell and byte limits count rows there, so
        // leave them out).
        if spec.cell_limit.is_none() && spec.byte_limit.is_none() {
            let mut r = CellReader::new(iter_of(&input), &spec, schema.clone(), snap, now).unwrap();
            let mut keys = Vec::new();
            while let Some(k) = r.next_row_key().unwrap() {
                keys.push(k);
            }
            let mut want_keys: Vec<Vec<u8>> = want.iter().map(|c| c.row.clone()).collect();
            want_keys.dedup();
            assert_eq!(keys, want_keys, "case {case} row keys");
        }

        // A single-column read equals the reference restricted to that column.
        let row = ROWS.choose(&mut rng).unwrap();
        let fam = ["a", "b"][rng.gen_range(0..2)];
        let q = QUALIFIERS.choose(&mut rng).unwrap();
        let mv = [None, Some(1)][rng.gen_range(0..2)];
        let col_spec = ScanSpec {
            max_versions: mv,
            time_range: spec.time_range,
            ..ScanSpec::row(row)
        };
        let want_col: Vec<Cell> = reference(&input, &col_spec, &schema, snap, now)
            .into_iter()
            .filter(|c| c.family == fam && c.qualifier == *q)
            .collect();
        let got_col = column_read(&input, &schema, row, fam, q, spec.time_range, mv, snap, now);
        assert_eq!(got_col, want_col, "case {case} column {row:?} {fam} {q:?}");

        // The point lookup, with the entries spread over several sources.
        let sources = random_sources(&mut rng, &input);
        assert_eq!(
            point_read(
                &sources,
                &schema,
                row,
                fam,
                q,
                spec.time_range,
                mv,
                snap,
                now
            ),
            Some(want_col),
            "case {case} point lookup {row:?} {fam} {q:?}"
        );
    }
}

/// `input` dealt out at random over one to four sorted sources (memtables
/// and SSTables of different ages), the same entry sometimes in two.
fn random_sources(rng: &mut StdRng, input: &Entries) -> Vec<Entries> {
    let mut sources: Vec<Entries> = vec![Vec::new(); rng.gen_range(1..=4)];
    for e in input {
        let i = rng.gen_range(0..sources.len());
        sources[i].push(e.clone());
        if rng.gen_bool(0.05) {
            let j = rng.gen_range(0..sources.len());
            if j != i {
                sources[j].push(e.clone());
            }
        }
    }
    for s in &mut sources {
        s.sort();
        s.dedup();
    }
    sources
}

/// One column through the general reader over `input`.
#[allow(clippy::too_many_arguments)]
fn column_read(
    input: &Entries,
    schema: &Arc<TableSchema>,
    row: &[u8],
    fam: &str,
    q: &[u8],
    time_range: TimeRange,
    mv: Option<u32>,
    snap: SeqNo,
    now: u64,
) -> Vec<Cell> {
    CellReader::column(
        iter_of(input),
        schema.clone(),
        row,
        fam,
        q,
        time_range,
        mv,
        snap,
        now,
    )
    .unwrap()
    .collect::<Result<_>>()
    .unwrap()
}

/// A point lookup of one column over `sources`; None if a source held too
/// many entries for it.
#[allow(clippy::too_many_arguments)]
fn point_read(
    sources: &[Entries],
    schema: &TableSchema,
    row: &[u8],
    fam: &str,
    q: &[u8],
    time_range: TimeRange,
    mv: Option<u32>,
    snap: SeqNo,
    now: u64,
) -> Option<Vec<Cell>> {
    let mut lookup = ColumnLookup::new(row, fam, q, snap);
    for s in sources {
        if !lookup.gather(&mut *iter_of(s)).unwrap() {
            return None;
        }
    }
    let gc = schema.family(fam).map(|f| &f.gc);
    let versions = lookup.resolve(gc, time_range, mv, now).unwrap();
    Some(
        versions
            .into_iter()
            .map(|v| v.into_cell(row, fam, q))
            .collect(),
    )
}

/// Histories made for point reads: a few columns of one row hit by many
/// writes with explicit timestamps out of order, and tombstones of every
/// kind; the lookup must agree with the general reader at every snapshot.
#[test]
fn point_lookup_matches_reader() {
    let mut rng = StdRng::seed_from_u64(0x9017);
    let quals: &[&[u8]] = &[b"", b"q", b"q\0"];
    for case in 0..4000 {
        let n = rng.gen_range(0..40);
        let mut seqs: Vec<SeqNo> = (1..=n as u64).collect();
        seqs.shuffle(&mut rng);
        let mut input = Entries::new();
        for seq in seqs {
            let row: &[u8] = [&b"r"[..], b"r\0", b"s"][rng.gen_range(0..3)];
            let fam = ["a", "b"][rng.gen_range(0..2)].as_bytes();
            let q = *quals.choose(&mut rng).unwrap();
            let e = match rng.gen_range(0..100) {
                0..=64 => (
                    key::encode(row, fam, q, rng.gen_range(0..8), seq, Kind::Put),
                    format!("v{seq}").into_bytes(),
                ),
                65..=82 => {
                    let start = rng.gen_range(0..8);
                    let end = if rng.gen_bool(0.2) {
                        u64::MAX
                    } else {
                        rng.gen_range(start..9)
                    };
                    (
                        key::encode(row, fam, q, TOMBSTONE_TS, seq, Kind::DeleteColumn),
                        encode_range(start, end).to_vec(),
                    )
                }
                83..=93 => (
                    key::encode(row, fam, b"", TOMBSTONE_TS, seq, Kind::DeleteFamily),
                    Vec::new(),
                ),
                _ => (
                    key::encode(row, b"", b"", TOMBSTONE_TS, seq, Kind::DeleteRow),
                    Vec::new(),
                ),
            };
            input.push(e);
        }
        input.sort();
        let schema = random_schema(&mut rng);
        let sources = random_sources(&mut rng, &input);
        let snap = if rng.gen_bool(0.5) {
            u64::MAX
        } else {
            rng.gen_range(0..=n as u64 + 1)
        };
        let now = rng.gen_range(0..12);
        let mv = [None, Some(0), Some(1), Some(1), Some(2)][rng.gen_range(0..5)];
        let time_range = if rng.gen_bool(0.2) {
            let start = rng.gen_range(0..8);
            TimeRange {
                start,
                end: rng.gen_range(start..9),
            }
        } else {
            TimeRange::ALL
        };
        let row: &[u8] = [&b"r"[..], b"r\0"][rng.gen_range(0..2)];
        let fam = ["a", "b", "gone"][rng.gen_range(0..3)];
        let q = *quals.choose(&mut rng).unwrap();
        let want = column_read(&input, &schema, row, fam, q, time_range, mv, snap, now);
        // The server reads families missing from the schema as empty.
        let got = match schema.family(fam) {
            Some(_) => point_read(&sources, &schema, row, fam, q, time_range, mv, snap, now),
            None => Some(Vec::new()),
        };
        assert_eq!(
            got,
            Some(want),
            "case {case}: {row:?} {fam} {q:?} snap {snap} now {now} mv {mv:?}"
        );
    }
}

#[test]
fn compactions_preserve_reads() {
    let mut rng = StdRng::seed_from_u64(0xc0ffee);
    for case in 0..2000 {
        let input = random_entries(&mut rng);
        let schema = random_schema(&mut rng);
        let spec = random_spec(&mut rng);
        let now = rng.gen_range(0..10);
        let later = now + rng.gen_range(0..5);
        let want = read(&input, &spec, &schema, u64::MAX, now);

        let major = compact(&input, &schema, true, now);
        assert!(major.len() <= input.len());
        for (k, _) in &major {
            let p = key::decode(k).unwrap();
            assert_eq!(p.kind, Kind::Put, "case {case}: major keeps no tombstone");
            assert!(schema
                .family(std::str::from_utf8(&p.family).unwrap())
                .is_some());
        }
        assert_eq!(
            read(&major, &spec, &schema, u64::MAX, now),
            want,
            "case {case} major"
        );
        // Time only moves forward: later reads agree too.
        assert_eq!(
            read(&major, &spec, &schema, u64::MAX, later),
            read(&input, &spec, &schema, u64::MAX, later),
            "case {case} major, read later"
        );
        // Compacting again changes nothing.
        assert_eq!(
            compact(&major, &schema, true, now),
            major,
            "case {case} idempotent"
        );

        // A minor compaction of a random part, merged with the rest, reads the same.
        let (part, rest): (Entries, Entries) =
            input.iter().cloned().partition(|_| rng.gen_bool(0.5));
        let mut merged = compact(&part, &schema, false, now);
        assert!(
            merged.iter().all(|e| part.contains(e)),
            "output is a subset"
        );
        merged.extend(rest);
        merged.sort();
        assert_eq!(
            read(&merged, &spec, &schema, u64::MAX, now),
            want,
            "case {case} minor"
        );
        assert_eq!(
            read(&merged, &spec, &schema, u64::MAX, later),
            read(&input, &spec, &schema, u64::MAX, later),
            "case {case} minor, read later"
        );
    }
}
