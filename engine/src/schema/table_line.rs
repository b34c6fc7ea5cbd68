//! The `.table` line of `.schema`: settings of the table itself rather than
//! of one family (a family's name never starts with '.', so the line is not
//! taken for one). It holds `deletion_protection=true|false` and
//! `change_retention=DURATION|off` (the change log, docs/changes.md); the line
//! is written only when a setting differs from its default, so a table
//! without one reads as it always has.

use super::{bad, TableSchema};
use crate::error::Result;

/// The first word of the line.
pub const TABLE_LINE: &str = ".table";

/// A parsed `.table` line: the settings it gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct TableLine {
    deletion_protection: Option<bool>,
    /// Microseconds; 0 turns the log off.
    change_retention: Option<u64>,
}

impl TableLine {
    /// Sets what the line gave; what it omits stays as it is (a whole
    /// `.schema` rewritten without the line keeps the protection: turning
    /// it off takes `deletion_protection=false`, said on purpose).
    pub(super) fn apply(self, s: &mut TableSchema) {
        if let Some(p) = self.deletion_protection {
            s.deletion_protection = p;
        }
        if let Some(r) = self.change_retention {
            s.change_retention = r;
        }
    }
}

/// Takes the `.table` line out of `text`, left blank so that the other
/// lines keep their numbers in errors.
pub(super) fn split(text: &str) -> Result<(String, Option<TableLine>)> {
    let mut rest = String::with_capacity(text.len());
    let mut found: Option<(usize, TableLine)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        let mut words = content.split_ascii_whitespace();
        if words.next() != Some(TABLE_LINE) {
            rest.push_str(raw);
            rest.push('\n');
            continue;
        }
        if let Some((prev, _)) = found {
            return Err(bad(
                line,
                format!("{TABLE_LINE} is already given on line {prev}"),
            ));
        }
        let mut t = TableLine::default();
        for tok in words {
            let (k, v) = tok
                .split_once('=')
                .ok_or_else(|| bad(line, format!("expected key=value, found {tok:?}")))?;
            match k {
                "deletion_protection" => {
                    if t.deletion_protection.is_some() {
                        return Err(bad(line, format!("{k} is given twice")));
                    }
                    t.deletion_protection = Some(match v {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(bad(
                                line,
                                format!("deletion_protection {v:?} is not true or false"),
                            ))
                        }
                    });
                }
                "change_retention" => {
                    if t.change_retention.is_some() {
                        return Err(bad(line, format!("{k} is given twice")));
                    }
                    let micros = match v {
                        "off" | "0" => 0,
                        _ => crate::duration::parse_duration(v).map_err(|e| {
                            bad(
                                line,
                                format!("change_retention: {}", e.replace("max_age", "value")),
                            )
                        })?,
                    };
                    if micros > super::MAX_CHANGE_RETENTION {
                        return Err(bad(
                            line,
                            format!("change_retention {v:?} is above the limit of 7d"),
                        ));
                    }
                    t.change_retention = Some(micros);
                }
                _ => {
                    return Err(bad(
                        line,
                        format!(
                            "unknown {TABLE_LINE} setting {k:?}; the known ones are \
                             deletion_protection and change_retention"
                        ),
                    ))
                }
            }
        }
        found = Some((line, t));
        rest.push('\n');
    }
    Ok((rest, found.map(|(_, t)| t)))
}

/// The line for `s` (without newline), if any setting is not its default.
pub(super) fn format(s: &TableSchema) -> Option<String> {
    let mut line = TABLE_LINE.to_string();
    if s.deletion_protection {
        line.push_str(" deletion_protection=true");
    }
    if s.change_retention > 0 {
        line.push_str(" change_retention=");
        line.push_str(&crate::duration::duration_str(s.change_retention));
    }
    (line.len() > TABLE_LINE.len()).then_some(line)
}

#[cfg(test)]
mod tests {
    use super::super::text::tests::Names;
    use super::super::*;
    use crate::error::Error;

    #[test]
    fn table_line_sets_and_keeps_protection() {
        let s = TableSchema::with_families([FamilySchema::new("a")]);
        assert!(!format(&s, &Names).contains(".table"));
        let (p, _) = s
            .apply_text(".table deletion_protection=true\n", &Names, false)
            .unwrap();
        assert!(p.deletion_protection);
        assert_eq!(p.families, s.families);
        let text = format(&p, &Names);
        assert!(
            text.starts_with(".table deletion_protection=true\n"),
            "{text}"
        );
        // Round trip, and a rewrite without the line keeps it.
        assert_eq!(p.apply_text(&text, &Names, true).unwrap().0, p);
        let (kept, _) = p.apply_text("a\n", &Names, true).unwrap();
        assert!(kept.deletion_protection);
        let (off, _) = p
            .apply_text(
                ".table deletion_protection=false # on purpose\n",
                &Names,
                false,
            )
            .unwrap();
        assert!(!off.deletion_protection);
        // The change log: set, printed, kept by a rewrite, turned off.
        let (c, _) = s
            .apply_text(".table change_retention=36h\n", &Names, false)
            .unwrap();
        assert_eq!(c.change_retention, 36 * 3_600_000_000);
        let text = format(&c, &Names);
        assert!(text.starts_with(".table change_retention="), "{text}");
        assert_eq!(c.apply_text(&text, &Names, true).unwrap().0, c);
        assert_eq!(c.apply_text("a\n", &Names, true).unwrap().0, c);
        let (off, _) = c
            .apply_text(".table change_retention=off\n", &Names, false)
            .unwrap();
        assert!(!off.logs_changes());
        // Families still parse alongside, and errors keep their line numbers.
        assert_eq!(
            parse(".table deletion_protection=true\nb\n", &Names)
                .unwrap()
                .len(),
            1
        );
        for (text, line) in [
            ("a\n.table deletion_protection=maybe\n", 2),
            (".table\n.table\n", 2),
            (".table colour=red\n", 1),
            (".table deletion_protection\n", 1),
            (".table\nb bogus=1\n", 2),
            (".table change_retention=8d\n", 1),
            (".table change_retention=soon\n", 1),
            (".table change_retention=1h change_retention=2h\n", 1),
        ] {
            match s.apply_text(text, &Names, false) {
                Err(Error::BadSchema { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
