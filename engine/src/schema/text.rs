//! The `.schema` text form of a table's families: parsing lines (owners and
//! groups by name through a [`NameResolver`]) and writing them back so that
//! `parse(format(s)) == s`.

use super::{
    bad, check_name, FamilyLine, FamilySchema, GroupValue, Setting, TableSchema, MAX_BLOCK_SIZE,
    MIN_BLOCK_SIZE,
};
use crate::aggregate::Aggregator;
use crate::data::{BloomKind, Compression};
use crate::duration::{duration_str, parse_digits, parse_duration};
use crate::error::Result;
use crate::gc_rule::{GcMode, GcRule};
use std::collections::{BTreeSet, HashMap};

impl std::fmt::Display for GroupValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupValue::Compression(c) => write!(f, "compression={}", compression_str(*c)),
            GroupValue::Bloom(b) => write!(f, "bloom={}", bloom_str(*b)),
            GroupValue::BlockSize(n) => write!(f, "block_size={}", size_str(*n)),
            GroupValue::InMemory(m) => write!(f, "in_memory={m}"),
        }
    }
}

const ALL_SETTINGS: [Setting; 12] = [
    Setting::MaxVersions,
    Setting::MaxAge,
    Setting::Gc,
    Setting::Locality,
    Setting::Compression,
    Setting::Bloom,
    Setting::BlockSize,
    Setting::InMemory,
    Setting::Mode,
    Setting::Owner,
    Setting::Group,
    Setting::Type,
];

impl Setting {
    /// The key as written in the text.
    pub fn key(self) -> &'static str {
        match self {
            Setting::MaxVersions => "max_versions",
            Setting::MaxAge => "max_age",
            Setting::Gc | Setting::GcTree => "gc",
            Setting::Locality => "locality",
            Setting::Compression => "compression",
            Setting::Bloom => "bloom",
            Setting::BlockSize => "block_size",
            Setting::InMemory => "in_memory",
            Setting::Mode => "mode",
            Setting::Owner => "owner",
            Setting::Group => "group",
            Setting::Type => "type",
        }
    }

    /// The setting written as `k`, if any.
    pub fn from_key(k: &str) -> Option<Setting> {
        ALL_SETTINGS.into_iter().find(|s| s.key() == k)
    }
}

/// Maps user and group names to ids and back (the filesystem layer implements
/// it with getpwnam/getgrnam).
pub trait NameResolver {
    /// The uid of user `name`, if known.
    fn uid(&self, name: &str) -> Option<u32>;
    /// The gid of group `name`, if known.
    fn gid(&self, name: &str) -> Option<u32>;
    /// The name of user `uid`, if it has one.
    fn user_name(&self, uid: u32) -> Option<String>;
    /// The name of group `gid`, if it has one.
    fn group_name(&self, gid: u32) -> Option<String>;
}

/// A resolver that knows no names: owners and groups are plain numbers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NumericNames;

impl NameResolver for NumericNames {
    fn uid(&self, name: &str) -> Option<u32> {
        name.parse().ok()
    }
    fn gid(&self, name: &str) -> Option<u32> {
        name.parse().ok()
    }
    fn user_name(&self, _uid: u32) -> Option<String> {
        None
    }
    fn group_name(&self, _gid: u32) -> Option<String> {
        None
    }
}

impl TableSchema {
    /// Parses `.schema` text and applies it with [`Self::merge_families`].
    pub fn apply_text(
        &self,
        text: &str,
        resolver: &dyn NameResolver,
        replace_all: bool,
    ) -> Result<(TableSchema, Vec<String>)> {
        let (families, table) = super::table_line::split(text)?;
        let (mut s, dropped) =
            self.merge_families(parse_lines(&families, resolver)?, replace_all)?;
        if let Some(t) = table {
            t.apply(&mut s);
        }
        Ok((s, dropped))
    }
}

