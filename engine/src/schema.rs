//! Table schemas: column families, their garbage-collection rules, locality
//! groups and permissions; the `.schema` text format; the binary encoding METADATA stores.
//!
//! The text format is one family a line (the `.schema` file of README's manual):
//!
//! ```text
//! # comment
//! anchor max_versions=3 max_age=7d gc=union locality=default compression=lz4 \
//!        bloom=row_col block_size=64k in_memory=false mode=0750 owner=alice group=staff
//! ```
//!
//! A line sets every setting of its family; omitted settings take defaults,
//! except that (a) a family that joins a locality group takes the group's
//! compression/bloom/block_size/in_memory when the line does not give them, and
//! (b) when a line is *appended* for an existing family
//! ([`TableSchema::merge_families`] with `replace_all = false`), only the
//! settings the line gives change. [`format`] writes every setting, so
//! `parse(format(s)) == s`.

use crate::data::{BloomKind, Compression};
use crate::duration::{duration_str, parse_digits, parse_duration};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Default block size of a locality group's SSTables.
pub const DEFAULT_BLOCK_SIZE: usize = 64 * 1024;
/// Smallest and largest block size a schema may ask for.
pub const MIN_BLOCK_SIZE: usize = 1024;
pub const MAX_BLOCK_SIZE: usize = 16 * 1024 * 1024;
/// Family and locality group names are at most this long.
pub const MAX_FAMILY_NAME: usize = 64;
/// The locality group a family belongs to unless told otherwise.
pub const DEFAULT_LOCALITY: &str = "default";
/// Default permission bits of a table directory and of a family.
pub const DEFAULT_MODE: u32 = 0o755;

pub use crate::gc_rule::{GcMode, GcRule};

/// One column family's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySchema {
    pub name: String,
    pub gc: GcRule,
    pub locality_group: String,
    pub compression: Compression,
    pub bloom: BloomKind,
    pub block_size: usize,
    pub in_memory: bool,
    /// Permission bits (`chmod` of the family directory).
    pub mode: u32,
    pub owner: u32,
    pub group: u32,
}

impl FamilySchema {
    /// A family with every setting at its default (owner and group 0).
    pub fn new(name: impl Into<String>) -> Self {
        FamilySchema {
            name: name.into(),
            gc: GcRule::default(),
            locality_group: DEFAULT_LOCALITY.to_string(),
            compression: Compression::default(),
            bloom: BloomKind::default(),
            block_size: DEFAULT_BLOCK_SIZE,
            in_memory: false,
            mode: DEFAULT_MODE,
            owner: 0,
            group: 0,
        }
    }

    /// Checks every setting on its own (not the agreement within a locality group).
    pub fn validate(&self) -> Result<()> {
        check_name(&self.name).map_err(|r| Error::invalid(format!("family name: {r}")))?;
        check_name(&self.locality_group)
            .map_err(|r| Error::invalid(format!("family {}: locality group: {r}", self.name)))?;
        self.gc.validate()?;
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&self.block_size) {
            return Err(Error::invalid(format!(
                "family {}: block_size {} is outside 1k..=16m",
                self.name, self.block_size
            )));
        }
        if self.mode > 0o7777 {
            return Err(Error::invalid(format!(
                "family {}: mode {:o} is above 7777",
                self.name, self.mode
            )));
        }
        Ok(())
    }

    fn group_setting(&self, s: Setting) -> GroupValue {
        match s {
            Setting::Compression => GroupValue::Compression(self.compression),
            Setting::Bloom => GroupValue::Bloom(self.bloom),
            Setting::BlockSize => GroupValue::BlockSize(self.block_size),
            _ => GroupValue::InMemory(self.in_memory),
        }
    }

    fn set_group_setting(&mut self, v: GroupValue) {
        match v {
            GroupValue::Compression(c) => self.compression = c,
            GroupValue::Bloom(b) => self.bloom = b,
            GroupValue::BlockSize(n) => self.block_size = n,
            GroupValue::InMemory(m) => self.in_memory = m,
        }
    }

    /// Copies the settings in `given` from `from` into `self`. Flat GC
    /// keys change only their part of a flat rule; they cannot alter a
    /// nested one (the line must give the whole `gc=` tree).
    fn apply(
        &mut self,
        from: &FamilySchema,
        given: &BTreeSet<Setting>,
    ) -> std::result::Result<(), String> {
        let flat_keys = [Setting::MaxVersions, Setting::MaxAge, Setting::Gc];
        if given.contains(&Setting::GcTree) {
            self.gc = from.gc.clone();
        } else if flat_keys.iter().any(|k| given.contains(k)) {
            let (mut v, mut a, mut m) = self.gc.as_flat().ok_or_else(|| {
                format!(
                    "family {} has the nested rule gc={}; give the whole rule as gc=…",
                    self.name,
                    self.gc.to_text()
                )
            })?;
            let (fv, fa, fm) = from.gc.as_flat().unwrap_or((v, a, m));
            if given.contains(&Setting::MaxVersions) {
                v = fv;
            }
            if given.contains(&Setting::MaxAge) {
                a = fa;
            }
            if given.contains(&Setting::Gc) {
                m = fm;
            }
            self.gc = GcRule::flat(v, a, m);
        }
        for s in given {
            match s {
                Setting::MaxVersions | Setting::MaxAge | Setting::Gc | Setting::GcTree => {}
                Setting::Locality => self.locality_group = from.locality_group.clone(),
                Setting::Compression => self.compression = from.compression,
                Setting::Bloom => self.bloom = from.bloom,
                Setting::BlockSize => self.block_size = from.block_size,
                Setting::InMemory => self.in_memory = from.in_memory,
                Setting::Mode => self.mode = from.mode,
                Setting::Owner => self.owner = from.owner,
                Setting::Group => self.group = from.group,
            }
        }
        Ok(())
    }
}

