use super::*;
use engine::{Predicate, TxnOutcome};

fn one(s: &str) -> Op {
    parse_line(s.as_bytes()).unwrap().unwrap()
}

#[test]
fn parses_every_kind() {
    assert_eq!(
        one("set com.cnn.www anchor:cnnsi.com CNN"),
        Op::Set {
            row: b"com.cnn.www".to_vec(),
            family: "anchor".into(),
            qualifier: b"cnnsi.com".to_vec(),
            value: b"CNN".to_vec(),
            ts: None
        }
    );
    assert_eq!(
        one("set r f:q%20x a%20b%0A 17"),
        Op::Set {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: b"q x".to_vec(),
            value: b"a b\n".to_vec(),
            ts: Some(17)
        }
    );
    assert_eq!(
        one("delete r f:a:b"),
        Op::Delete {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: b"a:b".to_vec(),
            ts: None
        }
    );
    assert_eq!(
        one("delete\tr\tf:\t5"),
        Op::Delete {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: vec![],
            ts: Some(5)
        }
    );
    assert_eq!(
        one("deletefamily r f"),
        Op::DeleteFamily {
            row: b"r".to_vec(),
            family: "f".into()
        }
    );
    assert_eq!(one("deleterow %00"), Op::DeleteRow { row: vec![0] });
    assert_eq!(
        one("increment r f:n -3"),
        Op::Increment {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: b"n".to_vec(),
            delta: -3
        }
    );
    assert_eq!(
        one("add r a:n -3"),
        Op::Add {
            row: b"r".to_vec(),
            family: "a".into(),
            qualifier: b"n".to_vec(),
            input: -3,
            ts: 0
        }
    );
    assert_eq!(
        one("add r a:n +9223372036854775807 1000"),
        Op::Add {
            row: b"r".to_vec(),
            family: "a".into(),
            qualifier: b"n".to_vec(),
            input: i64::MAX,
            ts: 1000
        }
    );
    assert_eq!(
        one("append r f:l %"),
        Op::Append {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: b"l".to_vec(),
            value: vec![]
        }
    );
    assert_eq!(
        one("ifnot r f:lock"),
        Op::Guard {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: b"lock".to_vec(),
            value: None,
            expect: false
        }
    );
    assert_eq!(parse_line(b"   # comment").unwrap(), None);
    assert_eq!(parse_line(b"  \r").unwrap(), None);
}

#[test]
fn rejects_bad_lines_with_a_reason() {
    for bad in [
        "frob r f:q v",
        "set r f:q",
        "set r fq v",
        "set r :q v",
        "set r f:q v 12x",
        "set r f:q v 99999999999999999999",
        "set r f:q v 1 2",
        "increment r f:q 1.5",
        "add r f:q",
        "add r f:q x",
        "add r f:q 9223372036854775808",
        "add r f:q 1 -5",
        "add r f:q 1 2 3",
        "set r%zz f:q v",
        "deleterow",
    ] {
        assert!(parse_line(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn parser_reports_line_numbers_across_writes() {
    let mut p = BatchParser::default();
    assert_eq!(p.feed(b"set r f:q v\n# c\nset r f").unwrap().len(), 1);
    assert_eq!(p.feed(b":q2 w\n").unwrap().len(), 1);
    let e = p.feed(b"bogus\n").unwrap_err();
    assert_eq!(e.line, 4);
    let mut p = BatchParser::default();
    assert_eq!(p.feed(b"set a f:q 1\nset b f:q 2").unwrap().len(), 1);
    let (last, batch) = p.finish().unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].line, 2);
    assert_eq!(batch.ops(), 2);
    assert!(p.is_empty());
}

/// The batch's transactions, all chunks of at most `rows` rows together.
fn txns_in(p: &mut BatchParser, rows: usize) -> Result<Vec<Txn>, BatchError> {
    let (_, mut batch) = p.finish()?;
    let mut out = Vec::new();
    batch.for_each_chunk(rows, |t| {
        assert!(t.len() <= rows.max(1));
        out.extend(t);
        Ok::<(), BatchError>(())
    })?;
    Ok(out)
}

fn txns(p: &mut BatchParser) -> Result<Vec<Txn>, BatchError> {
    txns_in(p, usize::MAX)
}

#[test]
fn chunks_keep_each_row_whole_and_in_order() {
    let mut text = Vec::new();
    for r in 0..100 {
        for q in 0..3 {
            text.extend_from_slice(format!("set r{r:03} f:q{q} v\n").as_bytes());
        }
    }
    let mut p = BatchParser::default();
    p.feed(&text).unwrap();
    let all = txns_in(&mut p, 7).unwrap();
    assert_eq!(all.len(), 100);
    for (i, t) in all.iter().enumerate() {
        assert_eq!(t.txn.row, format!("r{i:03}").into_bytes());
        assert_eq!(t.txn.ops.len(), 3);
        assert_eq!(t.first_line, i * 3 + 1);
    }
}

#[test]
fn a_row_that_comes_back_is_still_one_transaction() {
    let mut p = BatchParser::default();
    p.feed(b"set a f:x 1\nset b f:x 2\nset c f:x 3\nset a f:y 4\n")
        .unwrap();
    let (_, batch) = p.finish().unwrap();
    assert!(batch.scattered());
    let mut p = BatchParser::default();
    p.feed(b"set a f:x 1\nset b f:x 2\nset c f:x 3\nset a f:y 4\n")
        .unwrap();
    let all = txns_in(&mut p, 1).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].txn.row, b"a");
    assert_eq!(all[0].txn.ops.len(), 2);
}

