//! Durations as schema text writes them (`7d`, `90m`, `500ms`, `10us`), in
//! microseconds: a family's `max_age` in a `.schema` line and in a nested
//! garbage-collection rule are the same quantity, so both read and write it here.

/// A plain decimal number (no sign, no spaces).
pub(crate) fn parse_digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

const DURATION_UNITS: [(&str, u64); 6] = [
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// `7d`, `90m`, `500ms`, `10us` → microseconds (positive).
pub(crate) fn parse_duration(v: &str) -> std::result::Result<u64, String> {
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let err = || format!("max_age {v:?} is not none or a number with a unit us, ms, s, m, h or d");
    let n = parse_digits(num).ok_or_else(err)?;
    let mult = DURATION_UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, m)| *m)
        .ok_or_else(err)?;
    let micros = n
        .checked_mul(mult)
        .ok_or_else(|| format!("max_age {v:?} is too large"))?;
    if micros == 0 {
        return Err("max_age must be positive (use max_age=none for no limit)".into());
    }
    Ok(micros)
}

/// The shortest form [`parse_duration`] reads back to `micros`.
pub(crate) fn duration_str(micros: u64) -> String {
    for (unit, mult) in DURATION_UNITS {
        if micros.is_multiple_of(mult) {
            return format!("{}{unit}", micros / mult);
        }
    }
    format!("{micros}us")
}
