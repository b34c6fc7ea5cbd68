//! `.scan/<query>` filenames.
//!
//! A query is `key=value` pairs joined by `&` (values `%XX`-escaped; write `/`
//! as `%2F`), or the word `all`:
//!
//! ```text
//! start=<row>        first row (inclusive)
//! end=<row>          end of the range (exclusive)
//! prefix=<bytes>     rows starting with these bytes
//! family=<f>[,<f>]   only these families (may repeat)
//! column=<regex>     only columns whose family:qualifier matches (whole match)
//! from=<µs>          only versions with timestamp >= from
//! to=<µs>            only versions with timestamp < to
//! versions=<n>|all   newest n versions of each column (default 1)
//! limit=<n>          at most n rows (that the filter outputs)
//! cells=<n>          at most n cells (that the filter outputs)
//! format=tsv|json    output format (default tsv; see `output`)
//! filter=<expr>      a row filter (`filter_query`), run on what the keys
//!                    above select; given twice, the two are chained
//! counters=<regex>   columns (whole family:qualifier) holding 64-bit
//!                    counters: their 8-byte values print as decimal
//! ```

use crate::names::decode_field;
use engine::{RowRange, ScanSpec, TimeRange};
use std::ops::Bound;

/// How scan results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Tsv,
    Json,
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub spec: ScanSpec,
    pub format: Format,
    /// Columns whose 8-byte values are shown as decimal counters.
    pub counters: Option<CounterColumns>,
}

/// The `counters=` regex, compiled.
#[derive(Debug, Clone)]
pub struct CounterColumns(regex::bytes::Regex);

impl CounterColumns {
    /// Whether `family:qualifier` is a counter column.
    pub fn matches(&self, family: &str, qualifier: &[u8]) -> bool {
        let mut col = Vec::with_capacity(family.len() + 1 + qualifier.len());
        col.extend_from_slice(family.as_bytes());
        col.push(b':');
        col.extend_from_slice(qualifier);
        self.0.is_match(&col)
    }
}

impl PartialEq for CounterColumns {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}
impl Eq for CounterColumns {}

fn number(key: &str, v: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(v)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "{key}= wants a decimal number, not {:?}",
                String::from_utf8_lossy(v)
            )
        })
}

/// The tighter of two lower bounds.
fn max_start(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            if x >= y {
                a
            } else {
                b
            }
        }
    }
}

/// The tighter of two upper bounds.
fn min_end(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            if x <= y {
                a
            } else {
                b
            }
        }
    }
}

// The column regex rules are the engine's, defined in one place.
pub use engine::read::{compile_column_regex, exact_column_regex};