#[test]
fn a_large_batch_spills_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = BatchParser::new(Some(dir.path()));
    let rows = 40_000;
    for r in 0..rows {
        p.feed(format!("set row{r:08} f:q value{r}\n").as_bytes())
            .unwrap();
    }
    let (_, mut batch) = p.finish().unwrap();
    assert!(batch.spilled());
    assert!(!batch.scattered());
    let mut seen = 0;
    batch
        .for_each_chunk(4096, |t| {
            for x in &t {
                assert_eq!(x.txn.row, format!("row{seen:08}").into_bytes());
                seen += 1;
            }
            Ok::<(), BatchError>(())
        })
        .unwrap();
    assert_eq!(seen, rows);
}

#[test]
fn groups_one_transaction_per_row_with_its_guard() {
    let mut p = BatchParser::default();
    p.feed(b"set a f:x 1\nset b f:x 2\nif a f:lock yes\nincrement a f:n 1\n")
        .unwrap();
    let txns = txns(&mut p).unwrap();
    assert_eq!(txns.len(), 2);
    assert_eq!(txns[0].txn.row, b"a");
    assert_eq!(txns[0].txn.ops.len(), 2);
    assert!(txns[0].when_held);
    let Some(engine::Guard::Cell(g)) = txns[0].txn.guard.as_ref() else {
        panic!("a cell guard")
    };
    assert_eq!(g.predicate, Predicate::Equals(b"yes".to_vec()));
    assert_eq!(txns[1].first_line, 2);
    assert!(txns[1].txn.guard.is_none());
}

#[test]
fn group_rejects_two_guards_and_idle_guards() {
    let mut p = BatchParser::default();
    p.feed(b"if a f:x\nifnot a f:y\nset a f:z 1\n").unwrap();
    assert_eq!(txns(&mut p).unwrap_err().line, 2);
    let mut p = BatchParser::default();
    p.feed(b"set b f:z 1\nif a f:x\n").unwrap();
    assert_eq!(txns(&mut p).unwrap_err().line, 2);
}

#[test]
fn results_name_rows_and_values() {
    let mut p = BatchParser::default();
    p.feed(b"increment a f:n 5\nappend a f:s x\nset b f:q 1\n")
        .unwrap();
    let txns = txns(&mut p).unwrap();
    let outcomes = vec![
        TxnOutcome {
            guard_held: true,
            results: vec![7i64.to_be_bytes().to_vec(), b"ab x".to_vec()],
        },
        TxnOutcome {
            guard_held: false,
            results: vec![],
        },
    ];
    let text = String::from_utf8(format_results(&txns, &outcomes)).unwrap();
    assert_eq!(
        text,
        "applied a\nvalue a f:n 7\nvalue a f:s ab%20x\nskipped b\n"
    );
}

