//! One line of the batch format (see the module comment of `mod.rs`) parsed
//! into an [`Op`].

use super::Op;
use crate::names::decode_field;
use engine::key::MAX_TIMESTAMP;
use engine::TimeRange;

fn field(s: &[u8], what: &str) -> Result<Vec<u8>, String> {
    decode_field(s)
        .ok_or_else(|| format!("{what}: bad %XX escape in {:?}", String::from_utf8_lossy(s)))
}

fn column(s: &[u8]) -> Result<(String, Vec<u8>), String> {
    let c = field(s, "column")?;
    let colon = c.iter().position(|&b| b == b':').ok_or_else(|| {
        format!(
            "column {:?} is not family:qualifier",
            String::from_utf8_lossy(&c)
        )
    })?;
    let family = std::str::from_utf8(&c[..colon])
        .map_err(|_| "family name is not UTF-8".to_string())?
        .to_string();
    if family.is_empty() {
        return Err("empty family name".into());
    }
    Ok((family, c[colon + 1..].to_vec()))
}

fn family_field(s: &[u8]) -> Result<String, String> {
    let f = field(s, "family")?;
    String::from_utf8(f).map_err(|_| "family name is not UTF-8".to_string())
}

fn timestamp(s: &[u8]) -> Result<u64, String> {
    let t = std::str::from_utf8(s)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| format!("bad timestamp {:?}", String::from_utf8_lossy(s)))?;
    if t > MAX_TIMESTAMP {
        return Err(format!(
            "timestamp {t} is above the largest ({MAX_TIMESTAMP})"
        ));
    }
    Ok(t)
}

/// A signed 64-bit decimal (a leading `+` allowed).
fn signed(s: &[u8], what: &str) -> Result<i64, String> {
    let d = String::from_utf8_lossy(s);
    d.strip_prefix('+')
        .unwrap_or(&d)
        .parse::<i64>()
        .map_err(|_| format!("bad {what} {d:?} (a signed 64-bit decimal)"))
}

/// `<from>..<to>` (either end may be empty) as `[from, to)`; `None` if the
/// field has no `..` (a single timestamp).
fn time_range(s: &[u8]) -> Result<Option<TimeRange>, String> {
    let Some(dots) = s.windows(2).position(|w| w == b"..") else {
        return Ok(None);
    };
    let (a, b) = (&s[..dots], &s[dots + 2..]);
    let start = if a.is_empty() { 0 } else { timestamp(a)? };
    let end = if b.is_empty() {
        u64::MAX
    } else {
        timestamp(b)?
    };
    if start >= end {
        return Err(format!("empty time range {}", String::from_utf8_lossy(s)));
    }
    Ok(Some(TimeRange { start, end }))
}

/// Parses one line (without its newline); `Ok(None)` for blank and comment lines.
pub fn parse_line(text: &[u8]) -> Result<Option<Op>, String> {
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let fields: Vec<&[u8]> = text
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|f| !f.is_empty())
        .collect();
    let Some((&verb, args)) = fields.split_first() else {
        return Ok(None);
    };
    if verb.first() == Some(&b'#') {
        return Ok(None);
    }
    let verb = String::from_utf8_lossy(verb).into_owned();
    let arity = |min: usize, max: usize, usage: &str| -> Result<(), String> {
        if args.len() < min || args.len() > max {
            Err(format!("usage: {usage}"))
        } else {
            Ok(())
        }
    };
    let op = match verb.as_str() {
        "set" => {
            arity(3, 4, "set <row> <family>:<qualifier> <value> [<timestamp>]")?;
            let (family, qualifier) = column(args[1])?;
            Op::Set {
                row: field(args[0], "row")?,
                family,
                qualifier,
                value: field(args[2], "value")?,
                ts: args.get(3).map(|t| timestamp(t)).transpose()?,
            }
        }
        "delete" => {
            arity(
                2,
                3,
                "delete <row> <family>:<qualifier> [<timestamp> | <from>..<to>]",
            )?;
            let (family, qualifier) = column(args[1])?;
            let row = field(args[0], "row")?;
            match args.get(2).map(|a| time_range(a)).transpose()?.flatten() {
                Some(range) => Op::DeleteVersions {
                    row,
                    family,
                    qualifier,
                    range,
                },
                None => Op::Delete {
                    row,
                    family,
                    qualifier,
                    ts: args.get(2).map(|t| timestamp(t)).transpose()?,
                },
            }
        }
        "deletefamily" => {
            arity(2, 2, "deletefamily <row> <family>")?;
            Op::DeleteFamily {
                row: field(args[0], "row")?,
                family: family_field(args[1])?,
            }
        }
        "deleterow" => {
            arity(1, 1, "deleterow <row>")?;
            Op::DeleteRow {
                row: field(args[0], "row")?,
            }
        }
        "increment" => {
            arity(3, 3, "increment <row> <family>:<qualifier> <delta>")?;
            let (family, qualifier) = column(args[1])?;
            let delta = signed(args[2], "delta")?;
            Op::Increment {
                row: field(args[0], "row")?,
                family,
                qualifier,
                delta,
            }
        }
        "add" => {
            arity(3, 4, "add <row> <family>:<qualifier> <n> [<timestamp>]")?;
            let (family, qualifier) = column(args[1])?;
            Op::Add {
                row: field(args[0], "row")?,
                family,
                qualifier,
                input: signed(args[2], "number")?,
                // One running aggregate per column unless a time bucket is given.
                ts: args.get(3).map(|t| timestamp(t)).transpose()?.unwrap_or(0),
            }
        }
        "append" => {
            arity(3, 3, "append <row> <family>:<qualifier> <value>")?;
            let (family, qualifier) = column(args[1])?;
            Op::Append {
                row: field(args[0], "row")?,
                family,
                qualifier,
                value: field(args[2], "value")?,
            }
        }
        "if" | "ifnot" if args.get(1).is_some_and(|a| a.starts_with(b"filter=")) => {
            arity(2, 2, &format!("{verb} <row> filter=<expr>"))?;
            let filter = crate::filter_query::parse(&args[1][b"filter=".len()..])
                .map_err(|e| format!("filter=: {e}"))?;
            Op::FilterGuard {
                row: field(args[0], "row")?,
                filter,
                expect: verb == "if",
            }
        }
        "if" | "ifnot" => {
            arity(2, 3, &format!("{verb} <row> <family>:<qualifier> [<value>]"))?;
            let (family, qualifier) = column(args[1])?;
            Op::Guard {
                row: field(args[0], "row")?,
                family,
                qualifier,
                value: args.get(2).map(|v| field(v, "value")).transpose()?,
                expect: verb == "if",
            }
        }
        other => {
            return Err(format!(
                "unknown mutation {other:?} (set, delete, deletefamily, deleterow, increment, add, append, if, ifnot)"
            ))
        }
    };
    Ok(Some(op))
}