/// The settings a family shares with the rest of its locality group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupValue {
    Compression(Compression),
    Bloom(BloomKind),
    BlockSize(usize),
    InMemory(bool),
}

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

/// A locality group: families whose data is stored in the same SSTables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalityGroup {
    pub name: String,
    pub compression: Compression,
    pub bloom: BloomKind,
    pub block_size: usize,
    pub in_memory: bool,
    /// Sorted family names.
    pub families: Vec<String>,
}

impl LocalityGroup {
    /// A group with default settings and no families (e.g. for data of a
    /// group that is no longer in the schema).
    pub fn named(name: impl Into<String>) -> Self {
        let d = FamilySchema::new("");
        LocalityGroup {
            name: name.into(),
            compression: d.compression,
            bloom: d.bloom,
            block_size: d.block_size,
            in_memory: d.in_memory,
            families: Vec::new(),
        }
    }
}

/// A table's families and the table directory's permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    pub families: BTreeMap<String, FamilySchema>,
    pub owner: u32,
    pub group: u32,
    /// Permission bits of the table directory.
    pub mode: u32,
}

impl Default for TableSchema {
    fn default() -> Self {
        TableSchema {
            families: BTreeMap::new(),
            owner: 0,
            group: 0,
            mode: DEFAULT_MODE,
        }
    }
}

impl TableSchema {
    /// A schema with these families and default table permissions.
    pub fn with_families(families: impl IntoIterator<Item = FamilySchema>) -> Self {
        TableSchema {
            families: families.into_iter().map(|f| (f.name.clone(), f)).collect(),
            ..Default::default()
        }
    }

    pub fn family(&self, name: &str) -> Option<&FamilySchema> {
        self.families.get(name)
    }

    /// The locality groups, sorted by name; each group's families sorted by name.
    /// A group's settings are those of its families (validation makes them agree).
    pub fn locality_groups(&self) -> Vec<LocalityGroup> {
        let mut groups: BTreeMap<&str, LocalityGroup> = BTreeMap::new();
        for f in self.families.values() {
            groups
                .entry(f.locality_group.as_str())
                .or_insert_with(|| LocalityGroup {
                    name: f.locality_group.clone(),
                    compression: f.compression,
                    bloom: f.bloom,
                    block_size: f.block_size,
                    in_memory: f.in_memory,
                    families: Vec::new(),
                })
                .families
                .push(f.name.clone());
        }
        groups.into_values().collect()
    }

