//! Row keys and qualifiers as filenames.
//!
//! Keys are arbitrary bytes; a filename may hold any byte but `/` and NUL, and
//! the names `.`/`..` and anything starting with `.` belong to the filesystem
//! itself (`.schema`, `.versions`, ...). So a key is shown with `%`, `/`, NUL
//! and a leading `.` written as `%XX` (upper-case hex); every other byte is kept,
//! so ordinary keys read naturally. The empty key is shown as a lone `%`.
//!
//! A key whose escaped form would exceed [`NAME_MAX`] bytes is shown under a
//! short stable name: the first bytes of its escaped form, then `%#`, then 16
//! hex digits of a hash of the whole key. `%#` never occurs in an escaped name,
//! so the two forms cannot be confused. Such a name is resolved by listing the
//! keys that start with its prefix and comparing hashes.

/// The longest filename the kernel accepts.
pub const NAME_MAX: usize = 255;
/// How much of the escaped key a hashed name keeps.
const HASH_PREFIX_MAX: usize = 200;
/// Marks a hashed name: `<escaped prefix>%#<16 hex digits>`.
const HASH_MARK: &[u8] = b"%#";

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Whether byte `b` at position `i` of a key must be escaped.
fn needs_escape(i: usize, b: u8) -> bool {
    matches!(b, b'%' | b'/' | 0) || (i == 0 && b == b'.')
}

/// The canonical escaped form of `key` (may be longer than [`NAME_MAX`]).
pub fn escape(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        return b"%".to_vec();
    }
    let mut out = Vec::with_capacity(key.len() + 8);
    for (i, &b) in key.iter().enumerate() {
        if needs_escape(i, b) {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        } else {
            out.push(b);
        }
    }
    out
}

/// The hash that names a long key.
pub fn key_hash(key: &[u8]) -> u64 {
    seahash::hash(key)
}

/// Whether `key` is listed under itself: nothing in it is escaped and it
/// is short enough not to be hashed.
pub fn is_own_name(key: &[u8]) -> bool {
    !key.is_empty()
        && key.len() <= NAME_MAX
        && !key.iter().enumerate().any(|(i, &b)| needs_escape(i, b))
}

/// The filename under which `key` is listed: its escaped form, or a hashed
/// name when that is too long.
pub fn display_name(key: &[u8]) -> Vec<u8> {
    let esc = escape(key);
    if esc.len() <= NAME_MAX {
        return esc;
    }
    // Cut the escaped prefix without splitting a %XX triple.
    let mut cut = HASH_PREFIX_MAX;
    for back in 1..=2 {
        if cut >= back && esc[cut - back] == b'%' {
            cut -= back;
            break;
        }
    }
    let mut out = esc[..cut].to_vec();
    out.extend_from_slice(HASH_MARK);
    out.extend_from_slice(format!("{:016x}", key_hash(key)).as_bytes());
    out
}

/// What a filename names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyName {
    /// Exactly this key.
    Key(Vec<u8>),
    /// A long key: it starts with `prefix` and hashes to `hash`.
    Hashed { prefix: Vec<u8>, hash: u64 },
}

