//! The text form of row filters, for `.scan/filter=<expr>` and `.mutate`'s
//! `if <row> filter=<expr>`: one word a filter, arguments in parentheses.
//!
//! ```text
//! chain(f,f,…)  interleave(f,f,…)  condition(pred,then[,else])
//! all  none  sink  strip  label(name)
//! row(regex)  family(regex)  qualifier(regex)  value(regex)   whole match, bytes
//! sample(p)                        each row with probability p (0..=1)
//! columns(fam[,from=q][,after=q][,to=q][,through=q])    qualifier range in a family
//! values([from=v][,after=v][,to=v][,through=v])         value range
//! time([from=µs][,to=µs])          timestamps in [from, to)
//! cells_per_row(n)  offset(n)  cells_per_column(n)
//! ```
//!
//! `from` and `through` include their bound, `after` and `to` exclude it.
//! An argument runs to the next `,` or `)` outside parentheses (a `\`
//! keeps the next byte in the argument, so `\(` and `\,` reach the regex
//! as written); then `%XX` escapes are decoded, and a lone `%` is the
//! empty string. In a scan query write `&` as `%26` and `/` as `%2F`.
//! [`format`] writes the form [`parse`] reads, so filters read back.

use crate::names::decode_field;
use engine::filter::{RowFilter, MAX_DEPTH};
use engine::TimeRange;
use std::ops::Bound;

/// Longest filter text accepted.
pub const MAX_TEXT: usize = 64 * 1024;