    /// Checks every family and that families sharing a locality group agree
    /// on its settings.
    pub fn validate(&self) -> Result<()> {
        if self.mode > 0o7777 {
            return Err(Error::invalid(format!(
                "table mode {:o} is above 7777",
                self.mode
            )));
        }
        let mut first: HashMap<&str, &FamilySchema> = HashMap::new();
        for (name, f) in &self.families {
            if name != &f.name {
                return Err(Error::invalid(format!(
                    "family {:?} stored under name {name:?}",
                    f.name
                )));
            }
            f.validate()?;
            match first.get(f.locality_group.as_str()) {
                None => {
                    first.insert(f.locality_group.as_str(), f);
                }
                Some(g) => {
                    for s in GROUP_SETTINGS {
                        if g.group_setting(s) != f.group_setting(s) {
                            return Err(Error::invalid(group_conflict(f, s, g)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies parsed `.schema` lines.
    ///
    /// With `replace_all = false` (appending lines to the file) each line adds
    /// its family with defaults for what it omits, or alters an existing
    /// family, changing only the settings the line gives; other families are
    /// kept. With `replace_all = true` (writing the whole file) the result holds
    /// exactly the given families, each with defaults for what its line omits
    /// (permissions included: `mode=0755`, the table's owner and group).
    /// Either way a family that joins a locality group without giving the
    /// group's compression/bloom/block_size/in_memory takes them from the
    /// group (a family moving into an empty group keeps its own), and new
    /// families' owner and group default to the table's. Returns the new schema and the
    /// families it dropped (the caller refuses the change if any holds data).
    /// Errors name the offending line; on error nothing is changed.
    pub fn merge_families(
        &self,
        lines: Vec<FamilyLine>,
        replace_all: bool,
    ) -> Result<(TableSchema, Vec<String>)> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for l in &lines {
            if let Some(prev) = seen.insert(l.family.name.as_str(), l.line) {
                return Err(bad(
                    l.line,
                    format!("family {} is already given on line {prev}", l.family.name),
                ));
            }
        }
        let mut result: BTreeMap<String, FamilySchema> = if replace_all {
            BTreeMap::new()
        } else {
            self.families.clone()
        };
        // Which group settings of which family are fixed ("anchored"), and by
        // which line (None: by the family's current settings).
        let mut anchors: Vec<(Option<usize>, String, Setting)> = Vec::new();
        let mut touched: BTreeSet<&str> = BTreeSet::new();
        for l in &lines {
            let name = l.family.name.as_str();
            touched.insert(name);
            let existing = if replace_all {
                None
            } else {
                self.families.get(name)
            };
            let mut f = match existing {
                Some(e) => e.clone(),
                None => {
                    let mut d = FamilySchema::new(name);
                    d.owner = self.owner;
                    d.group = self.group;
                    d
                }
            };
            f.apply(&l.family, &l.given)
                .map_err(|reason| bad(l.line, reason))?;
            let stays = existing.is_some_and(|e| e.locality_group == f.locality_group);
            for s in GROUP_SETTINGS {
                if l.given.contains(&s) {
                    anchors.push((Some(l.line), name.to_string(), s));
                } else if stays {
                    anchors.push((None, name.to_string(), s));
                }
            }
            result.insert(name.to_string(), f);
        }
        for (name, f) in &result {
            if !touched.contains(name.as_str()) {
                for s in GROUP_SETTINGS {
                    anchors.push((None, f.name.clone(), s));
                }
            }
        }
        // Current settings anchor first, so that a conflict blames a line.
        anchors.sort_by_key(|(line, _, _)| line.map_or(0, |l| l + 1));
        let mut group_values: HashMap<(String, Setting), (GroupValue, String)> = HashMap::new();
        for (line, name, s) in &anchors {
            let Some(f) = result.get(name) else { continue };
            let v = f.group_setting(*s);
            let k = (f.locality_group.clone(), *s);
            match group_values.get(&k) {
                None => {
                    group_values.insert(k, (v, name.clone()));
                }
                Some((gv, other)) if *gv != v => {
                    let o = result.get(other).unwrap_or(f);
                    return Err(bad(line.unwrap_or(0), group_conflict(f, *s, o)));
                }
                Some(_) => {}
            }
        }
        // Families that float take their group's anchored value; in a group
        // with none, the first floating family (in line order) keeps its own
        // value (defaults for a new family, current settings for an altered
        // one) and the others follow it.
        let anchored: BTreeSet<(&str, Setting)> =
            anchors.iter().map(|(_, n, s)| (n.as_str(), *s)).collect();
        for l in &lines {
            let name = l.family.name.as_str();
            let Some(f) = result.get_mut(name) else {
                continue;
            };
            for s in GROUP_SETTINGS {
                if anchored.contains(&(name, s)) {
                    continue;
                }
                match group_values.get(&(f.locality_group.clone(), s)) {
                    Some((v, _)) => f.set_group_setting(*v),
                    None => {
                        group_values.insert(
                            (f.locality_group.clone(), s),
                            (f.group_setting(s), name.to_string()),
                        );
                    }
                }
            }
        }
        let out = TableSchema {
            families: result,
            owner: self.owner,
            group: self.group,
            mode: self.mode,
        };
        out.validate()
            .map_err(|e| bad(0, format!("resulting schema is invalid: {e}")))?;
        let dropped = self
            .families
            .keys()
            .filter(|n| !out.families.contains_key(*n))
            .cloned()
            .collect();
        Ok((out, dropped))
    }

    /// Parses `.schema` text and applies it with [`Self::merge_families`].
    pub fn apply_text(
        &self,
        text: &str,
        resolver: &dyn NameResolver,
        replace_all: bool,
    ) -> Result<(TableSchema, Vec<String>)> {
        self.merge_families(parse_lines(text, resolver)?, replace_all)
    }

    /// Binary encoding, as METADATA stores it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.families.len() * 64);
        out.extend_from_slice(ENCODING_MAGIC);
        put_u32(&mut out, self.owner);
        put_u32(&mut out, self.group);
        put_u32(&mut out, self.mode);
        put_u32(&mut out, self.families.len() as u32);
        for f in self.families.values() {
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
        }
        out
    }

    /// Decodes [`Self::encode`]'s output; anything malformed is `Error::Corruption`.
    pub fn decode(buf: &[u8]) -> Result<TableSchema> {
        let mut r = Reader { buf };
        if r.take(ENCODING_MAGIC.len())? != ENCODING_MAGIC {
            return Err(Error::corruption("table schema: bad magic"));
        }
        let owner = r.u32()?;
        let group = r.u32()?;
        let mode = r.u32()?;
        let n = r.u32()?;
        let mut families = BTreeMap::new();
        for _ in 0..n {
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
            let f = FamilySchema {
                name: name.clone(),
                gc,
                locality_group,
                compression,
                bloom,
                block_size,
                in_memory,
                mode: r.u32()?,
                owner: r.u32()?,
                group: r.u32()?,
            };
            if families.insert(name.clone(), f).is_some() {
                return Err(Error::corruption(format!(
                    "table schema: family {name} twice"
                )));
            }
        }
        if !r.buf.is_empty() {
            return Err(Error::corruption("table schema: trailing bytes"));
        }
        let s = TableSchema {
            families,
            owner,
            group,
            mode,
        };
        s.validate()
            .map_err(|e| Error::corruption(format!("table schema: {e}")))?;
        Ok(s)
    }
}

const ENCODING_MAGIC: &[u8] = b"BTSCHEMA1";

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

/// One setting of a `.schema` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setting {
    MaxVersions,
    MaxAge,
    Gc,
    Locality,
    Compression,
    Bloom,
    BlockSize,
    InMemory,
    Mode,
    Owner,
    Group,
    /// `gc=` given as a nested rule (not a key of its own).
    GcTree,
}

/// The settings shared by a locality group.
const GROUP_SETTINGS: [Setting; 4] = [
    Setting::Compression,
    Setting::Bloom,
    Setting::BlockSize,
    Setting::InMemory,
];

const ALL_SETTINGS: [Setting; 11] = [
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
        }
    }

    pub fn from_key(k: &str) -> Option<Setting> {
        ALL_SETTINGS.into_iter().find(|s| s.key() == k)
    }
}

/// One parsed `.schema` line: the family it describes (omitted settings at
/// their defaults) and which settings the line actually gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyLine {
    /// 1-based line number in the text.
    pub line: usize,
    pub family: FamilySchema,
    pub given: BTreeSet<Setting>,
}

/// Maps user and group names to ids and back (the filesystem layer implements
/// it with getpwnam/getgrnam).
pub trait NameResolver {
    fn uid(&self, name: &str) -> Option<u32>;
    fn gid(&self, name: &str) -> Option<u32>;
    fn user_name(&self, uid: u32) -> Option<String>;
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

fn bad(line: usize, reason: impl Into<String>) -> Error {
    Error::BadSchema {
        line,
        reason: reason.into(),
    }
}

fn group_conflict(f: &FamilySchema, s: Setting, other: &FamilySchema) -> String {
    format!(
        "family {}: {} disagrees with {} of family {} in locality group {}; \
         families sharing a locality group must agree on compression, bloom, \
         block_size and in_memory",
        f.name,
        f.group_setting(s),
        other.group_setting(s),
        other.name,
        f.locality_group
    )
}

/// Checks a family or locality group name: 1..=64 bytes of
/// `[A-Za-z0-9_.-]`, not starting with `.` (so it is a plain, visible filename).
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name.len() > MAX_FAMILY_NAME {
        return Err(format!(
            "name {name:?} is {} bytes; the limit is {MAX_FAMILY_NAME}",
            name.len()
        ));
    }
    if name.starts_with('.') {
        return Err(format!("name {name:?} starts with '.'"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "name {name:?} contains {c:?}; allowed are A-Z a-z 0-9 _ . -"
        ));
    }
    Ok(())
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
pub fn parse(text: &str, resolver: &dyn NameResolver) -> Result<Vec<FamilySchema>> {
    let lines = parse_lines(text, resolver)?;
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
/// parsing the text gives the same families back.
pub fn format(schema: &TableSchema, resolver: &dyn NameResolver) -> String {
    let mut out = String::new();
    for f in schema.families.values() {
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
    format!(
        "{} {gc} locality={} compression={} \
         bloom={} block_size={} in_memory={} mode={:04o} owner={} group={}",
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
mod tests {
    use super::*;

    /// A resolver with one user and one group.
    struct Names;
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

    fn bad_line(text: &str) -> (usize, String) {
        match parse(text, &Names) {
            Err(Error::BadSchema { line, reason }) => (line, reason),
            other => panic!("expected BadSchema for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn gc_union_and_intersection() {
        let day = 86_400_000_000u64;
        let now = 10 * day;
        let union = GcRule::flat(Some(2), Some(day), GcMode::Union);
        assert!(!union.collects(0, now, now));
        assert!(
            !union.collects(1, now - day, now),
            "exactly max_age old is kept"
        );
        assert!(union.collects(1, now - day - 1, now), "older than max_age");
        assert!(union.collects(2, now, now), "beyond max_versions");
        let inter = GcRule::flat(Some(2), Some(day), GcMode::Intersection);
        assert!(
            !inter.collects(1, now - 5 * day, now),
            "old but within count"
        );
        assert!(!inter.collects(5, now, now), "beyond count but young");
        assert!(inter.collects(2, now - 2 * day, now), "both");
        let only_count = GcRule::flat(Some(2), None, GcMode::Intersection);
        assert!(
            !only_count.collects(100, 0, now),
            "a None limit never collects"
        );
        assert!(GcRule::default().collects(3, now, now));
        assert!(!GcRule::default().collects(2, 0, now));
        assert!(!GcRule::KEEP_ALL.collects(1_000_000, 0, now));
        assert!(
            !union.collects(0, now + day, now),
            "future timestamps are young"
        );
        assert!(union.collects_by_age_alone(0, now));
        assert!(!inter.collects_by_age_alone(0, now));
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
        assert_eq!(fams[1], FamilySchema::new("contents"));
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
    fn locality_groups_must_agree() {
        let (line, reason) =
            bad_line("a locality=g compression=none\nb\nc locality=g compression=lz4\n");
        assert_eq!(line, 3);
        assert!(reason.contains("locality group g"), "{reason}");
        // A family joining a group takes the group's settings it does not give.
        let f = parse(
            "a locality=g compression=none block_size=8k\nb locality=g\n",
            &Names,
        )
        .unwrap();
        assert_eq!(f[1].compression, Compression::None);
        assert_eq!(f[1].block_size, 8192);
        let s = TableSchema::with_families(f);
        let named = LocalityGroup::named("x");
        assert_eq!(
            (named.block_size, named.families.len()),
            (DEFAULT_BLOCK_SIZE, 0)
        );
        let groups = s.locality_groups();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].families, vec!["a", "b"]);
        assert_eq!(groups[0].compression, Compression::None);
        let mut bad = s.clone();
        bad.families.get_mut("b").unwrap().in_memory = true;
        assert!(matches!(bad.validate(), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn locality_groups_sorted() {
        let s = TableSchema::with_families(
            parse("z\ny locality=a in_memory=true\nx locality=m\nw\n", &Names).unwrap(),
        );
        let g = s.locality_groups();
        let names: Vec<_> = g.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, vec!["a", "default", "m"]);
        assert_eq!(g[1].families, vec!["w", "z"]);
        assert!(g[0].in_memory);
        assert!(!g[1].in_memory);
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
    fn merge_appends_and_alters_only_given_settings() {
        let base = TableSchema {
            owner: 1000,
            group: 50,
            mode: 0o700,
            ..TableSchema::with_families(parse("a max_versions=7 mode=0700\nb\n", &Names).unwrap())
        };
        let (s, dropped) = base.apply_text("a max_age=1h\nc\n", &Names, false).unwrap();
        assert!(dropped.is_empty());
        let a = s.family("a").unwrap();
        assert_eq!(a.gc.max_versions(), Some(7), "kept");
        assert_eq!(a.gc.max_age_micros(), Some(3_600_000_000), "altered");
        assert_eq!(a.mode, 0o700, "kept");
        assert!(s.family("b").is_some());
        let c = s.family("c").unwrap();
        assert_eq!(
            (c.owner, c.group),
            (1000, 50),
            "new families belong to the table's owner"
        );
        assert_eq!(c.gc, GcRule::default());
        assert_eq!((s.owner, s.group, s.mode), (1000, 50, 0o700));
    }

    #[test]
    fn merge_replace_all_drops_and_resets() {
        let base = TableSchema::with_families(parse("a max_versions=7\nb\nc\n", &Names).unwrap());
        let (s, dropped) = base.apply_text("a\nd\n", &Names, true).unwrap();
        assert_eq!(dropped, vec!["b", "c"]);
        assert_eq!(s.families.keys().collect::<Vec<_>>(), vec!["a", "d"]);
        assert_eq!(
            s.family("a").unwrap().gc.max_versions(),
            Some(3),
            "a line sets every setting"
        );
    }

    #[test]
    fn merge_locality_rules() {
        let base = TableSchema::with_families(
            parse(
                "a locality=g compression=none\nb locality=g\nsolo\n",
                &Names,
            )
            .unwrap(),
        );
        // A new family joining g inherits its settings.
        let (s, _) = base.apply_text("c locality=g", &Names, false).unwrap();
        assert_eq!(s.family("c").unwrap().compression, Compression::None);
        // Changing one member of a shared group is refused, naming the line.
        match base.apply_text("# x\na compression=lz4", &Names, false) {
            Err(Error::BadSchema { line, reason }) => {
                assert_eq!(line, 2);
                assert!(reason.contains("family b"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // A group of one can change by appending.
        let (s, _) = base.apply_text("solo bloom=none", &Names, false).unwrap();
        assert_eq!(s.family("solo").unwrap().bloom, BloomKind::None);
        // Moving a family into another group takes that group's settings.
        let (s, _) = base.apply_text("solo locality=g", &Names, false).unwrap();
        assert_eq!(s.family("solo").unwrap().compression, Compression::None);
        // Moving families into an empty group keeps the first one's settings.
        let (s, _) = base
            .apply_text(
                "a locality=new\nb locality=new\nsolo locality=new",
                &Names,
                false,
            )
            .unwrap();
        s.validate().unwrap();
        let g = &s.locality_groups()[0];
        assert_eq!((g.name.as_str(), g.families.len()), ("new", 3));
        assert_eq!(g.compression, Compression::None);
        // Writing the whole file may change a whole group at once.
        let (s, _) = base
            .apply_text(
                "a locality=g compression=lz4\nb locality=g compression=lz4\n",
                &Names,
                true,
            )
            .unwrap();
        assert_eq!(s.locality_groups()[0].compression, Compression::Lz4);
        // Nothing changes on error.
        assert!(base.apply_text("a\nb bloom=bad\n", &Names, true).is_err());
    }

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

    #[test]
    fn api_validation() {
        let mut f = FamilySchema::new("f");
        f.gc = GcRule::MaxVersions(0);
        assert!(matches!(f.validate(), Err(Error::BadGcRule(_))));
        let mut f = FamilySchema::new("f");
        f.block_size = 10;
        assert!(f.validate().is_err());
        assert!(FamilySchema::new("a/b").validate().is_err());
        assert!(FamilySchema::new("ok").validate().is_ok());
    }
}
