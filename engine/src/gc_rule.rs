//! Garbage-collection rules as Cloud Bigtable's `GcRule` tree: a limit on
//! versions, a limit on age, and unions and intersections of rules nested to
//! any depth up to [`MAX_GC_DEPTH`].
//!
//! The older flat form (`max_versions`, `max_age`, `gc=union|intersection`)
//! is a particular tree ([`GcRule::flat`]); rules of that shape are written
//! in the flat form, so schemas stored before trees existed read back the
//! same. A flat intersection with a missing limit never collects (as it
//! always has): it is stored as an intersection with an empty union.

use crate::error::{Error, Result};

/// How the two limits of a flat rule combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GcMode {
    /// A version is collected if either limit collects it.
    #[default]
    Union,
    /// A version is collected only if both limits collect it (so a rule with
    /// a missing limit never collects anything).
    Intersection,
}

/// Deepest nesting of a rule.
pub const MAX_GC_DEPTH: usize = 16;
/// Most rules in one tree.
pub const MAX_GC_NODES: usize = 256;

/// A family's garbage-collection rule (`google.bigtable.admin.v2.GcRule`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GcRule {
    /// Keep at most this many newest versions of each column (`max_num_versions`).
    MaxVersions(u32),
    /// Collect versions whose age (`now - timestamp`) is greater than this,
    /// in microseconds (`max_age`).
    MaxAge(u64),
    /// Collected if any member collects it; with no member, nothing is.
    Union(Vec<GcRule>),
    /// Collected if every member collects it; at least one member.
    Intersection(Vec<GcRule>),
}

impl Default for GcRule {
    /// Three versions, no age limit.
    fn default() -> Self {
        GcRule::MaxVersions(3)
    }
}

impl GcRule {
    /// A rule that keeps everything (an empty union).
    pub const KEEP_ALL: GcRule = GcRule::Union(Vec::new());

    /// The rule of the flat settings: a `None` limit never collects.
    pub fn flat(max_versions: Option<u32>, max_age_micros: Option<u64>, mode: GcMode) -> GcRule {
        let v = max_versions.map(GcRule::MaxVersions);
        let a = max_age_micros.map(GcRule::MaxAge);
        match (mode, v, a) {
            (GcMode::Union, Some(v), Some(a)) => GcRule::Union(vec![v, a]),
            (GcMode::Union, Some(r), None) | (GcMode::Union, None, Some(r)) => r,
            (GcMode::Union, None, None) => GcRule::KEEP_ALL,
            (GcMode::Intersection, v, a) => GcRule::Intersection(vec![
                v.unwrap_or(GcRule::KEEP_ALL),
                a.unwrap_or(GcRule::KEEP_ALL),
            ]),
        }
    }

    /// The flat settings of a rule that has that shape (see [`GcRule::flat`]).
    pub fn as_flat(&self) -> Option<(Option<u32>, Option<u64>, GcMode)> {
        let versions = |r: &GcRule| match r {
            GcRule::MaxVersions(n) => Some(Some(*n)),
            r if *r == GcRule::KEEP_ALL => Some(None),
            _ => None,
        };
        let age = |r: &GcRule| match r {
            GcRule::MaxAge(a) => Some(Some(*a)),
            r if *r == GcRule::KEEP_ALL => Some(None),
            _ => None,
        };
        match self {
            GcRule::MaxVersions(n) => Some((Some(*n), None, GcMode::Union)),
            GcRule::MaxAge(a) => Some((None, Some(*a), GcMode::Union)),
            GcRule::Union(v) if v.is_empty() => Some((None, None, GcMode::Union)),
            GcRule::Union(v) => match v.as_slice() {
                [GcRule::MaxVersions(n), GcRule::MaxAge(a)] => {
                    Some((Some(*n), Some(*a), GcMode::Union))
                }
                _ => None,
            },
            GcRule::Intersection(v) => match v.as_slice() {
                [x, y] => Some((versions(x)?, age(y)?, GcMode::Intersection)),
                _ => None,
            },
        }
    }

    /// The version limit of a flat rule (None for a tree or no limit).
    pub fn max_versions(&self) -> Option<u32> {
        self.as_flat().and_then(|f| f.0)
    }

    /// The age limit of a flat rule (None for a tree or no limit).
    pub fn max_age_micros(&self) -> Option<u64> {
        self.as_flat().and_then(|f| f.1)
    }

