//! Where a batch's text waits between `write` and `close`.
//!
//! A batch is checked line by line as it is written, but applied only at
//! close, so its text must be kept until then. Holding it parsed cost about
//! 1.7 KB per line (a million `set` lines took 1.7 GB); the text itself is
//! about 25 bytes a line. The spool keeps the text: in memory up to
//! [`MEMORY_LIMIT`], then in an unlinked file, so a batch larger than memory
//! never has to fit in it. Close reads it back a chunk at a time.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Text kept in memory before the spool moves to a file.
pub const MEMORY_LIMIT: usize = 1 << 20;

/// See the module comment.
#[derive(Debug, Default)]
pub struct Spool {
    /// Where a file is made once the text outgrows memory (None: the system's temp dir).
    dir: Option<PathBuf>,
    mem: Vec<u8>,
    file: Option<io::BufWriter<File>>,
    len: u64,
    /// A reader moved the file's position: the next push seeks to the end.
    rewound: bool,
}

/// Spool files get distinct names within the process.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Spool {
    pub fn new(dir: Option<&Path>) -> Spool {
        Spool {
            dir: dir.map(Path::to_path_buf),
            ..Default::default()
        }
    }

    /// Appends text.
    pub fn push(&mut self, text: &[u8]) -> io::Result<()> {
        self.len += text.len() as u64;
        if let Some(f) = &mut self.file {
            if std::mem::take(&mut self.rewound) {
                f.seek(SeekFrom::End(0))?;
            }
            return f.write_all(text);
        }
        if self.mem.len() + text.len() <= MEMORY_LIMIT {
            self.mem.extend_from_slice(text);
            return Ok(());
        }
        let mut f = io::BufWriter::with_capacity(64 << 10, self.create_file()?);
        f.write_all(&self.mem)?;
        f.write_all(text)?;
        self.mem = Vec::new();
        self.file = Some(f);
        Ok(())
    }

    /// An unlinked file: nothing is left behind, even by a crash.
    fn create_file(&self) -> io::Result<File> {
        let dir = self.dir.clone().unwrap_or_else(std::env::temp_dir);
        let name = format!(
            ".bigtable-batch-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(f)
    }

    /// Where a file would be made.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Whether the text went to a file.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    /// A reader of everything pushed, from the start (may be called again).
    pub fn reader(&mut self) -> io::Result<Box<dyn BufRead + '_>> {
        match &mut self.file {
            Some(w) => {
                w.flush()?;
                self.rewound = true;
                let f = w.get_mut();
                f.seek(SeekFrom::Start(0))?;
                Ok(Box::new(BufReader::with_capacity(
                    64 << 10,
                    Read::by_ref(f).take(self.len),
                )))
            }
            None => Ok(Box::new(Cursor::new(&self.mem[..]))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn read_all(s: &mut Spool) -> Vec<u8> {
        let mut out = Vec::new();
        s.reader().unwrap().read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn small_text_stays_in_memory() {
        let mut s = Spool::new(None);
        s.push(b"set a f:q v\n").unwrap();
        s.push(b"set b f:q v\n").unwrap();
        assert!(!s.spilled());
        assert_eq!(read_all(&mut s), b"set a f:q v\nset b f:q v\n");
        assert_eq!(read_all(&mut s), b"set a f:q v\nset b f:q v\n");
    }

    #[test]
    fn large_text_goes_to_a_file_and_reads_back_twice() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::new(Some(dir.path()));
        let line = vec![b'x'; 1000];
        let mut want = Vec::new();
        for _ in 0..(MEMORY_LIMIT / 1000 + 10) {
            s.push(&line).unwrap();
            want.extend_from_slice(&line);
        }
        assert!(s.spilled());
        assert_eq!(s.len, want.len() as u64);
        // The file is unlinked at once.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(read_all(&mut s), want);
        s.push(b"tail").unwrap();
        want.extend_from_slice(b"tail");
        assert_eq!(read_all(&mut s), want);
    }
}