#[test]
fn time_range_deletes_and_filter_guards() {
    let one = |s: &str| parse_line(s.as_bytes()).unwrap().unwrap();
    let range = |l: &str| match one(l) {
        Op::DeleteVersions { range, .. } => (range.start, range.end),
        other => panic!("{other:?}"),
    };
    assert_eq!(range("delete r f:q 10..20"), (10, 20));
    assert_eq!(range("delete r f:q 10.."), (10, u64::MAX));
    assert_eq!(range("delete r f:q ..20"), (0, 20));
    assert_eq!(range("delete r f:q .."), (0, u64::MAX));
    assert!(matches!(
        one("delete r f:q 10"),
        Op::Delete { ts: Some(10), .. }
    ));
    for bad in [
        "delete r f:q 20..10",
        "delete r f:q 5..5",
        "delete r f:q x..5",
        "delete r f:q 1...5",
        "if r filter=bogus",
        "if r filter=all extra",
        "if r filter=value(()",
    ] {
        assert!(parse_line(bad.as_bytes()).is_err(), "{bad}");
    }
    match one("ifnot r filter=chain(family(f),value(free))") {
        Op::FilterGuard {
            row,
            filter,
            expect,
        } => {
            assert_eq!(row, b"r");
            assert!(!expect);
            assert!(matches!(filter, engine::RowFilter::Chain(_)));
        }
        other => panic!("{other:?}"),
    }
    let mut p = BatchParser::default();
    p.feed(b"if r filter=value(free)\nset r f:owner me\ndelete r f:old 1..5\n")
        .unwrap();
    let txns = txns_in(&mut p, 100).unwrap();
    assert_eq!(txns.len(), 1);
    assert!(matches!(
        txns[0].txn.guard,
        Some(engine::Guard::Filter(engine::RowFilter::ValueRegex(_)))
    ));
    assert_eq!(txns[0].txn.ops.len(), 2);
    let mut p = BatchParser::default();
    p.feed(b"if r filter=all\nif r f:q\nset r f:q v\n").unwrap();
    assert!(txns_in(&mut p, 100).is_err(), "two guards on one row");
}

#[test]
fn an_unfinished_line_and_a_batchs_grouping_are_bounded() {
    let mut p = BatchParser::with_limits(None, 16, 1 << 20);
    p.feed(b"set r f:q 0123").unwrap();
    let e = p.feed(b"456789").unwrap_err();
    assert!(e.too_big && e.line == 1, "{e}");
    assert!(p.partial_len() <= 16);
    // A whole line in one write is held to the same limit.
    let mut p = BatchParser::with_limits(None, 16, 1 << 20);
    let e = p.feed(b"set r f:q 0123456789\n").unwrap_err();
    assert!(e.too_big, "{e}");
    // Rows out of order are grouped whole: refused once over the limit.
    let mut p = BatchParser::with_limits(None, 1 << 10, 3 * (batch::LINE_COST + 16));
    p.feed(b"set a f:q 1\nset b f:q 2\n").unwrap();
    let e = p.feed(b"set a f:q 3\nset c f:q 4\n").unwrap_err();
    assert!(e.too_big, "{e}");
    // One row's lines are grouped together: the same limit at close.
    let mut p = BatchParser::with_limits(None, 1 << 10, 3 * (batch::LINE_COST + 16));
    p.feed(b"set a f:q 1\nset a f:q 2\nset a f:q 3\nset a f:q 4\n")
        .unwrap();
    let (_, mut batch) = p.finish().unwrap();
    let e = batch
        .for_each_chunk::<BatchError>(100, |_| Ok(()))
        .unwrap_err();
    assert!(e.too_big, "{e}");
}

#[test]
fn repeated_appends_and_increments_of_a_column_fold_into_one() {
    let lines: Vec<Line> = [
        "append r f:q a",
        "increment r f:n 2",
        "append r f:q b",
        "increment r f:n -5",
        "append r f:p x",
        "append r f:q c",
        "set r f:q z",
        "append r f:q d",
        "increment r f:n 9223372036854775807",
        "increment r f:n 9",
    ]
    .iter()
    .enumerate()
    .map(|(i, l)| Line {
        line: i + 1,
        op: one(l),
    })
    .collect();
    let txns = group(lines).unwrap();
    let ops = txns[0].ops();
    let app = |q: &str, d: &str| engine::RowOp::Append {
        family: "f".into(),
        qualifier: q.as_bytes().to_vec(),
        data: d.as_bytes().to_vec(),
    };
    let inc = |d: i64| engine::RowOp::Increment {
        family: "f".into(),
        qualifier: b"n".to_vec(),
        delta: d,
    };
    assert_eq!(
        ops,
        &[
            app("q", "abc"),
            inc((2i64 - 5).wrapping_add(i64::MAX).wrapping_add(9)),
            app("p", "x"),
            engine::RowOp::Mutate(engine::Mutation::SetCell {
                family: "f".into(),
                qualifier: b"q".to_vec(),
                timestamp: None,
                value: b"z".to_vec(),
            }),
            app("q", "d"),
        ]
    );
}