    /// Whether any part of the rule looks at ages: if not, [`Self::collects`]
    /// ignores the time, and a reader need not read the clock.
    pub fn uses_age(&self) -> bool {
        match self {
            GcRule::MaxVersions(_) => false,
            GcRule::MaxAge(_) => true,
            GcRule::Union(v) | GcRule::Intersection(v) => v.iter().any(GcRule::uses_age),
        }
    }

    /// How a flat rule combines its limits (Union for a tree).
    pub fn mode(&self) -> GcMode {
        self.as_flat().map_or(GcMode::Union, |f| f.2)
    }

    /// Whether the version at `index_newest_first` (0 = newest visible version
    /// of its column) with `timestamp` is garbage at time `now_micros`.
    ///
    /// Every rule is monotone along newest-first order (indices grow, ages do
    /// not shrink, and unions and intersections of monotone tests are
    /// monotone), so the collected versions of a column always form a
    /// suffix: once one is collected, every older one is too. Readers and
    /// compactions rely on that to skip the rest of a column.
    pub fn collects(&self, index_newest_first: usize, timestamp: u64, now_micros: u64) -> bool {
        match self {
            GcRule::MaxVersions(n) => index_newest_first >= *n as usize,
            GcRule::MaxAge(age) => now_micros.saturating_sub(timestamp) > *age,
            GcRule::Union(v) => v
                .iter()
                .any(|r| r.collects(index_newest_first, timestamp, now_micros)),
            GcRule::Intersection(v) => {
                !v.is_empty()
                    && v.iter()
                        .all(|r| r.collects(index_newest_first, timestamp, now_micros))
            }
        }
    }

    /// Whether the rule collects a version whatever the other versions of
    /// its column: a compaction that does not see every version of a column
    /// may apply exactly this part. By monotony, that is being collected as
    /// the newest version.
    pub fn collects_by_age_alone(&self, timestamp: u64, now_micros: u64) -> bool {
        self.collects(0, timestamp, now_micros)
    }

    /// Checks the limits, the depth and the size.
    pub fn validate(&self) -> Result<()> {
        let mut nodes = 0;
        self.check(0, &mut nodes)
    }

    fn check(&self, depth: usize, nodes: &mut usize) -> Result<()> {
        *nodes += 1;
        if depth >= MAX_GC_DEPTH {
            return Err(bad(format!("nested deeper than {MAX_GC_DEPTH} levels")));
        }
        if *nodes > MAX_GC_NODES {
            return Err(bad(format!("more than {MAX_GC_NODES} rules")));
        }
        match self {
            GcRule::MaxVersions(0) => Err(bad("max_versions must be at least 1")),
            GcRule::MaxAge(0) => Err(bad("max_age must be positive")),
            GcRule::Intersection(v) if v.is_empty() => {
                Err(bad("an intersection needs at least one rule"))
            }
            GcRule::Union(v) | GcRule::Intersection(v) => {
                v.iter().try_for_each(|r| r.check(depth + 1, nodes))
            }
            _ => Ok(()),
        }
    }

    /// The nested text form: `union(max_versions=3,intersection(max_age=7d,max_versions=1))`.
    pub fn to_text(&self) -> String {
        match self {
            GcRule::MaxVersions(n) => format!("max_versions={n}"),
            GcRule::MaxAge(a) => format!("max_age={}", crate::duration::duration_str(*a)),
            GcRule::Union(v) | GcRule::Intersection(v) => {
                let name = if matches!(self, GcRule::Union(_)) {
                    "union"
                } else {
                    "intersection"
                };
                let parts: Vec<String> = v.iter().map(GcRule::to_text).collect();
                format!("{name}({})", parts.join(","))
            }
        }
    }

    /// Parses [`GcRule::to_text`]'s form.
    pub fn parse_text(text: &str) -> std::result::Result<GcRule, String> {
        let mut p = TextParser {
            s: text.as_bytes(),
            i: 0,
        };
        let r = p.rule(0)?;
        if p.i != text.len() {
            return Err(format!("unexpected {:?} in gc rule", &text[p.i..]));
        }
        r.validate().map_err(|e| e.to_string())?;
        Ok(r)
    }

