//! Physical layout of a log file (LevelDB's log format, seahash checksums).
//!
//! A file is a sequence of 32 KiB blocks. Each block holds physical records
//!
//! ```text
//! checksum: u32 LE   seahash(type ‖ payload), folded to 32 bits
//! length:   u16 LE   payload bytes in this fragment
//! type:     u8       FULL=1, FIRST=2, MIDDLE=3, LAST=4
//! payload:  [u8; length]
//! ```
//!
//! A record never starts within the last `HEADER_SIZE - 1` bytes of a block:
//! those are zero-filled and the record starts in the next block. A logical
//! record that does not fit in what is left of a block is cut into FIRST,
//! MIDDLE..., LAST fragments. Because every block starts with a header, a
//! reader that meets a damaged region can resume at the next block boundary.

/// Size of one block.
pub const BLOCK_SIZE: usize = 32 * 1024;
/// Size of a physical record header.
pub const HEADER_SIZE: usize = 7;

/// Kinds of physical records. 0 is reserved: an all-zero header is never valid.
pub const FULL: u8 = 1;
pub const FIRST: u8 = 2;
pub const MIDDLE: u8 = 3;
pub const LAST: u8 = 4;

/// Checksum of a fragment. `type_and_payload` is the type byte followed by
/// the payload, which is exactly how they lie in the file (header byte 6 on).
pub fn checksum(type_and_payload: &[u8]) -> u32 {
    let h = seahash::hash(type_and_payload);
    (h ^ (h >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_header_never_verifies() {
        // An all-zero header claims checksum 0 over the single byte 0.
        assert_ne!(checksum(&[0]), 0);
        assert_ne!(checksum(&[FULL]), checksum(&[FIRST]));
    }
}
