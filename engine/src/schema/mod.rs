//! Table schemas: column families, their garbage-collection rules, locality
//! groups and permissions; the `.schema` text format; the binary encoding METADATA stores.
//!
//! This file holds the model and its checks; `text` parses and prints the
//! text form, `codec` writes and reads the binary one.
//!
//! The text format is one family a line (the `.schema` file, docs/mount.md):
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
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Default block size of a locality group's SSTables.
pub const DEFAULT_BLOCK_SIZE: usize = 64 * 1024;
/// Smallest block size a schema may ask for.
pub const MIN_BLOCK_SIZE: usize = 1024;
/// Largest block size a schema may ask for.
pub const MAX_BLOCK_SIZE: usize = 16 * 1024 * 1024;
/// Family and locality group names are at most this long.
pub const MAX_FAMILY_NAME: usize = 64;
/// The locality group a family belongs to unless told otherwise.
pub const DEFAULT_LOCALITY: &str = "default";
/// Default permission bits of a table directory and of a family.
pub const DEFAULT_MODE: u32 = 0o755;

pub use crate::aggregate::Aggregator;
pub use crate::gc_rule::{GcMode, GcRule};
pub use changes::{CHANGES_FAMILY, CHANGES_GROUP, MAX_CHANGE_RETENTION};
pub use text::{format, format_family, parse, parse_lines, NameResolver, NumericNames};

mod changes;
mod codec;
mod protect;
mod table_line;
mod text;

/// One column family's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySchema {
    /// The family's name, as in `family:qualifier`.
    pub name: String,
    /// Which versions garbage collection removes.
    pub gc: GcRule,
    /// The locality group whose SSTables hold its data.
    pub locality_group: String,
    /// Block compression of its locality group.
    pub compression: Compression,
    /// Bloom filters of its locality group.
    pub bloom: BloomKind,
    /// SSTable block size of its locality group, in bytes.
    pub block_size: usize,
    /// Whether its locality group is held in memory.
    pub in_memory: bool,
    /// Permission bits (`chmod` of the family directory).
    pub mode: u32,
    /// Owner (uid) of the family directory.
    pub owner: u32,
    /// Group (gid) of the family directory.
    pub group: u32,
    /// The aggregator of an aggregate (Int64) family; `None` for a plain
    /// family of bytes. Fixed when the family is made.
    pub aggregate: Option<Aggregator>,
    /// Where the family comes in the table's creation order (see
    /// [`TableSchema::ordered`]); [`UNPLACED`] for one not yet in a table.
    pub rank: u32,
}

/// The rank of a family not yet placed in its table's creation order: it
/// comes after every placed family (see [`TableSchema::add_family`]).
pub const UNPLACED: u32 = u32::MAX;

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
            aggregate: None,
            rank: UNPLACED,
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
                Setting::Type => self.aggregate = from.aggregate,
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

/// A locality group: families whose data is stored in the same SSTables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalityGroup {
    /// The group's name.
    pub name: String,
    /// Block compression of its SSTables.
    pub compression: Compression,
    /// Bloom filters of its SSTables.
    pub bloom: BloomKind,
    /// Block size of its SSTables, in bytes.
    pub block_size: usize,
    /// Whether its SSTables are held in memory.
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
    /// The families, by name.
    pub families: BTreeMap<String, FamilySchema>,
    /// Owner (uid) of the table directory.
    pub owner: u32,
    /// Group (gid) of the table directory.
    pub group: u32,
    /// Permission bits of the table directory.
    pub mode: u32,
    /// Whether deleting the table or dropping a family is refused
    /// (Cloud Bigtable's `deletion_protection`; see `protect.rs`).
    pub deletion_protection: bool,
    /// How long the table's change log keeps each change, in microseconds;
    /// 0: no change log (see `changes.rs`, docs/changes.md).
    pub change_retention: u64,
}

impl Default for TableSchema {
    fn default() -> Self {
        TableSchema {
            families: BTreeMap::new(),
            owner: 0,
            group: 0,
            mode: DEFAULT_MODE,
            deletion_protection: false,
            change_retention: 0,
        }
    }
}

impl TableSchema {
    /// A schema with these families, made in this order, and default table
    /// permissions.
    pub fn with_families(families: impl IntoIterator<Item = FamilySchema>) -> Self {
        let mut s = TableSchema::default();
        for f in families {
            s.add_family(f);
        }
        s.renumber();
        s
    }

    /// Adds (or replaces) `f` as the family made last: Cloud Bigtable
    /// returns a table's families in the order they were made, and a row's
    /// cells family by family in that order (CellsPerRowLimitFilter counts
    /// them so).
    pub fn add_family(&mut self, mut f: FamilySchema) {
        f.rank = self.next_rank();
        self.families.insert(f.name.clone(), f);
    }

    /// The rank a family made now takes.
    fn next_rank(&self) -> u32 {
        self.families
            .values()
            .map(|f| f.rank)
            .filter(|&r| r != UNPLACED)
            .max()
            .map_or(0, |r| r + 1)
    }

    /// The families in creation order (by rank, then name: schemas stored
    /// before the order was kept read as name order).
    pub fn ordered(&self) -> Vec<&FamilySchema> {
        let mut v: Vec<&FamilySchema> = self.families.values().collect();
        v.sort_by(|a, b| (a.rank, &a.name).cmp(&(b.rank, &b.name)));
        v
    }