    /// Appends the binary tree encoding (see docs/formats/engine.md, "Table schema").
    pub fn encode_tree(&self, out: &mut Vec<u8>) {
        match self {
            GcRule::Union(v) | GcRule::Intersection(v) => {
                out.push(if matches!(self, GcRule::Union(_)) {
                    0
                } else {
                    1
                });
                out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                for r in v {
                    r.encode_tree(out);
                }
            }
            GcRule::MaxVersions(n) => {
                out.push(2);
                out.extend_from_slice(&n.to_be_bytes());
            }
            GcRule::MaxAge(a) => {
                out.push(3);
                out.extend_from_slice(&a.to_be_bytes());
            }
        }
    }

    /// Decodes [`GcRule::encode_tree`] from the front of `buf`, advancing it.
    pub fn decode_tree(buf: &mut &[u8], depth: usize) -> Result<GcRule> {
        if depth >= MAX_GC_DEPTH {
            return Err(Error::corruption("gc rule: nested too deep"));
        }
        let mut take = |n: usize| -> Result<&[u8]> {
            if buf.len() < n {
                return Err(Error::corruption("gc rule: truncated"));
            }
            let (h, t) = buf.split_at(n);
            *buf = t;
            Ok(h)
        };
        let tag = take(1)?[0];
        Ok(match tag {
            0 | 1 => {
                let mut n = [0u8; 4];
                n.copy_from_slice(take(4)?);
                let n = u32::from_be_bytes(n) as usize;
                // Each member takes at least 5 bytes: refuse a count the
                // rest cannot hold before allocating for it.
                if n > buf.len() / 5 {
                    return Err(Error::corruption("gc rule: member count past the end"));
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(GcRule::decode_tree(buf, depth + 1)?);
                }
                if tag == 0 {
                    GcRule::Union(v)
                } else {
                    GcRule::Intersection(v)
                }
            }
            2 => {
                let mut n = [0u8; 4];
                n.copy_from_slice(take(4)?);
                GcRule::MaxVersions(u32::from_be_bytes(n))
            }
            3 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(take(8)?);
                GcRule::MaxAge(u64::from_be_bytes(n))
            }
            t => return Err(Error::corruption(format!("gc rule: tag {t}"))),
        })
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::BadGcRule(reason.into())
}

