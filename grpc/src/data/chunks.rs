//! ReadRows responses: rows as cell chunks. A row's first chunk names the
//! row, each new column names its family and qualifier, values larger than a
//! piece are split over chunks (all but the last carry the total
//! `value_size`), and the row's last chunk commits it. Rows are read whole
//! before they are sent, so a row never needs a reset.

use crate::filter::FCell;
use crate::v2::read_rows_response::{cell_chunk::RowStatus, CellChunk};
use crate::v2::ReadRowsResponse;

/// Largest piece of a value in one chunk.
pub const PIECE: usize = 256 * 1024;
/// A response is sent once it holds about this many bytes.
pub const RESPONSE_BYTES: usize = 1024 * 1024;

/// Builds responses and hands each full one to `send`.
pub struct Chunker<S: FnMut(ReadRowsResponse) -> bool> {
    send: S,
    current: ReadRowsResponse,
    bytes: usize,
    /// False once `send` reported the client gone.
    pub open: bool,
    /// Responses handed to `send`.
    pub sent: usize,
}

impl<S: FnMut(ReadRowsResponse) -> bool> Chunker<S> {
    pub fn new(send: S) -> Self {
        Chunker {
            send,
            current: ReadRowsResponse::default(),
            bytes: 0,
            open: true,
            sent: 0,
        }
    }

    fn push(&mut self, chunk: CellChunk) {
        let size = chunk.value.len() + chunk.row_key.len() + 64;
        if self.bytes + size > RESPONSE_BYTES && !self.current.chunks.is_empty() {
            self.flush();
        }
        self.bytes += size;
        self.current.chunks.push(chunk);
    }

    /// Sends what is buffered.
    pub fn flush(&mut self) {
        if self.current.chunks.is_empty() || !self.open {
            return;
        }
        let resp = std::mem::take(&mut self.current);
        self.bytes = 0;
        self.sent += 1;
        if !(self.send)(resp) {
            self.open = false;
        }
    }

    /// Adds one row (cells non-empty, in row order).
    pub fn row(&mut self, key: &[u8], cells: Vec<FCell>) {
        let n = cells.len();
        let mut prev: Option<(String, Vec<u8>)> = None;
        for (i, c) in cells.into_iter().enumerate() {
            let same_family = prev.as_ref().is_some_and(|(f, _)| *f == c.family);
            let same_column = same_family && prev.as_ref().is_some_and(|(_, q)| *q == c.qualifier);
            let total = c.value.len();
            let pieces: Vec<&[u8]> = if total == 0 {
                vec![&[][..]]
            } else {
                c.value.chunks(PIECE).collect()
            };
            let last_piece = pieces.len() - 1;
            for (j, piece) in pieces.into_iter().enumerate() {
                let mut chunk = CellChunk {
                    value: piece.to_vec(),
                    value_size: if j < last_piece { total as i32 } else { 0 },
                    ..Default::default()
                };
                if j == 0 {
                    if i == 0 {
                        chunk.row_key = key.to_vec();
                    }
                    if !same_family {
                        chunk.family_name = Some(c.family.clone());
                    }
                    if !same_column {
                        chunk.qualifier = Some(c.qualifier.clone());
                    }
                    chunk.timestamp_micros = c.timestamp as i64;
                    chunk.labels = c.labels.clone();
                }
                if i + 1 == n && j == last_piece {
                    chunk.row_status = Some(RowStatus::CommitRow(true));
                }
                self.push(chunk);
            }
            prev = Some((c.family, c.qualifier));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn cell(f: &str, q: &str, ts: u64, v: Vec<u8>) -> FCell {
        FCell {
            family: f.into(),
            qualifier: q.as_bytes().to_vec(),
            timestamp: ts,
            value: v,
            labels: vec![],
        }
    }

    #[test]
    fn chunks_rows_and_large_values() {
        let mut sent = Vec::new();
        let mut c = Chunker::new(|r| {
            sent.push(r);
            true
        });
        let big = vec![7u8; PIECE * 2 + 10];
        c.row(
            b"r1",
            vec![
                cell("a", "x", 2, b"v2".to_vec()),
                cell("a", "x", 1, b"v1".to_vec()),
                cell("b", "y", 1, big.clone()),
            ],
        );
        c.row(b"r2", vec![cell("a", "x", 1, vec![])]);
        c.flush();
        let chunks: Vec<CellChunk> = sent.into_iter().flat_map(|r| r.chunks).collect();
        assert_eq!(chunks.len(), 6);
        assert_eq!(chunks[0].row_key, b"r1");
        assert_eq!(chunks[0].family_name.as_deref(), Some("a"));
        assert!(chunks[1].family_name.is_none() && chunks[1].qualifier.is_none());
        assert_eq!(chunks[2].value_size, big.len() as i32);
        assert_eq!(chunks[3].value_size, big.len() as i32);
        assert_eq!(chunks[4].value_size, 0);
        assert_eq!(chunks[4].row_status, Some(RowStatus::CommitRow(true)));
        let joined: Vec<u8> = chunks[2..5].iter().flat_map(|c| c.value.clone()).collect();
        assert_eq!(joined, big);
        assert_eq!(chunks[5].row_key, b"r2");
        assert_eq!(chunks[5].row_status, Some(RowStatus::CommitRow(true)));
    }
}
