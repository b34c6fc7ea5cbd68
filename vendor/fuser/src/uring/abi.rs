//! The kernel's FUSE-over-io_uring structures (`include/uapi/linux/fuse.h`,
//! protocol 7.42, Linux 6.14), beside the rest of the FUSE ABI in
//! `ll::fuse_abi` but kept with the module that alone uses them. They are
//! read and written through `zerocopy`, never at byte offsets; the tests
//! below pin every field's place to the one the C header gives it.
//!
//! The `FUSE_OVER_IO_URING` INIT flag (bit 41) is fuser's own
//! `InitFlags::FUSE_OVER_IO_URING`.

#![allow(non_camel_case_types)]

use zerocopy::FromBytes;
use zerocopy::Immutable;
use zerocopy::IntoBytes;
use zerocopy::KnownLayout;

use crate::ll::fuse_abi::fuse_in_header;
use crate::ll::fuse_abi::fuse_out_header;

/// Size of `fuse_uring_req_header::in_out`.
pub(crate) const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
/// Size of `fuse_uring_req_header::op_in`.
pub(crate) const FUSE_URING_OP_IN_OUT_SZ: usize = 128;
/// Size of the command area of an `IORING_OP_URING_CMD` SQE128, which holds
/// a [`fuse_uring_cmd_req`] followed by zeros.
pub(crate) const URING_CMD_AREA: usize = 80;

/// The trailer of [`fuse_uring_req_header`]: written by the kernel with a
/// request, by userspace with its reply.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub(crate) struct fuse_uring_ent_in_out {
    pub(crate) flags: u64,
    /// Names the request in the `COMMIT_AND_FETCH` of its reply
    /// ([`fuse_uring_cmd_req::commit_id`]).
    pub(crate) commit_id: u64,
    /// Bytes of the payload buffer in use, in either direction.
    pub(crate) payload_sz: u32,
    pub(crate) padding: u32,
    pub(crate) reserved: u64,
}

/// An entry's header buffer, the first iovec of its `REGISTER`.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub(crate) struct fuse_uring_req_header {
    /// A `fuse_in_header` with a request, a `fuse_out_header` with a reply.
    pub(crate) in_out: [u8; FUSE_URING_IN_OUT_HEADER_SZ],
    /// The opcode's fixed argument struct (a request's only).
    pub(crate) op_in: [u8; FUSE_URING_OP_IN_OUT_SZ],
    pub(crate) ring_ent_in_out: fuse_uring_ent_in_out,
}

/// The start of an SQE's command area, for both commands.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub(crate) struct fuse_uring_cmd_req {
    pub(crate) flags: u64,
    /// The `commit_id` of the request a `COMMIT_AND_FETCH` answers; 0 for a
    /// `REGISTER`.
    pub(crate) commit_id: u64,
    /// The queue (CPU) the command is for.
    pub(crate) qid: u16,
    pub(crate) padding: [u8; 6],
}

/// The `cmd_op` of an `IORING_OP_URING_CMD` on `/dev/fuse`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum fuse_uring_cmd {
    FUSE_IO_URING_CMD_INVALID = 0,
    /// Hands the kernel an entry's buffers; completes with its first
    /// request.
    FUSE_IO_URING_CMD_REGISTER = 1,
    /// Commits the reply in an entry; completes with its next request.
    FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
}

// What the code relies on, checked where it is built.
const _: () = assert!(size_of::<fuse_uring_req_header>() == 288);
const _: () = assert!(size_of::<fuse_uring_cmd_req>() <= URING_CMD_AREA);
const _: () = assert!(size_of::<fuse_in_header>() <= FUSE_URING_IN_OUT_HEADER_SZ);
const _: () = assert!(size_of::<fuse_out_header>() <= FUSE_URING_IN_OUT_HEADER_SZ);

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::*;
    use crate::ll::flags::init_flags::InitFlags;

    // The values below are those `include/uapi/linux/fuse.h` implies on
    // every ABI Linux runs FUSE on (u64 aligned to 8).

    #[test]
    fn fuse_uring_ent_in_out_matches_the_kernel() {
        type T = fuse_uring_ent_in_out;
        assert_eq!(size_of::<T>(), 32);
        assert_eq!(align_of::<T>(), 8);
        assert_eq!(offset_of!(T, flags), 0);
        assert_eq!(offset_of!(T, commit_id), 8);
        assert_eq!(offset_of!(T, payload_sz), 16);
        assert_eq!(offset_of!(T, padding), 20);
        assert_eq!(offset_of!(T, reserved), 24);
    }

    #[test]
    fn fuse_uring_req_header_matches_the_kernel() {
        type T = fuse_uring_req_header;
        assert_eq!(size_of::<T>(), 288);
        assert_eq!(align_of::<T>(), 8);
        assert_eq!(offset_of!(T, in_out), 0);
        assert_eq!(offset_of!(T, op_in), 128);
        assert_eq!(offset_of!(T, ring_ent_in_out), 256);
        // The trailer's fields, from the start of the header buffer.
        assert_eq!(
            offset_of!(T, ring_ent_in_out) + offset_of!(fuse_uring_ent_in_out, commit_id),
            264
        );
        assert_eq!(
            offset_of!(T, ring_ent_in_out) + offset_of!(fuse_uring_ent_in_out, payload_sz),
            272
        );
    }

    #[test]
    fn fuse_uring_cmd_req_matches_the_kernel() {
        type T = fuse_uring_cmd_req;
        assert_eq!(size_of::<T>(), 24);
        assert_eq!(align_of::<T>(), 8);
        assert_eq!(offset_of!(T, flags), 0);
        assert_eq!(offset_of!(T, commit_id), 8);
        assert_eq!(offset_of!(T, qid), 16);
        assert_eq!(offset_of!(T, padding), 18);
    }

    #[test]
    fn command_opcodes_and_init_flag_match_the_kernel() {
        assert_eq!(fuse_uring_cmd::FUSE_IO_URING_CMD_INVALID as u32, 0);
        assert_eq!(fuse_uring_cmd::FUSE_IO_URING_CMD_REGISTER as u32, 1);
        assert_eq!(fuse_uring_cmd::FUSE_IO_URING_CMD_COMMIT_AND_FETCH as u32, 2);
        assert_eq!(InitFlags::FUSE_OVER_IO_URING.bits(), 1 << 41);
    }

    /// The headers the in/out area holds (`fuse_in_header` with
    /// `total_extlen` and `padding` as one u32 here).
    #[test]
    fn in_and_out_headers_match_the_kernel() {
        type I = fuse_in_header;
        assert_eq!(size_of::<I>(), 40);
        assert_eq!(align_of::<I>(), 8);
        assert_eq!(offset_of!(I, len), 0);
        assert_eq!(offset_of!(I, opcode), 4);
        assert_eq!(offset_of!(I, unique), 8);
        assert_eq!(offset_of!(I, nodeid), 16);
        assert_eq!(offset_of!(I, uid), 24);
        assert_eq!(offset_of!(I, gid), 28);
        assert_eq!(offset_of!(I, pid), 32);
        assert_eq!(offset_of!(I, padding), 36);
        type O = fuse_out_header;
        assert_eq!(size_of::<O>(), 16);
        assert_eq!(align_of::<O>(), 8);
        assert_eq!(offset_of!(O, len), 0);
        assert_eq!(offset_of!(O, error), 4);
        assert_eq!(offset_of!(O, unique), 8);
    }
}