struct TextParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl TextParser<'_> {
    fn rule(&mut self, depth: usize) -> std::result::Result<GcRule, String> {
        if depth >= MAX_GC_DEPTH {
            return Err(format!("gc rule nested deeper than {MAX_GC_DEPTH} levels"));
        }
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            self.i += 1;
        }
        let word = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        match word.as_str() {
            "union" | "intersection" => {
                if self.s.get(self.i) != Some(&b'(') {
                    return Err(format!("{word} wants (rule,rule,…)"));
                }
                self.i += 1;
                let mut v = Vec::new();
                if self.s.get(self.i) == Some(&b')') {
                    self.i += 1;
                } else {
                    loop {
                        v.push(self.rule(depth + 1)?);
                        if v.len() > MAX_GC_NODES {
                            return Err(format!("more than {MAX_GC_NODES} rules"));
                        }
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b')') => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(format!("expected , or ) at byte {}", self.i)),
                        }
                    }
                }
                Ok(if word == "union" {
                    GcRule::Union(v)
                } else {
                    GcRule::Intersection(v)
                })
            }
            "max_versions" | "max_age" => {
                if self.s.get(self.i) != Some(&b'=') {
                    return Err(format!("{word} wants ={}", if word == "max_age" { "7d" } else { "N" }));
                }
                self.i += 1;
                let vstart = self.i;
                while self.s.get(self.i).is_some_and(|b| b.is_ascii_alphanumeric()) {
                    self.i += 1;
                }
                let v = String::from_utf8_lossy(&self.s[vstart..self.i]).into_owned();
                if word == "max_age" {
                    return Ok(GcRule::MaxAge(crate::duration::parse_duration(&v)?));
                }
                let n = v
                    .parse::<u32>()
                    .ok()
                    .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| format!("max_versions {v:?} is not a number"))?;
                if n == 0 {
                    return Err("max_versions must be at least 1".into());
                }
                Ok(GcRule::MaxVersions(n))
            }
            _ => Err(format!(
                "expected union(…), intersection(…), max_versions=N or max_age=D at byte {start} of the gc rule"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000_000;

    #[test]
    fn only_rules_with_an_age_read_the_clock() {
        for (text, ages) in [
            ("max_versions=3", false),
            (
                "union(max_versions=3,intersection(max_age=7d,max_versions=1))",
                true,
            ),
            ("intersection(max_versions=2,max_versions=1)", false),
        ] {
            let r = GcRule::parse_text(text).unwrap();
            assert_eq!(r.uses_age(), ages, "{text}");
            if !ages {
                // What the reader relies on: the time changes nothing.
                for i in 0..4 {
                    assert_eq!(r.collects(i, 5, 0), r.collects(i, 5, 1000 * DAY));
                }
            }
        }
        assert!(!GcRule::KEEP_ALL.uses_age());
    }

    #[test]
    fn nested_rules_collect_as_cloud_bigtable() {
        // Keep 3 versions, and of those only the newest once older than 7 days.
        let r = GcRule::parse_text("union(max_versions=3,intersection(max_age=7d,max_versions=1))")
            .unwrap();
        let now = 100 * DAY;
        assert!(!r.collects(0, 0, now), "the newest always stays");
        assert!(!r.collects(1, now - DAY, now), "young second version");
        assert!(r.collects(1, now - 8 * DAY, now), "old second version");
        assert!(r.collects(3, now, now), "fourth version");
        assert!(!r.collects_by_age_alone(0, now));
        let age = GcRule::parse_text("union(max_age=1d,intersection(max_versions=2))").unwrap();
        assert!(age.collects_by_age_alone(now - 2 * DAY, now));
        assert!(!GcRule::KEEP_ALL.collects(1000, 0, now));
        assert_eq!(
            r.to_text(),
            "union(max_versions=3,intersection(max_age=7d,max_versions=1))"
        );
    }

    #[test]
    fn flat_rules_keep_their_meaning_and_shape() {
        let now = 10 * DAY;
        for v in [None, Some(1), Some(2)] {
            for a in [None, Some(DAY)] {
                for m in [GcMode::Union, GcMode::Intersection] {
                    let r = GcRule::flat(v, a, m);
                    r.validate().unwrap();
                    assert_eq!(r.as_flat(), Some((v, a, m)));
                    for i in 0..4 {
                        for ts in [now, now - 2 * DAY] {
                            let by_v = v.map(|n| i >= n as usize);
                            let by_a = a.map(|x| now - ts > x);
                            let old = match m {
                                GcMode::Union => by_v == Some(true) || by_a == Some(true),
                                GcMode::Intersection => by_v == Some(true) && by_a == Some(true),
                            };
                            assert_eq!(r.collects(i, ts, now), old, "{v:?} {a:?} {m:?} {i} {ts}");
                        }
                    }
                }
            }
        }
        assert_eq!(
            GcRule::default().as_flat(),
            Some((Some(3), None, GcMode::Union))
        );
        let nested = GcRule::Union(vec![GcRule::MaxAge(1), GcRule::MaxVersions(1)]);
        assert_eq!(nested.as_flat(), None);
    }

    #[test]
    fn text_and_binary_round_trip_and_refuse_garbage() {
        for t in [
            "max_versions=1",
            "max_age=90m",
            "union()",
            "intersection(max_versions=2,union(max_age=1s,max_versions=9))",
        ] {
            let r = GcRule::parse_text(t).unwrap();
            assert_eq!(GcRule::parse_text(&r.to_text()).unwrap(), r);
            let mut enc = Vec::new();
            r.encode_tree(&mut enc);
            let mut s = enc.as_slice();
            assert_eq!(GcRule::decode_tree(&mut s, 0).unwrap(), r);
            assert!(s.is_empty());
            for cut in 0..enc.len() {
                assert!(GcRule::decode_tree(&mut &enc[..cut], 0).is_err());
            }
        }
        for bad in [
            "",
            "union",
            "union(",
            "intersection()",
            "max_versions=0",
            "max_versions=x",
            "max_age=0s",
            "max_age=7",
            "union(max_versions=1,)",
            "union(max_versions=1))",
            "banana",
        ] {
            assert!(GcRule::parse_text(bad).is_err(), "{bad}");
        }
        let deep = "union(".repeat(40) + &")".repeat(40);
        assert!(GcRule::parse_text(&deep).is_err());
        // A count claiming billions of members is refused before allocating.
        let mut huge = vec![0u8];
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(GcRule::decode_tree(&mut huge.as_slice(), 0).is_err());
    }
}