/// Parses a query filename.
pub fn parse(name: &[u8]) -> Result<Query, String> {
    let mut spec = ScanSpec {
        max_versions: Some(1),
        ..Default::default()
    };
    let mut format = Format::Tsv;
    let mut start = Bound::Unbounded;
    let mut end = Bound::Unbounded;
    let mut prefix: Option<Vec<u8>> = None;
    let mut families: Vec<String> = Vec::new();
    let mut from = 0u64;
    let mut to = u64::MAX;
    let mut filters = Vec::new();
    let mut counters = None;
    if name != b"all" {
        for part in name.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
            let eq = part
                .iter()
                .position(|&b| b == b'=')
                .ok_or_else(|| format!("{:?} is not key=value", String::from_utf8_lossy(part)))?;
            let key = String::from_utf8_lossy(&part[..eq]).into_owned();
            if key == "filter" {
                // Decoded argument by argument, so %2C stays inside one.
                filters.push(
                    crate::filter_query::parse(&part[eq + 1..])
                        .map_err(|e| format!("filter=: {e}"))?,
                );
                continue;
            }
            let value =
                decode_field(&part[eq + 1..]).ok_or_else(|| format!("{key}=: bad %XX escape"))?;
            match key.as_str() {
                "start" => start = Bound::Included(value),
                "end" => end = Bound::Excluded(value),
                "prefix" => prefix = Some(value),
                "family" => {
                    let v = String::from_utf8(value).map_err(|_| "family= is not UTF-8".to_string())?;
                    families.extend(v.split(',').filter(|f| !f.is_empty()).map(str::to_string));
                }
                "column" => {
                    let re = String::from_utf8(value).map_err(|_| "column= is not UTF-8".to_string())?;
                    compile_column_regex(&re).map_err(|e| format!("column=: {e}"))?;
                    spec.column_regex = Some(re);
                }
                "from" => from = number(&key, &value)?,
                "to" => to = number(&key, &value)?,
                "versions" => {
                    spec.max_versions = if value == b"all" {
                        None
                    } else {
                        let n = number(&key, &value)?;
                        Some(u32::try_from(n).ok().filter(|&n| n > 0).ok_or("versions= must be 1.. or all")?)
                    }
                }
                "counters" => {
                    let re = String::from_utf8(value).map_err(|_| "counters= is not UTF-8".to_string())?;
                    let re = compile_column_regex(&re).map_err(|e| format!("counters=: {e}"))?;
                    counters = Some(CounterColumns(re));
                }
                "limit" => spec.row_limit = Some(number(&key, &value)?),
                "cells" => spec.cell_limit = Some(number(&key, &value)?),
                "format" => {
                    format = match value.as_slice() {
                        b"tsv" => Format::Tsv,
                        b"json" => Format::Json,
                        _ => return Err("format= is tsv or json".into()),
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown key {key:?} (start, end, prefix, family, column, from, to, versions, limit, cells, format, filter, counters)"
                    ))
                }
            }
        }
    }
    if let Some(p) = prefix {
        let r = RowRange::prefix(&p);
        start = max_start(start, r.start);
        end = min_end(end, r.end);
    }
    if from > to {
        return Err(format!("from={from} is after to={to}"));
    }
    spec.rows = RowRange { start, end };
    spec.time_range = TimeRange {
        start: from,
        end: to,
    };
    if !families.is_empty() {
        families.sort();
        families.dedup();
        spec.families = Some(families);
    }
    if !filters.is_empty() {
        spec.filter = Some(engine::RowFilter::chain(filters));
    }
    Ok(Query {
        spec,
        format,
        counters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_means_everything_newest_version() {
        let q = parse(b"all").unwrap();
        assert_eq!(q.spec.rows, RowRange::all());
        assert_eq!(q.spec.max_versions, Some(1));
        assert_eq!(q.format, Format::Tsv);
    }

    #[test]
    fn parses_the_paper_example() {
        let q =
            parse(br"start=com.a&end=com.d&family=anchor&column=anchor:.*\.cnn\.com&format=json")
                .unwrap();
        assert_eq!(q.spec.rows, RowRange::between(b"com.a", b"com.d"));
        assert_eq!(q.spec.families, Some(vec!["anchor".to_string()]));
        assert_eq!(q.spec.column_regex.as_deref(), Some(r"anchor:.*\.cnn\.com"));
        assert_eq!(q.format, Format::Json);
    }

    #[test]
    fn prefix_intersects_the_range() {
        let q = parse(b"prefix=com.&start=com.b").unwrap();
        assert_eq!(q.spec.rows.start, Bound::Included(b"com.b".to_vec()));
        assert_eq!(q.spec.rows.end, Bound::Excluded(b"com/".to_vec()));
        let q = parse(b"prefix=a%2F&end=a%2Fc").unwrap();
        assert_eq!(q.spec.rows.start, Bound::Included(b"a/".to_vec()));
        assert_eq!(q.spec.rows.end, Bound::Excluded(b"a/c".to_vec()));
    }

    #[test]
    fn versions_times_and_limits() {
        let q = parse(b"versions=all&from=10&to=20&limit=5&cells=7&family=a,b&family=a").unwrap();
        assert_eq!(q.spec.max_versions, None);
        assert_eq!(q.spec.time_range, TimeRange { start: 10, end: 20 });
        assert_eq!(q.spec.row_limit, Some(5));
        assert_eq!(q.spec.cell_limit, Some(7));
        assert_eq!(
            q.spec.families,
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(parse(b"versions=3").unwrap().spec.max_versions, Some(3));
    }

    #[test]
    fn exact_column_regex_matches_only_its_column() {
        let all: Vec<u8> = (0..=255u8).collect();
        let re = compile_column_regex(&exact_column_regex("f.x", &all)).unwrap();
        let col = |f: &[u8], q: &[u8]| [f, b":", q].concat();
        assert!(re.is_match(&col(b"f.x", &all)));
        assert!(!re.is_match(&col(b"fxx", &all)));
        assert!(!re.is_match(&col(b"f.x", &all[1..])));
        let empty = compile_column_regex(&exact_column_regex("f", b"")).unwrap();
        assert!(empty.is_match(b"f:"));
        assert!(!empty.is_match(b"f:a"));
    }

    #[test]
    fn rejects_bad_queries() {
        for bad in [
            &b"bogus=1"[..],
            b"limit=x",
            b"versions=0",
            b"column=(",
            b"format=xml",
            b"start",
            b"from=5&to=4",
            b"start=%zz",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
