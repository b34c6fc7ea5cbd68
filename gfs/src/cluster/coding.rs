//! Little-endian encoding of the master's log records and checkpoints.

/// Appends fixed-width little-endian fields and length-prefixed strings.
#[derive(Default)]
pub(crate) struct Encoder {
    pub(crate) buf: Vec<u8>,
}

impl Encoder {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
        self
    }
}

/// Reads what [`Encoder`] wrote; every read checks the bounds, so damaged
/// input gives an error, never a panic or a huge allocation.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn str(&mut self) -> Result<String, String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "string length overflows".to_string())?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| "string is not UTF-8".to_string())
    }
    pub(crate) fn done(&self) -> Result<(), String> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes", self.buf.len() - self.pos))
        }
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_truncation() {
        let mut e = Encoder::default();
        e.u8(7).u64(u64::MAX).str("héllo");
        let mut d = Decoder::new(&e.buf);
        assert_eq!(d.u8().unwrap(), 7);
        assert_eq!(d.u64().unwrap(), u64::MAX);
        assert_eq!(d.str().unwrap(), "héllo");
        d.done().unwrap();
        for cut in 0..e.buf.len() {
            let mut d = Decoder::new(&e.buf[..cut]);
            let r = d.u8().and_then(|_| d.u64()).and_then(|_| d.str());
            assert!(r.is_err(), "cut {cut}");
        }
        // A corrupt huge string length fails without allocating it.
        let mut e = Encoder::default();
        e.u64(u64::MAX / 2);
        assert!(Decoder::new(&e.buf).str().is_err());
    }
}