/// Parses `.schema` text into lines, checking each one and that no family is
/// given twice. The first bad line (1-based) is reported; nothing partial is returned.
pub fn parse_lines(text: &str, resolver: &dyn NameResolver) -> Result<Vec<FamilyLine>> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let fl = parse_line(line, content, resolver).map_err(|reason| bad(line, reason))?;
        if let Some(prev) = seen.insert(fl.family.name.clone(), line) {
            return Err(bad(
                line,
                format!("family {} is already given on line {prev}", fl.family.name),
            ));
        }
        out.push(fl);
    }
    Ok(out)
}

/// Parses `.schema` text into complete family settings, in line order
/// (omitted settings take defaults or their locality group's settings).
/// A `.table` line is skipped.
pub fn parse(text: &str, resolver: &dyn NameResolver) -> Result<Vec<FamilySchema>> {
    let (text, _) = super::table_line::split(text)?;
    let lines = parse_lines(&text, resolver)?;
    let order: Vec<String> = lines.iter().map(|l| l.family.name.clone()).collect();
    let (mut s, _) = TableSchema::default().merge_families(lines, true)?;
    Ok(order.iter().filter_map(|n| s.families.remove(n)).collect())
}

fn parse_line(
    line: usize,
    content: &str,
    resolver: &dyn NameResolver,
) -> std::result::Result<FamilyLine, String> {
    let mut tokens = content.split_ascii_whitespace();
    let name = tokens.next().unwrap_or("");
    check_name(name).map_err(|r| format!("family {r}"))?;
    let mut f = FamilySchema::new(name);
    let mut given = BTreeSet::new();
    // The flat GC settings, from the default rule.
    let (mut versions, mut age, mut mode) =
        GcRule::default()
            .as_flat()
            .unwrap_or((Some(3), None, GcMode::Union));
    let mut tree: Option<GcRule> = None;
    for tok in tokens {
        let (k, v) = tok
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, found {tok:?}"))?;
        let s = Setting::from_key(k).ok_or_else(|| {
            let keys: Vec<&str> = ALL_SETTINGS.iter().map(|s| s.key()).collect();
            format!("unknown setting {k:?}; known are {}", keys.join(", "))
        })?;
        if !given.insert(s) {
            return Err(format!("{k} is given twice"));
        }
        if v.is_empty() {
            return Err(format!("{k} has an empty value"));
        }
        match s {
            Setting::MaxVersions => {
                versions = match v {
                    "none" | "unlimited" => None,
                    _ => {
                        let n: u32 = parse_digits(v)
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| {
                                format!("max_versions {v:?} is not a number, none or unlimited")
                            })?;
                        if n == 0 {
                            return Err("max_versions must be at least 1".into());
                        }
                        Some(n)
                    }
                }
            }
            Setting::MaxAge => {
                age = match v {
                    "none" => None,
                    _ => Some(parse_duration(v)?),
                }
            }
            Setting::Gc => match v {
                "union" => mode = GcMode::Union,
                "intersection" => mode = GcMode::Intersection,
                _ => {
                    let t = GcRule::parse_text(v).map_err(|e| {
                        format!(
                            "gc {v:?}: {e} (gc is union, intersection, or a nested rule \
                             like union(max_versions=3,intersection(max_age=7d,max_versions=1)))"
                        )
                    })?;
                    given.insert(Setting::GcTree);
                    tree = Some(t);
                }
            },
            Setting::GcTree => {}
            Setting::Locality => {
                check_name(v).map_err(|r| format!("locality group {r}"))?;
                f.locality_group = v.to_string();
            }
            Setting::Compression => {
                f.compression = match v {
                    "lz4" => Compression::Lz4,
                    "none" => Compression::None,
                    _ => return Err(format!("compression {v:?} is not lz4 or none")),
                }
            }
            Setting::Bloom => {
                f.bloom = match v {
                    "none" => BloomKind::None,
                    "row" => BloomKind::Row,
                    "row_col" => BloomKind::RowColumn,
                    _ => return Err(format!("bloom {v:?} is not none, row or row_col")),
                }
            }
            Setting::BlockSize => f.block_size = parse_size(v)?,
            Setting::InMemory => {
                f.in_memory = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("in_memory {v:?} is not true or false")),
                }
            }
            Setting::Mode => {
                let digits = v.strip_prefix("0o").unwrap_or(v);
                f.mode = match u32::from_str_radix(digits, 8) {
                    Ok(m) if m <= 0o7777 && digits.bytes().all(|b| b.is_ascii_digit()) => m,
                    _ => return Err(format!("mode {v:?} is not an octal mode up to 7777")),
                }
            }
            Setting::Owner => {
                f.owner = parse_id(v, |n| resolver.uid(n)).ok_or_else(|| {
                    format!("owner {v:?} is neither a user id nor a known user name")
                })?
            }
            Setting::Group => {
                f.group = parse_id(v, |n| resolver.gid(n)).ok_or_else(|| {
                    format!("group {v:?} is neither a group id nor a known group name")
                })?
            }
            Setting::Type => f.aggregate = parse_type(v)?,
        }
    }
    f.gc = match tree {
        Some(t) => {
            if given.contains(&Setting::MaxVersions) || given.contains(&Setting::MaxAge) {
                return Err(
                    "a nested gc= rule holds the limits: give max_versions and max_age inside it"
                        .into(),
                );
            }
            t
        }
        None => GcRule::flat(versions, age, mode),
    };
    Ok(FamilyLine {
        line,
        family: f,
        given,
    })
}

