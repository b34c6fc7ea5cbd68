//! Scrubbing one replica: its header, table, tail slots, padding and data
//! read back and checked against what is known in memory.

use super::Replica;
use crate::cluster::chunk::{self, Superblock, TailSlot, BLOCK, SLOT_LEN, SUPER_LEN};
use crate::io::{Io, ReadReq};

impl Replica {
    /// Verifies the whole replica (header, table, padding, data) against what
    /// is known in memory; returns a description of the first problem.
    #[cfg(test)]
    pub(crate) fn scrub(&self, io: &Io) -> Result<(), String> {
        self.scrub_paced(io, &mut |_| true).map(|_| ())
    }

    /// [`Self::scrub`], calling `pace(bytes)` before each read; Ok(false)
    /// when `pace` said to stop before the end.
    pub(crate) fn scrub_paced(
        &self,
        io: &Io,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<bool, String> {
        match self.scrub_once(io, pace) {
            Ok(done) => Ok(done),
            // Perhaps an append raced with us: check again with it excluded.
            Err(_) => {
                let _g = self.io_lock.lock();
                self.scrub_once(io, &mut |_| true)
            }
        }
    }

    fn scrub_once(&self, io: &Io, pace: &mut dyn FnMut(u64) -> bool) -> Result<bool, String> {
        self.gate.check_read().map_err(|e| e.to_string())?;
        let header_len = self.layout.data_off as usize;
        // Paced before the snapshot, so the header is read right after it.
        if !pace(header_len as u64) {
            return Ok(false);
        }
        let (version, len, table) = {
            let st = self.state.read();
            (st.version, st.len, st.table.clone())
        };
        let file = self.file().map_err(|e| format!("open: {e}"))?;
        let file = &*file;
        let header = io
            .read_multi(&[ReadReq {
                file,
                offset: 0,
                len: header_len,
            }])
            .pop()
            .ok_or("no header read")?
            .map_err(|e| format!("reading header: {e}"))?;
        if header.len() != header_len {
            return Err("header cut short".into());
        }
        let sb = Superblock::decode(&header)?;
        if sb.handle != self.handle || sb.version != version {
            return Err(format!(
                "superblock says chunk {:016x} v{}, expected v{version}",
                sb.handle, sb.version
            ));
        }
        let t_end = (SUPER_LEN + self.layout.table_len()) as usize;
        if header[SUPER_LEN as usize..t_end] != chunk::encode_entries(&table)[..] {
            return Err("checksum table damaged".into());
        }
        let mut pad_from = t_end;
        if let Some(off) = self.layout.slots_off {
            // Each slot is unused (zeros) or passes its own check.
            let slots_end = off as usize + 2 * SLOT_LEN as usize;
            for (i, raw) in header[off as usize..slots_end]
                .chunks(SLOT_LEN as usize)
                .enumerate()
            {
                if raw.iter().any(|&b| b != 0) && TailSlot::decode(raw).is_none() {
                    return Err(format!("tail slot {i} damaged"));
                }
            }
            pad_from = slots_end;
        }
        if header[pad_from..].iter().any(|&b| b != 0) {
            return Err("header padding damaged".into());
        }
        // The data, a megabyte per read: memory stays small and `pace` can
        // spread the reads out.
        const PIECE: u64 = 16 * BLOCK;
        let mut k = 0usize;
        let mut off = 0;
        while off < len {
            let n = PIECE.min(len - off);
            if !pace(n) {
                return Ok(false);
            }
            let piece = io
                .read_multi(&[ReadReq {
                    file,
                    offset: self.layout.data_off + off,
                    len: n as usize,
                }])
                .pop()
                .ok_or("no data read")?
                .map_err(|e| format!("reading data: {e}"))?;
            if (piece.len() as u64) < n {
                return Err("data cut short".into());
            }
            for block in piece.chunks(BLOCK as usize) {
                let want = table.get(k).copied().unwrap_or_default();
                if self.layout.sum.entry(block) != want {
                    return Err(format!("block {k} fails its checksum"));
                }
                k += 1;
            }
            off += n;
        }
        Ok(true)
    }
}