/// Parses a filter expression (raw, not yet `%`-decoded).
pub fn parse(text: &[u8]) -> Result<RowFilter, String> {
    if text.len() > MAX_TEXT {
        return Err(format!("filter is over {MAX_TEXT} bytes"));
    }
    let mut p = Parser { s: text, i: 0 };
    let f = p.filter(0)?;
    if p.i != text.len() {
        return Err(format!(
            "unexpected {:?} after the filter",
            String::from_utf8_lossy(&text[p.i..])
        ));
    }
    f.validate().map_err(|e| e.to_string())?;
    // Compiling checks the regexes now rather than at the first read; the
    // plan is kept, so the reads of this filter do not compile it again.
    engine::filter::Plan::cached(&f).map_err(|e| e.to_string())?;
    Ok(f)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn word(&mut self) -> String {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    /// One raw argument: up to `,` or `)` outside parentheses.
    fn raw_arg(&mut self) -> Result<&[u8], String> {
        let start = self.i;
        let mut depth = 0usize;
        while let Some(b) = self.peek() {
            match b {
                b'\\' => self.i += 1,
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                b',' if depth == 0 => break,
                _ => {}
            }
            self.i += 1;
        }
        if self.i > self.s.len() {
            return Err("filter ends after a backslash".into());
        }
        Ok(&self.s[start..self.i])
    }

    /// A decoded argument.
    fn arg(&mut self) -> Result<Vec<u8>, String> {
        let raw = self.raw_arg()?;
        decode_field(raw)
            .ok_or_else(|| format!("bad %XX escape in {:?}", String::from_utf8_lossy(raw)))
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!(
                "expected {:?} at byte {} of the filter",
                b as char, self.i
            ))
        }
    }

    /// `(` then arguments read by `each` separated by `,` then `)`.
    fn args<T>(
        &mut self,
        mut each: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        if self.peek() == Some(b')') {
            self.i += 1;
            return Ok(out);
        }
        loop {
            out.push(each(self)?);
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b')') => {
                    self.i += 1;
                    return Ok(out);
                }
                _ => return Err(format!("expected , or ) at byte {} of the filter", self.i)),
            }
        }
    }

    fn one_arg(&mut self, name: &str) -> Result<Vec<u8>, String> {
        let mut v = self.args(|p| p.arg())?;
        if v.len() != 1 {
            return Err(format!("{name}() takes one argument"));
        }
        Ok(v.pop().unwrap_or_default())
    }

    fn text_arg(&mut self, name: &str) -> Result<String, String> {
        String::from_utf8(self.one_arg(name)?).map_err(|_| format!("{name}() wants UTF-8 text"))
    }

    fn number(&mut self, name: &str) -> Result<u32, String> {
        let t = self.text_arg(name)?;
        t.parse::<u32>()
            .ok()
            .filter(|_| t.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("{name}() wants a count 0..=4294967295, not {t:?}"))
    }

    fn filter(&mut self, depth: usize) -> Result<RowFilter, String> {
        if depth >= MAX_DEPTH {
            return Err(format!("filter nested deeper than {MAX_DEPTH} levels"));
        }
        let name = self.word();
        let sub = |p: &mut Self| p.filter(depth + 1);
        Ok(match name.as_str() {
            "chain" => RowFilter::Chain(self.args(sub)?),
            "interleave" => RowFilter::Interleave(self.args(sub)?),
            "condition" => {
                let mut v = self.args(sub)?.into_iter().map(Box::new);
                let (Some(predicate), t, f, None) = (v.next(), v.next(), v.next(), v.next()) else {
                    return Err("condition(predicate, then[, else]) takes 2 or 3 filters".into());
                };
                let Some(t) = t else {
                    return Err("condition(predicate, then[, else]) takes 2 or 3 filters".into());
                };
                RowFilter::Condition {
                    predicate,
                    true_filter: Some(t),
                    false_filter: f,
                }
            }
            "all" => RowFilter::PassAll,
            "none" => RowFilter::BlockAll,
            "sink" => RowFilter::Sink,
            "strip" => RowFilter::StripValue,
            "label" => RowFilter::ApplyLabel(self.text_arg("label")?),
            "row" => RowFilter::RowKeyRegex(self.one_arg("row")?),
            "family" => RowFilter::FamilyNameRegex(self.text_arg("family")?),
            "qualifier" => RowFilter::ColumnQualifierRegex(self.one_arg("qualifier")?),
            "value" => RowFilter::ValueRegex(self.one_arg("value")?),
            "sample" => {
                let t = self.text_arg("sample")?;
                let p = t
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("sample() wants a probability 0..=1, not {t:?}"))?;
                RowFilter::RowSample(p)
            }
            "columns" => {
                let mut args = self.args(|p| p.raw_arg().map(<[u8]>::to_vec))?.into_iter();
                let family = args
                    .next()
                    .and_then(|f| decode_field(&f))
                    .and_then(|f| String::from_utf8(f).ok())
                    .filter(|f| !f.is_empty() && !f.contains('='))
                    .ok_or("columns(family, …) wants a family first")?;
                let (start, end) = bounds("columns", args)?;
                RowFilter::ColumnRange { family, start, end }
            }
            "values" => {
                let args = self.args(|p| p.raw_arg().map(<[u8]>::to_vec))?;
                let (start, end) = bounds("values", args.into_iter())?;
                RowFilter::ValueRange { start, end }
            }
            "time" => {
                let args = self.args(|p| p.arg())?;
                let mut r = TimeRange::ALL;
                for a in args {
                    let (k, v) = split_kv(&a).ok_or("time() takes from=µs and to=µs")?;
                    let n = std::str::from_utf8(v)
                        .ok()
                        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|t| t.parse::<u64>().ok())
                        .ok_or("time() wants decimal microseconds")?;
                    match k {
                        b"from" => r.start = n,
                        b"to" => r.end = n,
                        _ => return Err("time() takes from=µs and to=µs".into()),
                    }
                }
                RowFilter::TimestampRange(r)
            }
            "cells_per_row" => RowFilter::CellsPerRowLimit(self.number("cells_per_row")?),
            "offset" => RowFilter::CellsPerRowOffset(self.number("offset")?),
            "cells_per_column" => RowFilter::CellsPerColumnLimit(self.number("cells_per_column")?),
            "" => {
                return Err(format!(
                    "expected a filter name at byte {} of the filter",
                    self.i
                ))
            }
            other => {
                return Err(format!(
                    "unknown filter {other:?} (chain, interleave, condition, all, none, sink, \
                     strip, label, row, family, qualifier, value, sample, columns, values, \
                     time, cells_per_row, offset, cells_per_column)"
                ))
            }
        })
    }
}

fn split_kv(a: &[u8]) -> Option<(&[u8], &[u8])> {
    let eq = a.iter().position(|&b| b == b'=')?;
    Some((&a[..eq], &a[eq + 1..]))
}

type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

