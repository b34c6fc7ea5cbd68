//! The binary form of a table schema, as METADATA stores it. Flat GC rules
//! are written as they always were, so schemas stored before rule trees
//! existed read back the same. A schema with an aggregate family is written
//! under a second magic, with one type byte after each family; one without
//! is written as before, byte for byte.
//!
//! Families are written in creation order and read back in the order
//! written; schemas stored before the order was kept have them by name,
//! which reads as name order (and a binary from before reads the new order
//! as a set, sorting by name).

use super::{FamilySchema, TableSchema};
use crate::aggregate::Aggregator;
use crate::data::{BloomKind, Compression};
use crate::error::{Error, Result};
use crate::gc_rule::{GcMode, GcRule};
use std::collections::BTreeMap;

impl TableSchema {
    /// Binary encoding, as METADATA stores it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.families.len() * 64);
        let typed = self.families.values().any(|f| f.aggregate.is_some());
        out.extend_from_slice(if typed { TYPED_MAGIC } else { ENCODING_MAGIC });
        put_u32(&mut out, self.owner);
        put_u32(&mut out, self.group);
        put_u32(&mut out, self.mode);
        put_u32(&mut out, self.families.len() as u32);
        for f in self.ordered() {
            put_str(&mut out, &f.name);
            // A flat rule as it always was; a nested one as mode 2 and its tree.
            let (v, a, mode) = match f.gc.as_flat() {
                Some((v, a, GcMode::Union)) => (v, a, 0),
                Some((v, a, GcMode::Intersection)) => (v, a, 1),
                None => (None, None, 2),
            };
            out.push(u8::from(v.is_some()));
            put_u32(&mut out, v.unwrap_or(0));
            out.push(u8::from(a.is_some()));
            out.extend_from_slice(&a.unwrap_or(0).to_be_bytes());
            out.push(mode);
            if mode == 2 {
                f.gc.encode_tree(&mut out);
            }
            put_str(&mut out, &f.locality_group);
            out.push(match f.compression {
                Compression::None => 0,
                Compression::Lz4 => 1,
            });
            out.push(match f.bloom {
                BloomKind::None => 0,
                BloomKind::Row => 1,
                BloomKind::RowColumn => 2,
            });
            put_u32(&mut out, f.block_size as u32);
            out.push(u8::from(f.in_memory));
            put_u32(&mut out, f.mode);
            put_u32(&mut out, f.owner);
            put_u32(&mut out, f.group);
            if typed {
                out.push(type_byte(f.aggregate));
            }
        }
        // Table flags after the families, only when one is set: a schema
        // without any is written as before, byte for byte.
        if self.deletion_protection {
            out.push(FLAGS_TAG);
            put_u32(&mut out, FLAG_DELETION_PROTECTION);
        }
        if self.change_retention > 0 {
            out.push(CHANGE_RETENTION_TAG);
            out.extend_from_slice(&self.change_retention.to_be_bytes());
        }
        out
    }

    /// Decodes [`Self::encode`]'s output; anything malformed is `Error::Corruption`.
    pub fn decode(buf: &[u8]) -> Result<TableSchema> {
        let mut r = Reader { buf };
        let typed = match r.take(ENCODING_MAGIC.len())? {
            m if m == ENCODING_MAGIC => false,
            m if m == TYPED_MAGIC => true,
            _ => return Err(Error::corruption("table schema: bad magic")),
        };
        let owner = r.u32()?;
        let group = r.u32()?;
        let mode = r.u32()?;
        let n = r.u32()?;
        let mut families = BTreeMap::new();
        for rank in 0..n {
            let name = r.string()?;
            let has_versions = r.flag()?;
            let versions = r.u32()?;
            let has_age = r.flag()?;
            let age = r.u64()?;
            let gc = match r.u8()? {
                0 => GcRule::flat(
                    has_versions.then_some(versions),
                    has_age.then_some(age),
                    GcMode::Union,
                ),
                1 => GcRule::flat(
                    has_versions.then_some(versions),
                    has_age.then_some(age),
                    GcMode::Intersection,
                ),
                2 => GcRule::decode_tree(&mut r.buf, 0)
                    .map_err(|e| Error::corruption(format!("table schema: {e}")))?,
                b => return Err(Error::corruption(format!("table schema: gc mode {b}"))),
            };
            let locality_group = r.string()?;
            let compression = match r.u8()? {
                0 => Compression::None,
                1 => Compression::Lz4,
                b => return Err(Error::corruption(format!("table schema: compression {b}"))),
            };
            let bloom = match r.u8()? {
                0 => BloomKind::None,
                1 => BloomKind::Row,
                2 => BloomKind::RowColumn,
                b => return Err(Error::corruption(format!("table schema: bloom {b}"))),
            };
            let block_size = r.u32()? as usize;
            let in_memory = r.flag()?;
            let (mode, owner, group) = (r.u32()?, r.u32()?, r.u32()?);
            let aggregate = if typed {
                match r.u8()? {
                    0 => None,
                    1 => Some(Aggregator::Sum),
                    2 => Some(Aggregator::Min),
                    3 => Some(Aggregator::Max),
                    b => return Err(Error::corruption(format!("table schema: type {b}"))),
                }
            } else {
                None
            };
            let f = FamilySchema {
                name: name.clone(),
                gc,
                locality_group,
                compression,
                bloom,
                block_size,
                in_memory,
                mode,
                owner,
                group,
                aggregate,
                rank,
            };
            if families.insert(name.clone(), f).is_some() {
                return Err(Error::corruption(format!(
                    "table schema: family {name} twice"
                )));
            }
        }
        let mut flags = 0;
        if r.buf.first() == Some(&FLAGS_TAG) {
            r.u8()?;
            flags = r.u32()?;
            if flags & !FLAG_DELETION_PROTECTION != 0 {
                return Err(Error::corruption(format!(
                    "table schema: unknown table flags {flags:#x}"
                )));
            }
        }
        let mut change_retention = 0;
        if r.buf.first() == Some(&CHANGE_RETENTION_TAG) {
            r.u8()?;
            change_retention = r.u64()?;
        }
        if !r.buf.is_empty() {
            return Err(Error::corruption("table schema: trailing bytes"));
        }
        let s = TableSchema {
            families,
            owner,
            group,
            mode,
            deletion_protection: flags & FLAG_DELETION_PROTECTION != 0,
            change_retention,
        };
        s.validate()
            .map_err(|e| Error::corruption(format!("table schema: {e}")))?;
        Ok(s)
    }
}