/// `bytes` (a plain family) or an Int64 aggregate.
fn parse_type(v: &str) -> std::result::Result<Option<Aggregator>, String> {
    if v == "bytes" {
        return Ok(None);
    }
    if let Some(a) = Aggregator::from_type_name(v) {
        return Ok(Some(a));
    }
    let known: Vec<&str> = Aggregator::ALL.iter().map(|a| a.type_name()).collect();
    let hll = if v.contains("hll") || v.contains("hyperloglog") {
        " (HyperLogLog aggregates are not supported)"
    } else {
        ""
    };
    Err(format!(
        "type {v:?} is not bytes, {}{hll}",
        known.join(", ")
    ))
}

fn parse_id(v: &str, lookup: impl Fn(&str) -> Option<u32>) -> Option<u32> {
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse().ok();
    }
    lookup(v)
}

/// `65536`, `64k`, `1m` → bytes, within 1k..=16m.
fn parse_size(v: &str) -> std::result::Result<usize, String> {
    let (num, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1024u64),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1024 * 1024),
        _ => (v, 1),
    };
    let n = parse_digits(num)
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("block_size {v:?} is not a size like 65536, 64k or 1m"))?;
    if n < MIN_BLOCK_SIZE as u64 || n > MAX_BLOCK_SIZE as u64 {
        return Err(format!("block_size {v} is outside 1k..=16m"));
    }
    Ok(n as usize)
}

fn size_str(n: usize) -> String {
    if n.is_multiple_of(1024 * 1024) {
        format!("{}m", n / (1024 * 1024))
    } else if n.is_multiple_of(1024) {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

fn compression_str(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Lz4 => "lz4",
    }
}

fn bloom_str(b: BloomKind) -> &'static str {
    match b {
        BloomKind::None => "none",
        BloomKind::Row => "row",
        BloomKind::RowColumn => "row_col",
    }
}

/// A name for an id that parses back to the same id, else the number.
fn id_str(id: u32, name: Option<String>, back: impl Fn(&str) -> Option<u32>) -> String {
    match name {
        Some(n)
            if !n.is_empty()
                && !n.bytes().all(|b| b.is_ascii_digit())
                && !n.contains(|c: char| c.is_whitespace() || c == '#' || c == '=')
                && back(&n) == Some(id) =>
        {
            n
        }
        _ => id.to_string(),
    }
}

/// Writes one line per family, sorted by name, with every setting, so that
/// parsing the text gives the same families back (after the `.table` line,
/// when the table has a setting of its own).
pub fn format(schema: &TableSchema, resolver: &dyn NameResolver) -> String {
    let mut out = String::new();
    if let Some(l) = super::table_line::format(schema) {
        out.push_str(&l);
        out.push('\n');
    }
    // In creation order: read back, the lines make the families in it.
    for f in schema.ordered() {
        out.push_str(&format_family(f, resolver));
        out.push('\n');
    }
    out
}

