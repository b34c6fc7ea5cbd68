//! Property-based fuzzing of the file system's parsers of outside input: the
//! `.mutate` batch lines (whole, and fed in arbitrary pieces), `.scan` query
//! names, key names and their `%XX` escapes (with round trips), version and
//! `@N` names, the schema file's text, and `/proc` task status text. Each
//! must return an error or a value, never panic.
//!
//! `FUZZ_CASES=n` runs n cases per target (CI default: 512).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use fs::fuzz::mutate::{parse_line, BatchError, BatchParser};
use fs::fuzz::names;
use proptest::prelude::*;
use testkit::fuzz::config;

/// Bytes that look like the grammar more often than random bytes do.
fn mutate_line() -> impl Strategy<Value = Vec<u8>> {
    let word = prop_oneof![
        Just("set".to_string()),
        Just("delete".to_string()),
        Just("deletefamily".to_string()),
        Just("deleterow".to_string()),
        Just("increment".to_string()),
        Just("append".to_string()),
        Just("if".to_string()),
        Just("ifnot".to_string()),
        Just("%".to_string()),
        "[a-z:%0-9A-F]{0,10}",
        "-?[0-9]{1,25}",
        "%[0-9A-Fa-fzZ]{0,2}",
    ];
    prop::collection::vec(word, 0..6).prop_map(|ws| ws.join(" ").into_bytes())
}

/// Text that looks like the filter grammar.
fn filter_text() -> impl Strategy<Value = Vec<u8>> {
    let word = prop_oneof![
        Just("chain(".to_string()),
        Just("interleave(".to_string()),
        Just("condition(".to_string()),
        Just("all".to_string()),
        Just("none".to_string()),
        Just("sink".to_string()),
        Just("strip".to_string()),
        Just("label(x)".to_string()),
        Just("row(".to_string()),
        Just("family(".to_string()),
        Just("qualifier(".to_string()),
        Just("value(".to_string()),
        Just("sample(0.5)".to_string()),
        Just("columns(f,from=a,to=b)".to_string()),
        Just("values(after=a)".to_string()),
        Just("time(from=1,to=9)".to_string()),
        Just("cells_per_row(2)".to_string()),
        Just("offset(1)".to_string()),
        Just("cells_per_column(1)".to_string()),
        Just(",".to_string()),
        Just(")".to_string()),
        "[a-z.*\\%0-9(),=]{0,6}",
    ];
    prop::collection::vec(word, 0..12).prop_map(|ws| ws.concat().into_bytes())
}

fn any_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn mutate_lines(line in prop_oneof![mutate_line(), any_bytes(80)]) {
        let _ = parse_line(&line);
    }

    #[test]
    fn mutate_batches_fed_in_pieces(
        lines in prop::collection::vec(prop_oneof![mutate_line(), any_bytes(40)], 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..5),
    ) {
        let text = lines.join(&b'\n');
        // Feeding the same bytes in any pieces gives the same result.
        let whole = {
            let mut p = BatchParser::default();
            p.feed(&text).map(|_| ()).and_then(|()| p.finish()).map(|(_, b)| b.ops())
        };
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).collect();
        points.sort();
        let mut p = BatchParser::default();
        let mut at = 0;
        let mut res = Ok(());
        for &c in &points {
            if res.is_ok() {
                res = p.feed(&text[at..c]).map(|_| ());
            }
            at = c;
        }
        let pieces = res.and_then(|()| p.feed(&text[at..]).map(|_| ())).and_then(|()| p.finish());
        prop_assert_eq!(whole.is_ok(), pieces.is_ok());
        if let Ok((_, mut batch)) = pieces {
            prop_assert_eq!(Ok(batch.ops()), whole);
            let _ = batch.for_each_chunk(3, |_| Ok::<(), BatchError>(()));
        }
    }

    #[test]
    fn scan_queries(name in prop_oneof![
        any_bytes(80),
        "[a-z=&%0-9A-F.,:\\-]{0,60}".prop_map(String::into_bytes),
        prop::collection::vec(
            "(start|end|prefix|family|fam|column|limit|versions|ts|from|to|[a-z]{1,6})=[%0-9A-Fa-z:,.\\-]{0,20}",
            0..5,
        ).prop_map(|v| v.join("&").into_bytes()),
    ]) {
        let _ = fs::fuzz::query::parse(&name);
    }

    #[test]
    fn filter_expressions(text in prop_oneof![
        any_bytes(80),
        filter_text(),
    ]) {
        // Any text parses or fails cleanly; what parses formats and reads back.
        if let Ok(f) = fs::fuzz::filter_query::parse(&text) {
            let back = fs::fuzz::filter_query::format(&f);
            prop_assert_eq!(fs::fuzz::filter_query::parse(back.as_bytes()), Ok(f));
        }
        let mut q = b"filter=".to_vec();
        q.extend_from_slice(&text);
        let _ = fs::fuzz::query::parse(&q);
        let mut line = b"if r filter=".to_vec();
        line.extend_from_slice(&text);
        let _ = parse_line(&line);
    }

    #[test]
    fn key_names_and_escapes(name in any_bytes(64)) {
        let _ = names::parse_strict(&name);
        let _ = names::parse_lenient(&name);
        let _ = names::decode_field(&name);
        let _ = names::parse_version_name(&name);
        let _ = fs::fuzz::lookup::parse_at_name(&name);
    }

    #[test]
    fn escapes_round_trip(key in any_bytes(64)) {
        let field = names::encode_field(&key);
        prop_assert_eq!(names::decode_field(&field), Some(key.clone()));
        let escaped = names::escape(&key);
        if let Some(k) = names::parse_strict(&escaped) {
            prop_assert!(k.matches(&key));
        }
        let _ = names::display_name(&key);
    }

    #[test]
    fn percent_sequences(s in "(%[0-9A-Fa-fgG%]{0,2}|[a-z]){0,12}") {
        let _ = names::decode_field(s.as_bytes());
        let _ = names::parse_strict(s.as_bytes());
        let _ = names::parse_lenient(s.as_bytes());
    }

    #[test]
    fn version_names_round_trip(ts in any::<u64>()) {
        let n = names::version_name(ts);
        // Timestamps past the engine's largest are not version names.
        let want = (ts <= engine::key::MAX_TIMESTAMP).then_some(ts);
        prop_assert_eq!(names::parse_version_name(n.as_bytes()), want);
    }

    #[test]
    fn schema_file_text(
        text in prop_oneof![
            any_bytes(200),
            prop::collection::vec(
                "[-+#]?(family|[a-z]{1,8})( [a-z_]{1,10}(=[0-9a-z.,:]{0,10})?){0,4}",
                0..6,
            ).prop_map(|v| v.join("\n").into_bytes()),
        ],
        replace_all in any::<bool>(),
    ) {
        let current = TableSchema::with_families([FamilySchema::new("f")]);
        let _ = fs::fuzz::schema_file::apply(&current, &text, replace_all);
        let rendered = fs::fuzz::schema_file::render(&current);
        let (again, dropped) = fs::fuzz::schema_file::apply(&current, &rendered, true).unwrap();
        prop_assert_eq!(again.families.len(), current.families.len());
        prop_assert!(dropped.is_empty());
    }

    #[test]
    fn proc_status_text(text in prop_oneof![
        "[ -~\n\t]{0,300}",
        prop::collection::vec(
            "(State|SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt|Pid|[A-Za-z]{1,6}):[ \t]*[0-9a-fA-FRSDZT() x]{0,20}",
            0..8,
        ).prop_map(|v| v.join("\n")),
    ]) {
        let _ = fs::fuzz::interrupt::parse_status(&text);
    }
}