const ENCODING_MAGIC: &[u8] = b"BTSCHEMA1";
/// Starts the optional table flags after the families (a u32 follows).
const FLAGS_TAG: u8 = 1;
/// The table flag of deletion protection.
const FLAG_DELETION_PROTECTION: u32 = 1;
/// Starts the optional change-log retention (a BE64 of microseconds follows).
const CHANGE_RETENTION_TAG: u8 = 2;
/// The magic of a schema with an aggregate family (same length).
const TYPED_MAGIC: &[u8] = b"BTSCHEMA2";

fn type_byte(a: Option<Aggregator>) -> u8 {
    match a {
        None => 0,
        Some(Aggregator::Sum) => 1,
        Some(Aggregator::Min) => 2,
        Some(Aggregator::Max) => 3,
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked cursor for [`TableSchema::decode`].
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(Error::corruption("table schema: truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(Error::corruption(format!("table schema: flag byte {b}"))),
        }
    }
    fn u32(&mut self) -> Result<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| Error::corruption("table schema: name not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::text::tests::Names;
    use super::super::*;
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn encode_decode() {
        let mut s = TableSchema::with_families(
            parse(
                "a max_versions=none max_age=5s gc=intersection locality=x compression=none \
                 bloom=row block_size=2k in_memory=true mode=0700 owner=3 group=4\nb\n",
                &Names,
            )
            .unwrap(),
        );
        s.owner = 11;
        s.group = 12;
        s.mode = 0o750;
        let enc = s.encode();
        assert_eq!(TableSchema::decode(&enc).unwrap(), s);
        assert_eq!(
            TableSchema::decode(&TableSchema::default().encode()).unwrap(),
            TableSchema::default()
        );
        for cut in 0..enc.len() {
            assert!(TableSchema::decode(&enc[..cut]).is_err(), "prefix {cut}");
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(TableSchema::decode(&extra).is_err());
        // Flip every byte: must never panic; most flips must be caught.
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0xA5;
            let _ = TableSchema::decode(&bad);
        }
        assert!(TableSchema::decode(b"garbage").is_err());
    }

    #[test]
    fn random_schemas_roundtrip() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..300 {
            let mut group_settings: HashMap<String, (Compression, BloomKind, usize, bool)> =
                HashMap::new();
            let mut fams = Vec::new();
            for i in 0..rng.gen_range(0..6) {
                let mut f = FamilySchema::new(format!("f{i}.x-{}", rng.gen_range(0..100)));
                f.gc = GcRule::flat(
                    [None, Some(1), Some(u32::MAX)][rng.gen_range(0..3)],
                    [
                        None,
                        Some(1),
                        Some(1500),
                        Some(86_400_000_000 * 3),
                        Some(u64::MAX),
                    ][rng.gen_range(0..5)],
                    [GcMode::Union, GcMode::Intersection][rng.gen_range(0..2)],
                );
                f.locality_group = ["default", "g1", "g.2"][rng.gen_range(0..3)].to_string();
                let gs = *group_settings
                    .entry(f.locality_group.clone())
                    .or_insert_with(|| {
                        (
                            [Compression::None, Compression::Lz4][rng.gen_range(0..2)],
                            [BloomKind::None, BloomKind::Row, BloomKind::RowColumn]
                                [rng.gen_range(0..3)],
                            rng.gen_range(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE),
                            rng.gen_bool(0.5),
                        )
                    });
                (f.compression, f.bloom, f.block_size, f.in_memory) = gs;
                f.mode = rng.gen_range(0..=0o7777);
                f.owner = [0, 1000, u32::MAX][rng.gen_range(0..3)];
                f.group = [0, 50, 7][rng.gen_range(0..3)];
                f.aggregate =
                    [None, None, Some(Aggregator::Sum), Some(Aggregator::Max)][rng.gen_range(0..4)];
                fams.push(f);
            }
            let s = TableSchema::with_families(fams);
            s.validate().unwrap();
            let text = format(&s, &Names);
            assert_eq!(
                TableSchema::with_families(parse(&text, &Names).unwrap()),
                s,
                "{text}"
            );
            assert_eq!(TableSchema::decode(&s.encode()).unwrap(), s);
            let (same, dropped) = s.apply_text(&text, &Names, true).unwrap();
            assert_eq!(same, s);
            assert!(dropped.is_empty());
        }
    }

    #[test]
    fn deletion_protection_roundtrips_and_leaves_others_unchanged() {
        let plain = TableSchema::with_families([FamilySchema::new("a")]);
        let mut protected = plain.clone();
        protected.deletion_protection = true;
        let bytes = protected.encode();
        // The flags follow the schema as it was written before.
        assert_eq!(bytes.len(), plain.encode().len() + 5);
        assert_eq!(&bytes[..plain.encode().len()], &plain.encode()[..]);
        assert_eq!(TableSchema::decode(&bytes).unwrap(), protected);
        assert!(
            !TableSchema::decode(&plain.encode())
                .unwrap()
                .deletion_protection
        );
        let mut unknown = plain.encode();
        unknown.push(FLAGS_TAG);
        unknown.extend_from_slice(&2u32.to_be_bytes());
        assert!(TableSchema::decode(&unknown).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(TableSchema::decode(&extra).is_err());
    }

    #[test]
    fn change_retention_roundtrips_after_the_flags() {
        let plain = TableSchema::with_families([FamilySchema::new("a")]);
        let mut logged = plain.clone();
        logged.change_retention = 3_600_000_000;
        let bytes = logged.encode();
        assert_eq!(&bytes[..plain.encode().len()], &plain.encode()[..]);
        assert_eq!(TableSchema::decode(&bytes).unwrap(), logged);
        logged.deletion_protection = true;
        assert_eq!(TableSchema::decode(&logged.encode()).unwrap(), logged);
        let mut over = plain.clone();
        over.change_retention = super::super::MAX_CHANGE_RETENTION + 1;
        assert!(TableSchema::decode(&over.encode()).is_err());
    }

    #[test]
    fn families_keep_creation_order() {
        let mut s = TableSchema::with_families([FamilySchema::new("z"), FamilySchema::new("a")]);
        s.add_family(FamilySchema::new("m"));
        let names = |s: &TableSchema| -> Vec<String> {
            s.ordered().iter().map(|f| f.name.clone()).collect()
        };
        assert_eq!(names(&s), ["z", "a", "m"]);
        let back = TableSchema::decode(&s.encode()).unwrap();
        assert_eq!(names(&back), ["z", "a", "m"]);
        assert_eq!(back, s);
        // Through the lock service's text too.
        let (text, _) = TableSchema::default()
            .apply_text(&format(&s, &Names), &Names, true)
            .unwrap();
        assert_eq!(text, s);
        // Dropped and made again: the newest.
        let mut again = back.clone();
        let z = again.families.remove("z").unwrap();
        again.add_family(z);
        assert_eq!(names(&again), ["a", "m", "z"]);
        // A schema written in name order (as every one was before) reads
        // in name order.
        let mut old = s.clone();
        for (i, f) in old.families.values_mut().enumerate() {
            f.rank = i as u32;
        }
        assert_eq!(
            names(&TableSchema::decode(&old.encode()).unwrap()),
            ["a", "m", "z"]
        );
    }

    #[test]
    fn schemas_stored_before_gc_trees_still_load() {
        // The flat binary encoding, byte for byte as it was written before.
        let mut old = ENCODING_MAGIC.to_vec();
        for v in [0u32, 0, 0o755, 1] {
            old.extend_from_slice(&v.to_be_bytes());
        }
        put_str(&mut old, "anchor");
        old.push(1);
        old.extend_from_slice(&5u32.to_be_bytes());
        old.push(1);
        old.extend_from_slice(&3_600_000_000u64.to_be_bytes());
        old.push(1); // intersection
        put_str(&mut old, "default");
        old.extend_from_slice(&[1, 2]);
        old.extend_from_slice(&65536u32.to_be_bytes());
        old.push(0);
        for v in [0o750u32, 0, 0] {
            old.extend_from_slice(&v.to_be_bytes());
        }
        let s = TableSchema::decode(&old).unwrap();
        let f = &s.families["anchor"];
        assert_eq!(
            f.gc,
            GcRule::flat(Some(5), Some(3_600_000_000), GcMode::Intersection)
        );
        assert_eq!(s.encode(), old, "a flat rule is written as before");
        // And the text form the lock service holds.
        let text = "anchor max_versions=3 max_age=none gc=intersection locality=default \
                    compression=lz4 bloom=row_col block_size=64k in_memory=false mode=0755 \
                    owner=0 group=0\n";
        let fams = parse(text, &NumericNames).unwrap();
        assert!(
            !fams[0].gc.collects(10, 0, u64::MAX),
            "a missing limit never collects"
        );
        assert_eq!(
            format(&TableSchema::with_families(fams), &NumericNames),
            text.replace("                    ", "")
        );
    }
}