/// One family's line (without newline).
pub fn format_family(f: &FamilySchema, resolver: &dyn NameResolver) -> String {
    // A flat rule in the flat keys (as schemas have always read); a nested
    // one as its tree.
    let gc = match f.gc.as_flat() {
        Some((versions, age, mode)) => format!(
            "max_versions={} max_age={} gc={}",
            versions.map_or_else(|| "none".to_string(), |n| n.to_string()),
            age.map_or_else(|| "none".to_string(), duration_str),
            match mode {
                GcMode::Union => "union",
                GcMode::Intersection => "intersection",
            }
        ),
        None => format!("gc={}", f.gc.to_text()),
    };
    // Only aggregate families name their type, so plain families read as
    // they always have.
    let ty = f
        .aggregate
        .map(|a| format!(" type={}", a.type_name()))
        .unwrap_or_default();
    format!(
        "{} {gc} locality={} compression={} \
         bloom={} block_size={} in_memory={} mode={:04o} owner={} group={}{ty}",
        f.name,
        f.locality_group,
        compression_str(f.compression),
        bloom_str(f.bloom),
        size_str(f.block_size),
        f.in_memory,
        f.mode,
        id_str(f.owner, resolver.user_name(f.owner), |n| resolver.uid(n)),
        id_str(f.group, resolver.group_name(f.group), |n| resolver.gid(n)),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::error::Error;

    /// A resolver with one user and one group.
    pub(in crate::schema) struct Names;
    impl NameResolver for Names {
        fn uid(&self, name: &str) -> Option<u32> {
            (name == "alice").then_some(1000)
        }
        fn gid(&self, name: &str) -> Option<u32> {
            (name == "staff").then_some(50)
        }
        fn user_name(&self, uid: u32) -> Option<String> {
            (uid == 1000).then(|| "alice".to_string())
        }
        fn group_name(&self, gid: u32) -> Option<String> {
            (gid == 50).then(|| "staff".to_string())
        }
    }

    pub(in crate::schema) fn bad_line(text: &str) -> (usize, String) {
        match parse(text, &Names) {
            Err(Error::BadSchema { line, reason }) => (line, reason),
            other => panic!("expected BadSchema for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn parse_full_line_and_defaults() {
        let text = "# families\n\nanchor max_versions=5 max_age=7d gc=intersection locality=lg1 \
                    compression=none bloom=row block_size=4k in_memory=true mode=0750 \
                    owner=alice group=staff  # trailing comment\n  contents  \n";
        let fams = parse(text, &Names).unwrap();
        assert_eq!(fams.len(), 2);
        let a = &fams[0];
        assert_eq!(a.name, "anchor");
        assert_eq!(
            a.gc,
            GcRule::flat(Some(5), Some(7 * 86_400_000_000), GcMode::Intersection)
        );
        assert_eq!(a.locality_group, "lg1");
        assert_eq!(a.compression, Compression::None);
        assert_eq!(a.bloom, BloomKind::Row);
        assert_eq!(a.block_size, 4096);
        assert!(a.in_memory);
        assert_eq!((a.mode, a.owner, a.group), (0o750, 1000, 50));
        // Ranked in line order.
        assert_eq!(
            fams[1],
            FamilySchema {
                rank: 1,
                ..FamilySchema::new("contents")
            }
        );
    }

    #[test]
    fn parse_values() {
        let one = |setting: &str| parse(&format!("f {setting}"), &Names).unwrap().remove(0);
        assert_eq!(one("max_versions=none").gc.max_versions(), None);
        assert_eq!(one("max_versions=unlimited").gc.max_versions(), None);
        assert_eq!(
            one("max_age=90m").gc.max_age_micros(),
            Some(90 * 60_000_000)
        );
        assert_eq!(one("max_age=500ms").gc.max_age_micros(), Some(500_000));
        assert_eq!(one("max_age=3us").gc.max_age_micros(), Some(3));
        assert_eq!(
            one("max_age=2h").gc.max_age_micros(),
            Some(2 * 3_600_000_000)
        );
        assert_eq!(one("max_age=10s").gc.max_age_micros(), Some(10_000_000));
        assert_eq!(one("max_age=none").gc.max_age_micros(), None);
        assert_eq!(one("block_size=1m").block_size, 1 << 20);
        assert_eq!(one("block_size=16M").block_size, 16 << 20);
        assert_eq!(one("block_size=1024").block_size, 1024);
        assert_eq!(one("mode=7777").mode, 0o7777);
        assert_eq!(one("mode=0o640").mode, 0o640);
        assert_eq!(one("owner=42 group=7").owner, 42);
        assert_eq!(one("owner=42 group=7").group, 7);
        assert_eq!(one("bloom=none").bloom, BloomKind::None);
        assert_eq!(one("bloom=row_col").bloom, BloomKind::RowColumn);
        assert_eq!(one("gc=union").gc.mode(), GcMode::Union);
        assert!(parse("a.b-c_D9", &Names).is_ok());
        assert!(parse(&"x".repeat(64), &Names).is_ok());
        assert!(parse("", &Names).unwrap().is_empty());
    }

    #[test]
    fn every_error_names_its_line() {
        let cases: &[(&str, &str)] = &[
            ("bad/name", "contains"),
            (".hidden", "starts with '.'"),
            (&"x".repeat(65), "limit is 64"),
            ("f max_versions=0", "at least 1"),
            ("f max_versions=-1", "max_versions"),
            ("f max_versions=abc", "max_versions"),
            ("f max_age=7", "max_age"),
            ("f max_age=7y", "max_age"),
            ("f max_age=0d", "positive"),
            ("f max_age=99999999999999999d", "too large"),
            ("f gc=both", "gc"),
            ("f locality=.x", "locality group"),
            ("f compression=zstd", "compression"),
            ("f bloom=col", "bloom"),
            ("f block_size=512", "outside"),
            ("f block_size=17m", "outside"),
            ("f block_size=big", "block_size"),
            ("f in_memory=yes", "in_memory"),
            ("f mode=0800", "mode"),
            ("f mode=17777", "mode"),
            ("f owner=bob", "owner"),
            ("f group=wheel", "group"),
            ("f owner=99999999999", "owner"),
            ("f colour=red", "unknown setting"),
            ("f max_versions", "key=value"),
            ("f max_versions=", "empty value"),
            ("f gc=union gc=union", "twice"),
        ];
        for (bad, why) in cases {
            let text = format!("# header\nok1\n\n{bad}\nok2 bloom=nope\n");
            let (line, reason) = bad_line(&text);
            assert_eq!(line, 4, "{bad}: {reason}");
            assert!(reason.contains(why), "{bad}: {reason:?} lacks {why:?}");
        }
        let (line, reason) = bad_line("a\nb\n# c\na max_versions=1\n");
        assert_eq!(line, 4);
        assert!(reason.contains("line 1"), "{reason}");
    }

    #[test]
    fn format_roundtrips() {
        let text =
            "anchor max_versions=5 max_age=90m gc=intersection locality=lg compression=none \
                    bloom=row block_size=1500 in_memory=true mode=0750 owner=alice group=staff\n\
                    b max_versions=none max_age=1500ms owner=7 group=9 mode=4755\n\
                    c max_age=86400s block_size=2m\n";
        let s = TableSchema::with_families(parse(text, &Names).unwrap());
        for r in [&Names as &dyn NameResolver, &NumericNames] {
            let out = format(&s, r);
            let back = TableSchema::with_families(parse(&out, r).unwrap());
            assert_eq!(back, s, "{out}");
        }
        let out = format(&s, &Names);
        assert!(
            out.starts_with("anchor max_versions=5 max_age=90m gc=intersection locality=lg "),
            "{out}"
        );
        assert!(out.contains("owner=alice group=staff"), "{out}");
        assert!(out.contains("max_age=1d"), "{out}");
        assert!(out.contains("block_size=2m"), "{out}");
        assert!(out.contains("mode=4755"), "{out}");
        assert_eq!(out.lines().count(), 3);
        assert!(format(&s, &NumericNames).contains("owner=1000 group=50"));
        assert_eq!(
            format_family(&FamilySchema::new("f"), &NumericNames),
            "f max_versions=3 max_age=none gc=union locality=default compression=lz4 \
             bloom=row_col block_size=64k in_memory=false mode=0755 owner=0 group=0"
        );
    }

    #[test]
    fn aggregate_types_in_text_and_binary() {
        let fams = parse(
            "a type=int64_sum\nb type=int64_max\nc type=bytes\nd\n",
            &Names,
        )
        .unwrap();
        assert_eq!(fams[0].aggregate, Some(Aggregator::Sum));
        assert_eq!(fams[1].aggregate, Some(Aggregator::Max));
        assert_eq!((fams[2].aggregate, fams[3].aggregate), (None, None));
        let s = TableSchema::with_families(fams);
        let text = format(&s, &NumericNames);
        assert!(
            text.lines()
                .next()
                .unwrap()
                .ends_with(" group=0 type=int64_sum"),
            "{text}"
        );
        assert!(!text.lines().nth(2).unwrap().contains("type="), "{text}");
        assert_eq!(TableSchema::with_families(parse(&text, &Names).unwrap()), s);
        assert_eq!(TableSchema::decode(&s.encode()).unwrap(), s);
        // Other settings change; the type does not, by a line or by the whole file.
        let (t, _) = s.apply_text("a max_versions=1", &Names, false).unwrap();
        assert_eq!(t.families["a"].aggregate, Some(Aggregator::Sum));
        for (text, replace) in [
            ("a type=int64_min", false),
            ("d type=int64_sum", false),
            ("a\nb type=int64_max\nc\nd", true),
        ] {
            match s.apply_text(text, &Names, replace) {
                Err(Error::BadSchema { reason, .. }) => {
                    assert!(reason.contains("cannot change"), "{reason}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        for bad in ["f type=int64", "f type=int64_hll", "f type="] {
            assert_eq!(bad_line(bad).0, 1, "{bad}");
        }
        assert!(bad_line("f type=hyperloglog").1.contains("not supported"));
    }

    #[test]
    fn nested_gc_rules_in_text_and_binary() {
        let nested = "union(max_versions=3,intersection(max_age=7d,max_versions=1))";
        let fams = parse(&format!("f gc={nested} locality=g"), &Names).unwrap();
        let want = GcRule::Union(vec![
            GcRule::MaxVersions(3),
            GcRule::Intersection(vec![
                GcRule::MaxAge(7 * 86_400_000_000),
                GcRule::MaxVersions(1),
            ]),
        ]);
        assert_eq!(fams[0].gc, want);
        let s = TableSchema::with_families(fams);
        let text = format(&s, &Names);
        assert!(
            text.starts_with(&format!("f gc={nested} locality=g ")),
            "{text}"
        );
        assert_eq!(TableSchema::with_families(parse(&text, &Names).unwrap()), s);
        assert_eq!(TableSchema::decode(&s.encode()).unwrap(), s);
        // Flat keys cannot alter a nested rule; a whole rule replaces it.
        assert!(matches!(
            s.apply_text("f max_versions=2", &Names, false),
            Err(Error::BadSchema { line: 1, .. })
        ));
        let (t, _) = s.apply_text("f gc=max_versions=2", &Names, false).unwrap();
        assert_eq!(t.families["f"].gc, GcRule::MaxVersions(2));
        let (t, _) = t.apply_text("f max_age=1d", &Names, false).unwrap();
        assert_eq!(
            t.families["f"].gc,
            GcRule::flat(Some(2), Some(86_400_000_000), GcMode::Union)
        );
        let (t, _) = t
            .apply_text(&format!("f gc={nested}"), &Names, false)
            .unwrap();
        assert_eq!(t.families["f"].gc, want);
        assert_eq!(t.families["f"].locality_group, "g", "other settings kept");
        // A nested rule holds its limits; bad trees name the line.
        for bad in [
            format!("f gc={nested} max_versions=1"),
            format!("f max_age=1d gc={nested}"),
            "f gc=union(max_versions=0)".to_string(),
            "f gc=intersection()".to_string(),
            "f gc=union(banana)".to_string(),
            format!("f gc={nested} gc=union"),
        ] {
            assert!(matches!(bad_line(&bad), (1, _)), "{bad}");
        }
    }
}
