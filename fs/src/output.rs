//! Scan output: TSV or JSON lines, lossless for arbitrary bytes.
//!
//! TSV: one cell a line, `row TAB family:qualifier TAB timestamp TAB value`.
//! In row, column and value, a backslash is written `\\`, tab `\t`, newline
//! `\n`, carriage return `\r`; any other byte below 0x20, DEL, and every byte
//! that is not part of a valid UTF-8 sequence is written `\xHH`. Valid UTF-8
//! text is kept as it is.
//!
//! JSON lines: one object a line, `{"row":…,"family":…,"qualifier":…,
//! "timestamp":…,"value":…}`. Byte strings are decoded as UTF-8; each byte
//! that is not part of a valid sequence becomes the lone surrogate
//! `\udcXX` (PEP 383 "surrogateescape"), so in Python
//! `s.encode("utf-8", "surrogateescape")` gives back the exact bytes.

use crate::query::Format;
use engine::Cell;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A piece of a byte string: a valid UTF-8 run, or one byte outside any valid sequence.
enum Piece<'a> {
    Text(&'a str),
    Byte(u8),
}

/// Splits `bytes` into valid UTF-8 runs and stray bytes, in order.
fn pieces(mut bytes: &[u8], mut f: impl FnMut(Piece<'_>)) {
    while !bytes.is_empty() {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                f(Piece::Text(s));
                return;
            }
            Err(e) => {
                let good = e.valid_up_to();
                if let Ok(s) = std::str::from_utf8(&bytes[..good]) {
                    f(Piece::Text(s));
                }
                let bad = e.error_len().unwrap_or(bytes.len() - good);
                for &b in &bytes[good..good + bad] {
                    f(Piece::Byte(b));
                }
                bytes = &bytes[good + bad..];
            }
        }
    }
}

