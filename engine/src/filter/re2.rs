//! RE2 byte patterns, as Cloud Bigtable takes them, in the `regex` crate's
//! syntax.
//!
//! A Cloud Bigtable regex is bytes, not text: clients send raw bytes that are
//! not UTF-8 (the official clients' literal-value filters copy every byte
//! from 0x80 up unescaped), and `\C` is RE2's any-byte wildcard. The `regex` crate
//! takes a `&str` and has no `\C` or `\Q...\E`, so the pattern is rewritten:
//! a byte >= 0x80, bare or after a backslash, becomes `\xHH` (that byte, as
//! the crate's byte regexes with Unicode off read it); `\C` becomes the class
//! of every byte (a class, so it also works inside `[...]`); `\Q...\E` becomes
//! its bytes, each escaped. Everything else is ASCII and passes as written.
//!
//! A multi-byte character is matched as its bytes in a row, so a quantifier
//! after one repeats its last byte (as in RE2's Latin-1 mode); group it to
//! repeat the character: `(?:☃)+`.

use std::fmt::Write;

/// The `regex` crate's error for `translated` (a pattern in its syntax) on
/// one line, as Cloud Bigtable and the emulator give it: a syntax error is
/// what is wrong and where (`unclosed group at offset 1 ("(")`) instead
/// of the crate's multi-line diagram with a caret.
pub(crate) fn one_line_error(e: &regex::Error, translated: &str) -> String {
    if let regex::Error::Syntax(_) = e {
        // Parsed again as the crate parses it (bytes, Unicode off), to
        // have the error's kind and span apart.
        let again = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(translated);
        let found = match &again {
            Err(regex_syntax::Error::Parse(a)) => Some((a.kind().to_string(), *a.span())),
            Err(regex_syntax::Error::Translate(h)) => Some((h.kind().to_string(), *h.span())),
            _ => None,
        };
        if let Some((kind, span)) = found {
            let at = span.start.offset;
            return match translated.get(at..span.end.offset) {
                Some(f) if !f.is_empty() => format!("{kind} at offset {at} ({f:?})"),
                _ => format!("{kind} at offset {at}"),
            };
        }
    }
    let text = e.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" ")
}

/// `pattern` in the `regex` crate's syntax (see the module comment).
pub(crate) fn to_regex_syntax(pattern: &[u8]) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut i = 0;
    while let Some(&b) = pattern.get(i) {
        i += 1;
        if b != b'\\' {
            push_byte(&mut out, b, false);
            continue;
        }
        match pattern.get(i) {
            None => out.push('\\'),
            Some(b'C') => {
                i += 1;
                out.push_str(r"[\x00-\xFF]");
            }
            Some(b'Q') => {
                i += 1;
                let rest = &pattern[i..];
                let end = rest.windows(2).position(|w| w == br"\E");
                let quoted = &rest[..end.unwrap_or(rest.len())];
                for &q in quoted {
                    push_byte(&mut out, q, true);
                }
                i += quoted.len() + end.map_or(0, |_| 2);
            }
            Some(&e) if e >= 0x80 => {
                i += 1;
                push_byte(&mut out, e, true);
            }
            Some(&e) => {
                i += 1;
                out.push('\\');
                out.push(char::from(e));
            }
        }
    }
    out
}

/// One byte of the pattern: ASCII as itself (as `\xHH` if `literal` and
/// it is not a letter or digit, so that it means only itself), any other
/// byte as `\xHH`.
fn push_byte(out: &mut String, b: u8, literal: bool) {
    if b >= 0x80 || (literal && !b.is_ascii_alphanumeric()) {
        let _ = write!(out, r"\x{b:02X}");
    } else {
        out.push(char::from(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line() {
        let err = |p: &str| {
            let t = to_regex_syntax(p.as_bytes());
            let e = regex::bytes::RegexBuilder::new(&t)
                .unicode(false)
                .build()
                .unwrap_err();
            one_line_error(&e, &t)
        };
        assert_eq!(err("a("), "unclosed group at offset 1 (\"(\")");
        assert_eq!(err("a)"), "unopened group at offset 1 (\")\")");
        assert!(err("*").starts_with("repetition"), "{}", err("*"));
        assert!(err("\\").contains("offset 0"), "{}", err("\\"));
        assert!(!err("a\n(").contains('\n'));
        let big = regex::bytes::RegexBuilder::new("a{1000}{1000}")
            .size_limit(100)
            .build()
            .unwrap_err();
        assert!(!one_line_error(&big, "").contains('\n'));
    }

    #[test]
    fn raw_bytes_become_hex_escapes() {
        assert_eq!(to_regex_syntax(b"a\xffb"), r"a\xFFb");
        assert_eq!(to_regex_syntax("☃".as_bytes()), r"\xE2\x98\x83");
        // An escaped high byte is that byte.
        assert_eq!(to_regex_syntax(b"\\\xaa"), r"\xAA");
    }

    #[test]
    fn any_byte_and_quoted_text() {
        assert_eq!(to_regex_syntax(br"a\Cb"), r"a[\x00-\xFF]b");
        assert_eq!(to_regex_syntax(br"[a\C]"), r"[a[\x00-\xFF]]");
        assert_eq!(to_regex_syntax(br"\Qa.b\E.c"), r"a\x2Eb.c");
        assert_eq!(to_regex_syntax(b"\\Q*\xff"), r"\x2A\xFF");
        // Other escapes pass as written; a trailing backslash stays (the
        // crate then refuses it).
        assert_eq!(to_regex_syntax(br"\d\x00\\"), r"\d\x00\\");
        assert_eq!(to_regex_syntax(b"x\\"), "x\\");
    }
}
