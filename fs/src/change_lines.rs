//! Change records as `.changes/` lines (docs/changes.md): per change a
//! comment `# change <commit µs> <resume token>[ gc]`, then its ops in the
//! `.mutate` syntax with every timestamp given, so that the lines written
//! into another table's `.mutate` make the same cells. A garbage
//! collection's ops are comments too (`# gc delete …`): `.mutate` skips
//! them, and a replica collects by its own rules.

use crate::names::encode_field;
use engine::changes::{ChangeRecord, Position};
use engine::Mutation;

/// Appends the lines of `records`, read from position `after`; returns
/// the position after the last.
pub fn write_batch(
    records: &[ChangeRecord],
    after: Position,
    family: Option<&str>,
    out: &mut Vec<u8>,
) -> Position {
    let mut at = after;
    for r in records {
        at = at.after_record(r.commit_ts);
        write_record(r, &at.to_token(), family, out);
    }
    at
}

/// Whether `op` concerns `family` (a row delete concerns every family).
fn touches(op: &Mutation, family: &str) -> bool {
    match op {
        Mutation::SetCell { family: f, .. }
        | Mutation::DeleteCells { family: f, .. }
        | Mutation::DeleteFamily { family: f }
        | Mutation::AddToCell { family: f, .. } => f == family,
        Mutation::DeleteRow => true,
    }
}

fn column(family: &str, qualifier: &[u8]) -> Vec<u8> {
    let mut c = family.as_bytes().to_vec();
    c.push(b':');
    c.extend_from_slice(qualifier);
    encode_field(&c)
}

/// Appends `r`'s lines to `out` (nothing if `family` leaves no op);
/// `token` resumes after it.
pub fn write_record(r: &ChangeRecord, token: &str, family: Option<&str>, out: &mut Vec<u8>) {
    let ops: Vec<&Mutation> = r
        .mutations
        .iter()
        .filter(|op| family.is_none_or(|f| touches(op, f)))
        .collect();
    if ops.is_empty() {
        return;
    }
    out.extend_from_slice(format!("# change {} {token}", r.commit_ts).as_bytes());
    if r.gc {
        out.extend_from_slice(b" gc");
    }
    out.push(b'\n');
    let row = encode_field(&r.row);
    for op in ops {
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(5);
        match op {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp,
                value,
            } => {
                words.push(b"set".to_vec());
                words.push(row.clone());
                words.push(column(family, qualifier));
                words.push(encode_field(value));
                words.push(timestamp.unwrap_or(r.commit_ts).to_string().into_bytes());
            }
            Mutation::DeleteCells {
                family,
                qualifier,
                range,
            } => {
                words.push(b"delete".to_vec());
                words.push(row.clone());
                words.push(column(family, qualifier));
                if *range != engine::TimeRange::ALL {
                    let end = if range.end == u64::MAX {
                        String::new()
                    } else {
                        range.end.to_string()
                    };
                    words.push(format!("{}..{end}", range.start).into_bytes());
                }
            }
            Mutation::DeleteFamily { family } => {
                words.push(b"deletefamily".to_vec());
                words.push(row.clone());
                words.push(encode_field(family.as_bytes()));
            }
            Mutation::DeleteRow => {
                words.push(b"deleterow".to_vec());
                words.push(row.clone());
            }
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                input,
            } => {
                words.push(b"add".to_vec());
                words.push(row.clone());
                words.push(column(family, qualifier));
                words.push(input.to_string().into_bytes());
                words.push(timestamp.to_string().into_bytes());
            }
        }
        if r.gc {
            // A comment `.mutate` skips: a replica applies its own GC rules.
            out.extend_from_slice(b"# gc ");
        }
        out.extend_from_slice(&words.join(&b' '));
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::{parse_line, Op};

    #[test]
    fn lines_parse_back_as_the_same_ops() {
        let r = ChangeRecord {
            row: b"r w\0".to_vec(),
            commit_ts: 77,
            gc: false,
            mutations: vec![
                Mutation::SetCell {
                    family: "f".into(),
                    qualifier: b"q:x".to_vec(),
                    timestamp: Some(5),
                    value: b"a b%\n".to_vec(),
                },
                Mutation::DeleteCells {
                    family: "f".into(),
                    qualifier: Vec::new(),
                    range: engine::TimeRange { start: 3, end: 9 },
                },
                Mutation::DeleteCells {
                    family: "f".into(),
                    qualifier: b"q".to_vec(),
                    range: engine::TimeRange::ALL,
                },
                Mutation::DeleteFamily { family: "g".into() },
                Mutation::DeleteRow,
            ],
        };
        let mut out = Vec::new();
        write_record(&r, "77.1", None, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# change 77 77.1");
        assert_eq!(lines.len(), 6, "{text}");
        assert_eq!(parse_line(lines[0].as_bytes()).unwrap(), None);
        match parse_line(lines[1].as_bytes()).unwrap().unwrap() {
            Op::Set {
                row,
                family,
                qualifier,
                value,
                ts,
            } => {
                assert_eq!(row, b"r w\0");
                assert_eq!(family, "f");
                assert_eq!(qualifier, b"q:x");
                assert_eq!(value, b"a b%\n");
                assert_eq!(ts, Some(5));
            }
            other => panic!("{other:?}"),
        }
        for l in &lines[2..] {
            assert!(parse_line(l.as_bytes()).unwrap().is_some(), "{l}");
        }
        // A family filter keeps its ops and row deletes only.
        let mut only_g = Vec::new();
        write_record(&r, "t", Some("g"), &mut only_g);
        assert_eq!(String::from_utf8(only_g).unwrap().lines().count(), 3);
        let mut none = Vec::new();
        let mut no_row_delete = r.clone();
        no_row_delete.mutations.pop();
        write_record(&no_row_delete, "t", Some("h"), &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn garbage_collections_ops_are_comments_the_batch_skips() {
        let r = ChangeRecord {
            row: b"r".to_vec(),
            commit_ts: 90,
            gc: true,
            mutations: vec![Mutation::DeleteCells {
                family: "f".into(),
                qualifier: b"q".to_vec(),
                range: engine::TimeRange::exactly(7),
            }],
        };
        let mut out = Vec::new();
        write_record(&r, "90.1", None, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "# change 90 90.1 gc\n# gc delete r f:q 7..8\n");
        for l in text.lines() {
            assert_eq!(parse_line(l.as_bytes()).unwrap(), None, "{l}");
        }
        // Without the prefix, the op is the delete of that one version.
        let op = text.lines().nth(1).unwrap().strip_prefix("# gc ").unwrap();
        assert!(parse_line(op.as_bytes()).unwrap().is_some());
    }
}
