//! Varint and length-prefixed encodings shared by METADATA and other
//! metadata records. Decoding never panics: running out of bytes or an
//! overlong varint is a corruption error.

use crate::{Error, Result};

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// A whole-file record: `magic`, the body's seahash (little-endian), the
/// body (snapshot manifests, backup records).
pub fn frame(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&seahash::hash(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The body of a [`frame`]d record, if its magic and checksum hold.
pub fn unframe<'a>(buf: &'a [u8], magic: &[u8; 8], what: &str) -> Result<&'a [u8]> {
    let bad = |why: &str| Error::corruption(format!("{what}: {why}"));
    let rest = buf.strip_prefix(magic).ok_or_else(|| bad("bad magic"))?;
    let (sum, body) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| bad("truncated"))?;
    if u64::from_le_bytes(*sum) != seahash::hash(body) {
        return Err(bad("checksum mismatch"));
    }
    Ok(body)
}

/// A cursor over an encoded buffer; `what` names the record in errors.
pub struct Decoder<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Decoder { buf, what }
    }

    fn err(&self, why: &str) -> Error {
        Error::corruption(format!("{}: {}", self.what, why))
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn varint(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self
                .buf
                .get(i)
                .ok_or_else(|| self.err("truncated varint"))?;
            v |= u64::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                self.buf = &self.buf[i + 1..];
                return Ok(v);
            }
        }
        Err(self.err("varint too long"))
    }

    pub fn u8(&mut self) -> Result<u8> {
        let (&b, rest) = self
            .buf
            .split_first()
            .ok_or_else(|| self.err("truncated"))?;
        self.buf = rest;
        Ok(b)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = usize::try_from(self.varint()?).map_err(|_| self.err("length overflow"))?;
        if n > self.buf.len() {
            return Err(self.err("length past end"));
        }
        let (b, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(b)
    }

    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("string is not UTF-8"))
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.err("bad bool")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_truncation() {
        let mut b = Vec::new();
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            put_varint(&mut b, v);
        }
        put_str(&mut b, "héllo");
        let mut d = Decoder::new(&b, "test");
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            assert_eq!(d.varint().unwrap(), v);
        }
        assert_eq!(d.string().unwrap(), "héllo");
        assert!(d.is_empty());
        for cut in 0..b.len() {
            let mut d = Decoder::new(&b[..cut], "test");
            let mut ok = true;
            for _ in 0..6 {
                ok &= d.varint().is_ok();
            }
            ok &= d.string().is_ok();
            assert!(!ok, "cut at {cut} decoded fully");
        }
    }
}