    /// Renumbers the ranks 0, 1, … in creation order, unplaced families
    /// last by name: what the stored form reads back as, so that a schema
    /// compares equal to itself read back.
    pub fn renumber(&mut self) {
        let order: Vec<String> = self.ordered().iter().map(|f| f.name.clone()).collect();
        for (i, name) in order.iter().enumerate() {
            if let Some(f) = self.families.get_mut(name) {
                f.rank = i as u32;
            }
        }
    }

    /// A family's place in creation order, for sorting a row's cells
    /// (a family not in the schema last).
    pub fn family_rank(&self, name: &str) -> u32 {
        self.families.get(name).map_or(UNPLACED, |f| f.rank)
    }

    /// Whether the families were made in name order, so that a row's cells
    /// in key order are in the filters' order too (see [`Self::order_row`]).
    pub fn ranks_follow_names(&self) -> bool {
        let mut ranks = self.families.values().map(|f| f.rank);
        let Some(mut prev) = ranks.next() else {
            return true;
        };
        ranks.all(|r| {
            let ok = prev <= r;
            prev = r;
            ok
        })
    }

    /// Puts one row's cells (read in family name order) family by family in
    /// creation order, keeping their order within a family.
    pub fn order_row(&self, cells: &mut [crate::data::Cell]) {
        // Most rows are in order already (one family, or families made in
        // name order): look ranks up only where the family changes.
        let sorted = cells.windows(2).all(|w| {
            w[0].family == w[1].family
                || self.family_rank(&w[0].family) <= self.family_rank(&w[1].family)
        });
        if !sorted {
            cells.sort_by_key(|c| self.family_rank(&c.family));
        }
    }

    /// The family named `name`, if the table has it.
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
        let mut out: Vec<LocalityGroup> = groups.into_values().collect();
        if let Some(g) = self.changes_group() {
            out.push(g);
        }
        out
    }

    /// Checks every family and that families sharing a locality group agree
    /// on its settings.
    pub fn validate(&self) -> Result<()> {
        self.check_change_retention()?;
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
        // New families are made in line order, after the existing ones.
        let mut next_rank = self.next_rank();
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
            f.rank = match self.families.get(name) {
                Some(e) => e.rank,
                None => {
                    next_rank += 1;
                    next_rank - 1
                }
            };
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
        let mut out = TableSchema {
            families: result,
            owner: self.owner,
            group: self.group,
            mode: self.mode,
            deletion_protection: self.deletion_protection,
            change_retention: self.change_retention,
        };
        out.renumber();
        out.validate()
            .map_err(|e| bad(0, format!("resulting schema is invalid: {e}")))?;
        for l in &lines {
            let name = l.family.name.as_str();
            if let (Some(old), Some(new)) = (self.families.get(name), out.families.get(name)) {
                if old.aggregate != new.aggregate {
                    return Err(bad(l.line, type_change(old, new)));
                }
            }
        }
        let dropped = self
            .families
            .keys()
            .filter(|n| !out.families.contains_key(*n))
            .cloned()
            .collect();
        Ok((out, dropped))
    }
}

/// One setting of a `.schema` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setting {
    /// `max_versions`: the flat rule's limit on versions.
    MaxVersions,
    /// `max_age`: the flat rule's limit on age.
    MaxAge,
    /// `gc=union|intersection`: how the flat rule's limits combine.
    Gc,
    /// `locality`: the family's locality group.
    Locality,
    /// `compression`: block compression.
    Compression,
    /// `bloom`: which Bloom filters.
    Bloom,
    /// `block_size`: SSTable block size.
    BlockSize,
    /// `in_memory`: whether the group is held in memory.
    InMemory,
    /// `mode`: permission bits of the family directory.
    Mode,
    /// `owner`: user of the family directory.
    Owner,
    /// `group`: group of the family directory.
    Group,
    /// `gc=` given as a nested rule (not a key of its own).
    GcTree,
    /// `type`: the value type (`bytes`, or an Int64 aggregate).
    Type,
}

/// The settings shared by a locality group.
const GROUP_SETTINGS: [Setting; 4] = [
    Setting::Compression,
    Setting::Bloom,
    Setting::BlockSize,
    Setting::InMemory,
];

/// One parsed `.schema` line: the family it describes (omitted settings at
/// their defaults) and which settings the line actually gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyLine {
    /// 1-based line number in the text.
    pub line: usize,
    /// The family as the line describes it.
    pub family: FamilySchema,
    /// The settings the line gave (the others are defaults).
    pub given: BTreeSet<Setting>,
}

fn bad(line: usize, reason: impl Into<String>) -> Error {
    Error::BadSchema {
        line,
        reason: reason.into(),
    }
}

/// Why a family's type cannot change (Cloud Bigtable fixes it at creation).
pub fn type_change(old: &FamilySchema, new: &FamilySchema) -> String {
    format!(
        "family {} has type={}, which cannot change to {} (a family's type is fixed \
         when it is made; drop the family and make it again)",
        old.name,
        type_name(old.aggregate),
        type_name(new.aggregate),
    )
}

/// The `.schema` name of a family's value type.
pub fn type_name(aggregate: Option<Aggregator>) -> &'static str {
    aggregate.map_or("bytes", Aggregator::type_name)
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

#[cfg(test)]
mod tests {
    use super::text::tests::{bad_line, Names};
    use super::*;

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
