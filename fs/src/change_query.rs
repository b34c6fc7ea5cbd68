//! `.changes/<query>` filenames (docs/changes.md): `all`, or `key=value`
//! pairs joined by `&` (values `%XX`-escaped):
//!
//! ```text
//! since=<token>   changes after this resume token (`<µs>` or `<µs>.<n>`,
//!                 as the stream's `# change` lines give it); since=<µs>
//!                 starts at that commit time
//! until=<µs>      only changes committed before; the stream ends there
//! prefix=<bytes>  rows starting with these bytes
//! start=<row>     first row (inclusive)        (not with prefix=)
//! end=<row>       end of the rows (exclusive)  (not with prefix=)
//! family=<f>      only the ops of this family (and row deletes)
//! ```

use crate::names::decode_field;
use engine::changes::{ChangeQuery, Position};
use engine::RowRange;
use std::ops::Bound;

/// A parsed `.changes/` name.
#[derive(Debug, Clone, Default)]
pub struct ChangeName {
    pub query: ChangeQuery,
    /// Only ops of this family (row deletes too).
    pub family: Option<String>,
}

/// Parses a name strictly; the error says what is wrong.
pub fn parse(name: &[u8]) -> Result<ChangeName, String> {
    let mut out = ChangeName::default();
    if name == b"all" {
        return Ok(out);
    }
    let mut seen: Vec<String> = Vec::new();
    let mut prefix = None;
    for part in name.split(|&b| b == b'&') {
        let eq = part
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| format!("{:?} is not key=value", String::from_utf8_lossy(part)))?;
        let key = String::from_utf8_lossy(&part[..eq]).into_owned();
        if seen.contains(&key) {
            return Err(format!("{key}= is given twice"));
        }
        seen.push(key.clone());
        let value =
            decode_field(&part[eq + 1..]).ok_or_else(|| format!("{key}=: bad %XX escape"))?;
        let text = || String::from_utf8(value.clone()).map_err(|_| format!("{key}= is not UTF-8"));
        match key.as_str() {
            "since" => {
                out.query.after = Position::parse(&text()?).map_err(|e| e.to_string())?;
            }
            "until" => {
                let t = text()?;
                let p = Position::parse(&t).map_err(|e| e.to_string())?;
                if p.skip != 0 {
                    return Err(format!("until={t} is not a plain µs timestamp"));
                }
                out.query.until = Some(p.ts);
            }
            "prefix" => prefix = Some(value),
            "start" => out.query.start = value,
            "end" => out.query.end = Some(value),
            "family" => out.family = Some(text()?),
            _ => {
                return Err(format!(
                    "unknown key {key:?} (since, until, prefix, start, end, family)"
                ))
            }
        }
    }
    if let Some(p) = prefix {
        if seen.iter().any(|k| k == "start" || k == "end") {
            return Err("prefix= does not go with start= or end=".into());
        }
        out.query.end = match RowRange::prefix(&p).end {
            Bound::Excluded(e) | Bound::Included(e) => Some(e),
            Bound::Unbounded => None,
        };
        out.query.start = p;
    }
    if let (Some(s), Some(u)) = (Some(out.query.after.ts), out.query.until) {
        if s != 0 && s >= u {
            return Err(format!("since={s} is not before until={u}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_strictly() {
        let n = parse(b"all").unwrap();
        assert_eq!(n.query.after, Position::default());
        let n = parse(b"since=17.2&until=99&prefix=ab&family=f").unwrap();
        assert_eq!(n.query.after, Position { ts: 17, skip: 2 });
        assert_eq!(n.query.until, Some(99));
        assert_eq!(n.query.start, b"ab".to_vec());
        assert_eq!(n.query.end, Some(b"ac".to_vec()));
        assert_eq!(n.family.as_deref(), Some("f"));
        for bad in [
            &b""[..],
            b"since",
            b"since=x",
            b"since=1&since=2",
            b"until=5.1",
            b"since=9&until=5",
            b"prefix=a&start=b",
            b"colour=red",
            b"since=%zz",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