fn hex_escape(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&[b'\\', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
}

/// Appends the TSV escaping of `bytes`.
pub fn tsv_escape(bytes: &[u8], out: &mut Vec<u8>) {
    pieces(bytes, |p| match p {
        Piece::Text(s) => {
            for c in s.chars() {
                match c {
                    '\\' => out.extend_from_slice(b"\\\\"),
                    '\t' => out.extend_from_slice(b"\\t"),
                    '\n' => out.extend_from_slice(b"\\n"),
                    '\r' => out.extend_from_slice(b"\\r"),
                    c if (c as u32) < 0x20 || c as u32 == 0x7F => hex_escape(out, c as u8),
                    c => {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
        }
        Piece::Byte(b) => hex_escape(out, b),
    });
}

/// Appends `bytes` as a JSON string (surrogateescape for invalid UTF-8).
pub fn json_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    pieces(bytes, |p| match p {
        Piece::Text(s) => {
            for c in s.chars() {
                match c {
                    '"' => out.extend_from_slice(b"\\\""),
                    '\\' => out.extend_from_slice(b"\\\\"),
                    '\n' => out.extend_from_slice(b"\\n"),
                    '\r' => out.extend_from_slice(b"\\r"),
                    '\t' => out.extend_from_slice(b"\\t"),
                    c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                        out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                    }
                    c => {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
        }
        Piece::Byte(b) => out.extend_from_slice(format!("\\udc{b:02x}").as_bytes()),
    });
    out.push(b'"');
}

/// The signed decimal of a 64-bit big-endian counter value.
pub fn counter_decimal(value: &[u8]) -> Option<String> {
    let b: [u8; 8] = value.try_into().ok()?;
    Some(i64::from_be_bytes(b).to_string())
}

/// Appends one cell as a line; with `counter`, an 8-byte value is a
/// counter: TSV shows its decimal instead of the bytes (the bytes follow
/// from it), JSON adds `"counter":<decimal>` after the value.
pub fn write_cell_as(format: Format, cell: &Cell, counter: bool, out: &mut Vec<u8>) {
    let decimal = if counter {
        counter_decimal(&cell.value)
    } else {
        None
    };
    match format {
        Format::Tsv => {
            tsv_escape(&cell.row, out);
            out.push(b'\t');
            let mut col = cell.family.as_bytes().to_vec();
            col.push(b':');
            col.extend_from_slice(&cell.qualifier);
            tsv_escape(&col, out);
            out.push(b'\t');
            out.extend_from_slice(cell.timestamp.to_string().as_bytes());
            out.push(b'\t');
            match &decimal {
                Some(d) => out.extend_from_slice(d.as_bytes()),
                None => tsv_escape(&cell.value, out),
            }
            out.push(b'\n');
        }
        Format::Json => {
            out.extend_from_slice(b"{\"row\":");
            json_string(&cell.row, out);
            out.extend_from_slice(b",\"family\":");
            json_string(cell.family.as_bytes(), out);
            out.extend_from_slice(b",\"qualifier\":");
            json_string(&cell.qualifier, out);
            out.extend_from_slice(b",\"timestamp\":");
            out.extend_from_slice(cell.timestamp.to_string().as_bytes());
            out.extend_from_slice(b",\"value\":");
            json_string(&cell.value, out);
            if let Some(d) = &decimal {
                out.extend_from_slice(b",\"counter\":");
                out.extend_from_slice(d.as_bytes());
            }
            out.extend_from_slice(b"}\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes [`tsv_escape`], to check its round trip.
    fn tsv_unescape(s: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            if s[i] != b'\\' {
                out.push(s[i]);
                i += 1;
                continue;
            }
            match *s.get(i + 1)? {
                b'\\' => out.push(b'\\'),
                b't' => out.push(b'\t'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b'x' => {
                    let h = std::str::from_utf8(s.get(i + 2..i + 4)?).ok()?;
                    out.push(u8::from_str_radix(h, 16).ok()?);
                    i += 4;
                    continue;
                }
                _ => return None,
            }
            i += 2;
        }
        Some(out)
    }

    fn cell(row: &[u8], q: &[u8], v: &[u8]) -> Cell {
        Cell {
            row: row.to_vec(),
            family: "f".into(),
            qualifier: q.to_vec(),
            timestamp: 42,
            value: v.to_vec().into(),
        }
    }

    #[test]
    fn tsv_keeps_text_and_escapes_the_rest() {
        let mut out = Vec::new();
        write_cell_as(
            Format::Tsv,
            &cell("héllo".as_bytes(), b"a\tb", b"x\\y\n\xff\x01"),
            false,
            &mut out,
        );
        assert_eq!(out, "héllo\tf:a\\tb\t42\tx\\\\y\\n\\xff\\x01\n".as_bytes());
    }

    #[test]
    fn tsv_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        let mut out = Vec::new();
        tsv_escape(&all, &mut out);
        assert!(!out.contains(&b'\t') && !out.contains(&b'\n'));
        assert_eq!(tsv_unescape(&out).unwrap(), all);
        let mixed = "ü\u{7f}€".as_bytes().to_vec();
        let mut out = Vec::new();
        tsv_escape(&mixed, &mut out);
        assert_eq!(tsv_unescape(&out).unwrap(), mixed);
    }

    #[test]
    fn json_uses_surrogateescape() {
        let mut out = Vec::new();
        json_string(b"a\"\\\n\x01\xff\xc3\xa9", &mut out);
        assert_eq!(out, b"\"a\\\"\\\\\\n\\u0001\\udcff\xc3\xa9\"");
    }

    #[test]
    fn counters_show_as_decimal() {
        let c = cell(b"r", b"hits", &(-42i64).to_be_bytes());
        let mut out = Vec::new();
        write_cell_as(Format::Tsv, &c, true, &mut out);
        assert_eq!(out, b"r\tf:hits\t42\t-42\n");
        let mut out = Vec::new();
        write_cell_as(Format::Json, &c, true, &mut out);
        assert!(
            out.ends_with(b",\"counter\":-42}\n"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        // Not 8 bytes: shown as bytes.
        let mut out = Vec::new();
        write_cell_as(Format::Tsv, &cell(b"r", b"q", b"abc"), true, &mut out);
        assert_eq!(out, b"r\tf:q\t42\tabc\n");
    }

    #[test]
    fn json_line_has_every_field() {
        let mut out = Vec::new();
        write_cell_as(Format::Json, &cell(b"r", b"q", b"v"), false, &mut out);
        assert_eq!(
            out,
            b"{\"row\":\"r\",\"family\":\"f\",\"qualifier\":\"q\",\"timestamp\":42,\"value\":\"v\"}\n"
        );
    }
}