fn bounds(name: &str, args: impl Iterator<Item = Vec<u8>>) -> Result<Bounds, String> {
    let (mut start, mut end) = (Bound::Unbounded, Bound::Unbounded);
    for a in args {
        let (k, v) = split_kv(&a)
            .ok_or_else(|| format!("{name}() bounds are from=, after=, to= or through="))?;
        let v = decode_field(v).ok_or_else(|| format!("{name}(): bad %XX escape"))?;
        let (slot, b) = match k {
            b"from" => (&mut start, Bound::Included(v)),
            b"after" => (&mut start, Bound::Excluded(v)),
            b"to" => (&mut end, Bound::Excluded(v)),
            b"through" => (&mut end, Bound::Included(v)),
            _ => {
                return Err(format!(
                    "{name}() bounds are from=, after=, to= or through="
                ))
            }
        };
        if !matches!(slot, Bound::Unbounded) {
            return Err(format!("{name}() has two start or two end bounds"));
        }
        *slot = b;
    }
    Ok((start, end))
}

/// Escapes an argument so that [`parse`] reads it back: `%`, the separators
/// `,` `(` `)`, `&` and `/` (query syntax), backslashes, whitespace, control
/// bytes and non-ASCII as `%XX`; the empty string as a lone `%`.
fn arg(out: &mut String, bytes: &[u8]) {
    if bytes.is_empty() {
        out.push('%');
        return;
    }
    for &b in bytes {
        if b.is_ascii_graphic() && !b"%,()&/\\".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn bound_args(out: &mut String, start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>, mut first: bool) {
    for (key, v) in [
        match start {
            Bound::Included(v) => ("from=", Some(v)),
            Bound::Excluded(v) => ("after=", Some(v)),
            Bound::Unbounded => ("", None),
        },
        match end {
            Bound::Included(v) => ("through=", Some(v)),
            Bound::Excluded(v) => ("to=", Some(v)),
            Bound::Unbounded => ("", None),
        },
    ] {
        if let Some(v) = v {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(key);
            arg(out, v);
        }
    }
}

/// The text of a filter, as [`parse`] reads it.
pub fn format(f: &RowFilter) -> String {
    let mut out = String::new();
    write(&mut out, f);
    out
}

fn write(out: &mut String, f: &RowFilter) {
    let list = |out: &mut String, name: &str, v: &[&RowFilter]| {
        out.push_str(name);
        out.push('(');
        for (i, f) in v.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write(out, f);
        }
        out.push(')');
    };
    let call = |out: &mut String, name: &str, a: &[u8]| {
        out.push_str(name);
        out.push('(');
        arg(out, a);
        out.push(')');
    };
    match f {
        RowFilter::Chain(v) => list(out, "chain", &v.iter().collect::<Vec<_>>()),
        RowFilter::Interleave(v) => list(out, "interleave", &v.iter().collect::<Vec<_>>()),
        RowFilter::Condition {
            predicate,
            true_filter,
            false_filter,
        } => {
            let none = RowFilter::BlockAll;
            let mut v: Vec<&RowFilter> = vec![predicate, true_filter.as_deref().unwrap_or(&none)];
            if let Some(e) = false_filter {
                v.push(e);
            }
            list(out, "condition", &v)
        }
        RowFilter::Sink => out.push_str("sink"),
        RowFilter::PassAll => out.push_str("all"),
        RowFilter::BlockAll => out.push_str("none"),
        RowFilter::StripValue => out.push_str("strip"),
        RowFilter::ApplyLabel(l) => call(out, "label", l.as_bytes()),
        RowFilter::RowKeyRegex(r) => call(out, "row", r),
        RowFilter::FamilyNameRegex(r) => call(out, "family", r.as_bytes()),
        RowFilter::ColumnQualifierRegex(r) => call(out, "qualifier", r),
        RowFilter::ValueRegex(r) => call(out, "value", r),
        RowFilter::RowSample(p) => out.push_str(&format!("sample({p})")),
        RowFilter::ColumnRange { family, start, end } => {
            out.push_str("columns(");
            arg(out, family.as_bytes());
            bound_args(out, start, end, false);
            out.push(')');
        }
        RowFilter::ValueRange { start, end } => {
            out.push_str("values(");
            bound_args(out, start, end, true);
            out.push(')');
        }
        RowFilter::TimestampRange(r) => {
            out.push_str("time(");
            let mut parts = Vec::new();
            if r.start > 0 {
                parts.push(format!("from={}", r.start));
            }
            if r.end < u64::MAX {
                parts.push(format!("to={}", r.end));
            }
            out.push_str(&parts.join(","));
            out.push(')');
        }
        RowFilter::CellsPerRowLimit(n) => out.push_str(&format!("cells_per_row({n})")),
        RowFilter::CellsPerRowOffset(n) => out.push_str(&format!("offset({n})")),
        RowFilter::CellsPerColumnLimit(n) => out.push_str(&format!("cells_per_column({n})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let f =
            parse(br"chain(family(anchor),qualifier(.*\.cnn\.com),cells_per_column(1))").unwrap();
        assert_eq!(
            f,
            RowFilter::Chain(vec![
                RowFilter::FamilyNameRegex("anchor".into()),
                RowFilter::ColumnQualifierRegex(br".*\.cnn\.com".to_vec()),
                RowFilter::CellsPerColumnLimit(1),
            ])
        );
        let f = parse(b"condition(value(yes),all,strip)").unwrap();
        assert!(matches!(
            f,
            RowFilter::Condition {
                false_filter: Some(_),
                ..
            }
        ));
        // Regex parentheses nest; `\,` keeps a comma; `%2C` too.
        assert_eq!(
            parse(br"value((a|b)+\,x)").unwrap(),
            RowFilter::ValueRegex(br"(a|b)+\,x".to_vec())
        );
        assert_eq!(
            parse(b"value(a%2Cb)").unwrap(),
            RowFilter::ValueRegex(b"a,b".to_vec())
        );
        assert_eq!(
            parse(b"columns(anchor,from=a,to=c)").unwrap(),
            RowFilter::ColumnRange {
                family: "anchor".into(),
                start: Bound::Included(b"a".to_vec()),
                end: Bound::Excluded(b"c".to_vec())
            }
        );
        assert_eq!(
            parse(b"values(after=%,through=z)").unwrap(),
            RowFilter::ValueRange {
                start: Bound::Excluded(Vec::new()),
                end: Bound::Included(b"z".to_vec())
            }
        );
        assert_eq!(
            parse(b"time(from=10,to=20)").unwrap(),
            RowFilter::TimestampRange(TimeRange { start: 10, end: 20 })
        );
        assert_eq!(parse(b"sample(0.5)").unwrap(), RowFilter::RowSample(0.5));
        assert_eq!(
            parse(b"interleave()").unwrap(),
            RowFilter::Interleave(vec![])
        );
    }

    #[test]
    fn formats_read_back() {
        for text in [
            &br"chain(family(anchor),qualifier(.*\.cnn\.com),cells_per_column(1))"[..],
            b"interleave(all,chain(label(x),sink),none)",
            b"condition(row(a.*),strip)",
            b"condition(row(a.*),strip,offset(2))",
            b"columns(f,after=%00%FF,through=z)",
            b"columns(f)",
            b"values(from=%)",
            b"time(from=5)",
            b"time()",
            b"sample(0.25)",
            b"chain(cells_per_row(3),value(a%2Cb%5C%28))",
        ] {
            let f = parse(text).unwrap();
            let back = format(&f);
            assert_eq!(parse(back.as_bytes()).unwrap(), f, "{back}");
        }
        assert_eq!(
            format(&parse(br"chain(family(anchor),cells_per_column(1))").unwrap()),
            "chain(family(anchor),cells_per_column(1))"
        );
    }

    #[test]
    fn rejects_bad_filters() {
        for bad in [
            &b""[..],
            b"chain(",
            b"chain(all",
            b"chain(all))",
            b"bogus",
            b"value(()",
            b"value([)",
            b"family(a,b)",
            b"sample(2)",
            b"sample(x)",
            b"cells_per_row(-1)",
            b"columns()",
            b"columns(f,from=a,after=b)",
            b"columns(f,x)",
            b"time(from=x)",
            b"time(at=1)",
            b"condition(all)",
            b"condition(all,all,all,all)",
            b"condition(sink,all)",
            b"label(a b)",
            b"value(%zz)",
            b"all(",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let deep = "chain(".repeat(100) + &")".repeat(100);
        assert!(parse(deep.as_bytes()).is_err());
    }
}