impl KeyName {
    /// Whether `key` is the key this name stands for.
    pub fn matches(&self, key: &[u8]) -> bool {
        match self {
            KeyName::Key(k) => k == key,
            KeyName::Hashed { prefix, hash } => {
                key.starts_with(prefix) && key_hash(key) == *hash && escape(key).len() > NAME_MAX
            }
        }
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Decodes a canonical escaped string; `None` if it is not canonical.
fn unescape_strict(name: &[u8]) -> Option<Vec<u8>> {
    if name == b"%" {
        return Some(Vec::new());
    }
    if name.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            let hi = hex_val(*name.get(i + 1)?)?;
            let lo = hex_val(*name.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    // Canonical means: escaping the result gives back exactly the input
    // (upper-case hex, nothing escaped that need not be).
    (escape(&out) == name).then_some(out)
}

/// Recognises `<escaped prefix>%#<16 hex>`.
fn parse_hashed(name: &[u8]) -> Option<KeyName> {
    if name.len() < HASH_MARK.len() + 16 {
        return None;
    }
    let (head, hex) = name.split_at(name.len() - 16);
    let prefix_esc = head.strip_suffix(HASH_MARK)?;
    if !hex
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let hash = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    let prefix = if prefix_esc.is_empty() {
        Vec::new()
    } else {
        unescape_strict(prefix_esc)?
    };
    Some(KeyName::Hashed { prefix, hash })
}

/// Parses a filename strictly: only the exact names [`display_name`] produces
/// are accepted (directories must have one name each).
pub fn parse_strict(name: &[u8]) -> Option<KeyName> {
    if let Some(h) = parse_hashed(name) {
        return Some(h);
    }
    let key = unescape_strict(name)?;
    (escape(&key).len() <= NAME_MAX).then_some(KeyName::Key(key))
}

/// Parses a filename leniently, for files created by programs that know
/// nothing of the escaping (rsync's `.name.XXXXXX`, `50%.txt`): a `%` not
/// followed by two hex digits and a leading `.` stand for themselves.
pub fn parse_lenient(name: &[u8]) -> Option<KeyName> {
    if name.is_empty() {
        return None;
    }
    if let Some(h) = parse_hashed(name) {
        return Some(h);
    }
    if name == b"%" {
        return Some(KeyName::Key(Vec::new()));
    }
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            if let (Some(hi), Some(lo)) = (
                name.get(i + 1).and_then(|&b| hex_val(b)),
                name.get(i + 2).and_then(|&b| hex_val(b)),
            ) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(name[i]);
        i += 1;
    }
    Some(KeyName::Key(out))
}

/// Decodes `%XX` escapes in a `.mutate` field or a `.scan` query value; a lone
/// `%` is the empty string. `None` if a `%` is not followed by two hex digits.
pub fn decode_field(field: &[u8]) -> Option<Vec<u8>> {
    if field == b"%" {
        return Some(Vec::new());
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'%' {
            let hi = hex_val(*field.get(i + 1)?)?;
            let lo = hex_val(*field.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Encodes bytes as a `.mutate` field: `%`, whitespace, control bytes and
/// DEL as `%XX`; the empty string as `%`. The inverse of [`decode_field`].
pub fn encode_field(bytes: &[u8]) -> Vec<u8> {
    if bytes.is_empty() {
        return b"%".to_vec();
    }
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b == b'%' || b == b' ' || b < 0x20 || b == 0x7F {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        } else {
            out.push(b);
        }
    }
    out
}

/// Version files are named by their timestamp in decimal microseconds,
/// zero-padded to 16 digits so that `ls` sorts them.
pub fn version_name(ts: u64) -> String {
    format!("{ts:016}")
}

/// Parses a version filename; only the canonical form is accepted.
pub fn parse_version_name(name: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(name).ok()?;
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ts: u64 = s.parse().ok()?;
    (version_name(ts) == s && ts <= engine::key::MAX_TIMESTAMP).then_some(ts)
}

/// A table name as a directory name: UTF-8, not hidden, no NUL.
pub fn table_name(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    (!s.is_empty() && !s.starts_with('.')).then_some(s)
}

/// A snapshot read as a table: `<table>/<snapshot>`, a name no table has
/// (what `<table>/.snapshots/<snapshot>/` and the nodes under it name).
pub fn snapshot_table(table: &str, snapshot: &str) -> String {
    format!("{table}/{snapshot}")
}

/// The table and snapshot a [`snapshot_table`] name stands for.
pub fn split_snapshot_table(name: &str) -> Option<(&str, &str)> {
    name.split_once('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_own_name_exactly_when_its_display_name_is_itself() {
        let long = vec![b'a'; NAME_MAX + 1];
        let edge = vec![b'a'; NAME_MAX];
        let keys: [&[u8]; 10] = [
            b"row0001", b"", b".hidden", b"a.b", b"a/b", b"50%", b"a\0b", &long, &edge, b"\xff",
        ];
        for k in keys {
            assert_eq!(is_own_name(k), display_name(k) == k, "{k:?}");
        }
        assert!(is_own_name(b"row0001") && is_own_name(&edge));
    }

    #[test]
    fn ordinary_keys_are_unchanged() {
        assert_eq!(escape(b"com.cnn.www"), b"com.cnn.www");
        assert_eq!(escape("héllo wörld".as_bytes()), "héllo wörld".as_bytes());
        assert_eq!(escape(b"a.b"), b"a.b");
    }

    #[test]
    fn special_bytes_are_escaped() {
        assert_eq!(escape(b"a/b"), b"a%2Fb");
        assert_eq!(escape(b"100%"), b"100%25");
        assert_eq!(escape(b"a\0b"), b"a%00b");
        assert_eq!(escape(b".hidden"), b"%2Ehidden");
        assert_eq!(escape(b"."), b"%2E");
        assert_eq!(escape(b".."), b"%2E.");
        assert_eq!(escape(b""), b"%");
    }

    #[test]
    fn every_byte_round_trips() {
        for b in 0..=255u8 {
            for key in [vec![b], vec![b'x', b, b'y'], vec![b, b]] {
                let name = display_name(&key);
                assert!(!name.contains(&b'/') && !name.contains(&0));
                assert_ne!(name.first(), Some(&b'.'));
                assert_eq!(parse_strict(&name), Some(KeyName::Key(key.clone())));
                assert_eq!(parse_lenient(&name), Some(KeyName::Key(key.clone())));
            }
        }
    }

    #[test]
    fn strict_parse_rejects_non_canonical_names() {
        assert_eq!(parse_strict(b"%41"), None); // 'A' needs no escape
        assert_eq!(parse_strict(b"%2f"), None); // lower-case hex
        assert_eq!(parse_strict(b".x"), None);
        assert_eq!(parse_strict(b"50%"), None);
        assert_eq!(parse_strict(b""), None);
    }

    #[test]
    fn lenient_parse_takes_odd_names_literally() {
        assert_eq!(
            parse_lenient(b".x.tmp"),
            Some(KeyName::Key(b".x.tmp".to_vec()))
        );
        assert_eq!(
            parse_lenient(b"50%.txt"),
            Some(KeyName::Key(b"50%.txt".to_vec()))
        );
        assert_eq!(parse_lenient(b"a%2fb"), Some(KeyName::Key(b"a/b".to_vec())));
        assert_eq!(parse_lenient(b"%"), Some(KeyName::Key(Vec::new())));
    }

    #[test]
    fn long_keys_get_short_stable_hashed_names() {
        let key: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let name = display_name(&key);
        assert!(name.len() <= NAME_MAX, "{}", name.len());
        assert_eq!(name, display_name(&key));
        let parsed = parse_strict(&name).unwrap();
        assert!(parsed.matches(&key));
        let mut other = key.clone();
        other[999] ^= 1;
        assert!(!parsed.matches(&other));
        assert_ne!(display_name(&other), name);
        // A key just at the limit is not hashed; one byte more is.
        let exact = vec![b'k'; NAME_MAX];
        assert_eq!(display_name(&exact), exact);
        let over = vec![b'k'; NAME_MAX + 1];
        let hashed = display_name(&over);
        assert!(hashed.len() < NAME_MAX);
        assert!(parse_strict(&hashed).unwrap().matches(&over));
        assert!(!KeyName::Key(exact.clone()).matches(&over));
    }

    #[test]
    fn hashed_prefix_never_splits_an_escape() {
        for shift in 0..3 {
            let mut key = vec![b'a'; 197 + shift];
            key.extend(std::iter::repeat_n(b'/', 100));
            let name = display_name(&key);
            let parsed = parse_strict(&name).expect("hashed name parses");
            assert!(parsed.matches(&key));
        }
    }

    #[test]
    fn fields_round_trip() {
        for b in 0..=255u8 {
            let v = vec![b, b' ', b];
            let enc = encode_field(&v);
            assert!(!enc.contains(&b' ') && !enc.contains(&b'\n') && !enc.contains(&b'\t'));
            assert_eq!(decode_field(&enc).unwrap(), v);
        }
        assert_eq!(decode_field(b"%").unwrap(), b"");
        assert_eq!(encode_field(b""), b"%");
        assert_eq!(decode_field(b"%zz"), None);
        assert_eq!(decode_field(b"a%2"), None);
    }

    #[test]
    fn version_names_are_padded_and_canonical() {
        assert_eq!(version_name(42), "0000000000000042");
        assert_eq!(parse_version_name(b"0000000000000042"), Some(42));
        assert_eq!(parse_version_name(b"42"), None);
        assert_eq!(parse_version_name(b"000000000000004x"), None);
        let big = version_name(engine::key::MAX_TIMESTAMP);
        assert_eq!(
            parse_version_name(big.as_bytes()),
            Some(engine::key::MAX_TIMESTAMP)
        );
        assert_eq!(parse_version_name(b"18446744073709551615"), None);
    }
}
