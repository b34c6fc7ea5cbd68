//! What goes into and comes out of a queue entry, apart from the ring: the
//! command area of its SQEs, its request rebuilt in the `/dev/fuse` layout,
//! and a reply written into it. Pure functions on the entry's buffers, so
//! they are tested without a kernel.

use std::io;
use std::io::IoSlice;

use log::error;
use zerocopy::FromBytes;
use zerocopy::FromZeros;
use zerocopy::IntoBytes;

use super::abi::FUSE_URING_OP_IN_OUT_SZ;
use super::abi::URING_CMD_AREA;
use super::abi::fuse_uring_cmd_req;
use super::abi::fuse_uring_req_header;
use crate::ll::fuse_abi::fuse_in_header;
use crate::ll::fuse_abi::fuse_out_header;

const IN_HEADER: usize = size_of::<fuse_in_header>();
const OUT_HEADER: usize = size_of::<fuse_out_header>();

/// The command area of a `REGISTER` (`commit_id` 0) or `COMMIT_AND_FETCH`
/// for queue `qid`.
pub(super) fn command(qid: u16, commit_id: u64) -> [u8; URING_CMD_AREA] {
    let req = fuse_uring_cmd_req {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 6],
    };
    let mut area = [0u8; URING_CMD_AREA];
    area[..size_of::<fuse_uring_cmd_req>()].copy_from_slice(req.as_bytes());
    area
}

/// The `fuse_in_header` the kernel wrote into an entry with its request.
pub(super) fn in_header(header: &fuse_uring_req_header) -> fuse_in_header {
    // The in/out area is larger than the header (checked in `abi`), so the
    // prefix is always there.
    fuse_in_header::read_from_prefix(&header.in_out)
        .map_or_else(|_| fuse_in_header::new_zeroed(), |(h, _)| h)
}

/// Bytes of the entry's payload buffer (`capacity` long) the request uses.
pub(super) fn payload_len(header: &fuse_uring_req_header, capacity: usize) -> usize {
    (header.ring_ent_in_out.payload_sz as usize).min(capacity)
}

/// Rebuilds the request in an entry in the `/dev/fuse` layout (header,
/// fixed struct, payload) into `out`, 8-byte aligned for the parser, and
/// returns its bytes. The kernel's `len` counts the whole request, so what is
/// neither header nor payload is the opcode's fixed struct; the rebuilt
/// header's `len` is the length of what was rebuilt.
pub(super) fn rebuild_request<'a>(
    header: &fuse_uring_req_header,
    payload: &[u8],
    out: &'a mut Vec<u64>,
) -> &'a [u8] {
    let mut head = in_header(header);
    let payload = &payload[..payload_len(header, payload.len())];
    let op_len = (head.len as usize)
        .saturating_sub(IN_HEADER + payload.len())
        .min(FUSE_URING_OP_IN_OUT_SZ);
    let total = IN_HEADER + op_len + payload.len();
    head.len = total as u32;
    out.clear();
    out.resize(total.div_ceil(8), 0);
    let bytes = &mut out.as_mut_bytes()[..total];
    bytes[..IN_HEADER].copy_from_slice(head.as_bytes());
    bytes[IN_HEADER..IN_HEADER + op_len].copy_from_slice(&header.op_in[..op_len]);
    bytes[IN_HEADER + op_len..].copy_from_slice(payload);
    bytes
}

/// A reply carrying only an error.
pub(super) fn error_reply(unique: u64, errno: i32) -> fuse_out_header {
    fuse_out_header {
        len: OUT_HEADER as u32,
        error: -errno,
        unique,
    }
}

/// Writes a reply (a `fuse_out_header` and its payload, sliced any way)
/// into an entry: the header into its in/out area, the rest into `payload`,
/// whose bytes used go into `payload_sz`. A reply whose payload does not fit
/// is logged and answered EIO instead. Returns the `commit_id` to commit
/// the entry with.
pub(super) fn write_reply(
    header: &mut fuse_uring_req_header,
    payload: &mut [u8],
    data: &[IoSlice<'_>],
) -> io::Result<u64> {
    let mut out = [0u8; OUT_HEADER];
    let mut filled = 0usize;
    let mut body = 0usize;
    let total: usize = data.iter().map(|s| s.len()).sum();
    let too_big = total.saturating_sub(OUT_HEADER) > payload.len();
    for s in data {
        let mut s: &[u8] = s;
        if filled < OUT_HEADER {
            let n = s.len().min(OUT_HEADER - filled);
            out[filled..filled + n].copy_from_slice(&s[..n]);
            filled += n;
            s = &s[n..];
        }
        if !s.is_empty() && !too_big {
            payload[body..body + s.len()].copy_from_slice(s);
            body += s.len();
        }
    }
    let Ok(mut out) = fuse_out_header::read_from_bytes(&out[..filled]) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "short reply"));
    };
    if too_big {
        error!("reply of {total} bytes exceeds the ring's payload buffer");
        out = error_reply(out.unique, libc::EIO);
        body = 0;
    }
    header.in_out[..OUT_HEADER].copy_from_slice(out.as_bytes());
    header.ring_ent_in_out.payload_sz = body as u32;
    Ok(header.ring_ent_in_out.commit_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ll::Operation;
    use crate::ll::RequestId;
    use crate::ll::fuse_abi::fuse_opcode;
    use crate::ll::reply::Response;
    use crate::ll::reply::ResponseData;
    use crate::ll::reply::ResponseErrno;
    use crate::ll::reply::ResponseStruct;
    use crate::ll::request::AnyRequest;

    /// An entry as the kernel fills it: the in header, the fixed struct and
    /// the payload (whose length the header's `len` counts).
    fn entry(opcode: u32, unique: u64, op_in: &[u8], payload: &[u8]) -> fuse_uring_req_header {
        let mut h = fuse_uring_req_header::new_zeroed();
        let head = fuse_in_header {
            len: (IN_HEADER + op_in.len() + payload.len()) as u32,
            opcode,
            unique,
            nodeid: 5,
            uid: 1000,
            gid: 1001,
            pid: 4242,
            padding: 0,
        };
        h.in_out[..IN_HEADER].copy_from_slice(head.as_bytes());
        h.op_in[..op_in.len()].copy_from_slice(op_in);
        h.ring_ent_in_out.payload_sz = payload.len() as u32;
        h.ring_ent_in_out.commit_id = unique;
        h
    }

    /// `fuse_write_in` for `size` bytes at `offset` of handle `fh`.
    fn write_in(fh: u64, offset: i64, size: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&fh.to_ne_bytes());
        v.extend_from_slice(&offset.to_ne_bytes());
        v.extend_from_slice(&size.to_ne_bytes());
        v.extend_from_slice(&[0; 4 + 8 + 4 + 4]); // write_flags, lock_owner, flags, padding
        v
    }

    #[test]
    fn commands_carry_the_queue_and_commit_id() {
        let area = command(3, 0xdead_beef_0000_0001);
        let (req, rest) = fuse_uring_cmd_req::read_from_prefix(&area).unwrap();
        assert_eq!(req.flags, 0);
        assert_eq!(req.commit_id, 0xdead_beef_0000_0001);
        assert_eq!(req.qid, 3);
        assert_eq!(req.padding, [0; 6]);
        assert!(rest.iter().all(|&b| b == 0));
        let register = command(7, 0);
        let (req, _) = fuse_uring_cmd_req::read_from_prefix(&register).unwrap();
        assert_eq!((req.qid, req.commit_id), (7, 0));
    }

    #[test]
    fn a_write_is_rebuilt_in_the_dev_fuse_layout() {
        let data = b"hello, ring";
        let op = write_in(9, 4096, data.len() as u32);
        let h = entry(fuse_opcode::FUSE_WRITE as u32, 77, &op, data);
        // The payload buffer is larger than the request's payload.
        let mut payload = vec![0xaau8; 64];
        payload[..data.len()].copy_from_slice(data);
        let mut out = Vec::new();
        let bytes = rebuild_request(&h, &payload, &mut out);
        assert_eq!(bytes.len(), IN_HEADER + op.len() + data.len());
        assert_eq!(&bytes[IN_HEADER..IN_HEADER + op.len()], &op[..]);
        assert_eq!(&bytes[IN_HEADER + op.len()..], data);

        let req = AnyRequest::try_from(bytes).unwrap();
        assert_eq!(req.header().len as usize, bytes.len());
        assert_eq!(req.header().pid, 4242);
        assert_eq!(req.unique(), RequestId(77));
        let Ok(Operation::Write(w)) = req.operation() else {
            panic!("not a write: {req}");
        };
        assert_eq!(w.data(), data);
        assert_eq!(w.offset().unwrap(), 4096);
        assert_eq!(in_header(&h).pid, 4242);
    }

    #[test]
    fn a_request_without_payload_keeps_its_fixed_struct() {
        // FUSE_GETATTR: fuse_getattr_in (getattr_flags, dummy, fh), no payload.
        let op = [0u8; 16];
        let h = entry(fuse_opcode::FUSE_GETATTR as u32, 8, &op, &[]);
        let mut out = Vec::new();
        let bytes = rebuild_request(&h, &[0u8; 4096], &mut out);
        assert_eq!(bytes.len(), IN_HEADER + 16);
        let req = AnyRequest::try_from(bytes).unwrap();
        assert!(matches!(req.operation(), Ok(Operation::GetAttr(_))));
    }

    #[test]
    fn a_payload_size_past_the_buffer_is_cut_to_it() {
        let mut h = entry(
            fuse_opcode::FUSE_WRITE as u32,
            1,
            &write_in(1, 0, 8),
            &[0; 8],
        );
        h.ring_ent_in_out.payload_sz = 1 << 20;
        assert_eq!(payload_len(&h, 8), 8);
        let mut out = Vec::new();
        let bytes = rebuild_request(&h, &[1u8; 8], &mut out);
        assert_eq!(bytes.len(), IN_HEADER + 40 + 8);
        // An oversized fixed struct is cut to the op_in area.
        let mut h = entry(fuse_opcode::FUSE_GETATTR as u32, 1, &[], &[]);
        h.in_out[..4].copy_from_slice(&10_000u32.to_ne_bytes());
        assert_eq!(
            rebuild_request(&h, &[], &mut out).len(),
            IN_HEADER + FUSE_URING_OP_IN_OUT_SZ
        );
    }

    #[test]
    fn a_reply_goes_into_the_header_and_payload_buffers() {
        let mut h = entry(fuse_opcode::FUSE_READ as u32, 31, &[], &[]);
        let mut payload = vec![0u8; 4096];
        let commit = ResponseData::new_data(&b"the file's bytes"[..])
            .with_iovec(RequestId(31), |iov| write_reply(&mut h, &mut payload, iov))
            .unwrap();
        assert_eq!(commit, 31);
        let (out, _) = fuse_out_header::read_from_prefix(&h.in_out).unwrap();
        assert_eq!((out.len, out.error, out.unique), (16 + 16, 0, 31));
        assert_eq!(h.ring_ent_in_out.payload_sz, 16);
        assert_eq!(&payload[..16], b"the file's bytes");
    }

    #[test]
    fn a_reply_split_inside_its_header_is_reassembled() {
        let mut h = entry(fuse_opcode::FUSE_WRITE as u32, 12, &[], &[]);
        let mut payload = vec![0u8; 64];
        let head = fuse_out_header {
            len: 16 + 8,
            error: 0,
            unique: 12,
        };
        let mut all = head.as_bytes().to_vec();
        all.extend_from_slice(b"abcdefgh");
        let iov = [
            IoSlice::new(&all[..5]),
            IoSlice::new(&all[5..18]),
            IoSlice::new(&all[18..]),
        ];
        assert_eq!(write_reply(&mut h, &mut payload, &iov).unwrap(), 12);
        assert_eq!(&h.in_out[..16], head.as_bytes());
        assert_eq!(h.ring_ent_in_out.payload_sz, 8);
        assert_eq!(&payload[..8], b"abcdefgh");
    }

    #[test]
    fn an_error_reply_has_no_payload() {
        let mut h = entry(fuse_opcode::FUSE_LOOKUP as u32, 5, &[], &[]);
        h.ring_ent_in_out.payload_sz = 99; // what the request had
        let mut payload = vec![0u8; 64];
        let errno = crate::Errno::ENOENT;
        ResponseErrno(errno)
            .with_iovec(RequestId(5), |iov| write_reply(&mut h, &mut payload, iov))
            .unwrap();
        let (out, _) = fuse_out_header::read_from_prefix(&h.in_out).unwrap();
        assert_eq!((out.len, out.error, out.unique), (16, -libc::ENOENT, 5));
        assert_eq!(h.ring_ent_in_out.payload_sz, 0);
    }

    #[test]
    fn a_reply_larger_than_the_payload_buffer_becomes_eio() {
        let mut h = entry(fuse_opcode::FUSE_READ as u32, 44, &[], &[]);
        let mut payload = vec![0u8; 8];
        let commit = ResponseData::new_data(vec![7u8; 9])
            .with_iovec(RequestId(44), |iov| write_reply(&mut h, &mut payload, iov))
            .unwrap();
        assert_eq!(commit, 44);
        let (out, _) = fuse_out_header::read_from_prefix(&h.in_out).unwrap();
        assert_eq!((out.len, out.error, out.unique), (16, -libc::EIO, 44));
        assert_eq!(h.ring_ent_in_out.payload_sz, 0);
        assert_eq!(payload, [0u8; 8], "nothing of the reply is written");
        // Exactly the buffer's size still fits.
        ResponseData::new_data(vec![7u8; 8])
            .with_iovec(RequestId(44), |iov| write_reply(&mut h, &mut payload, iov))
            .unwrap();
        assert_eq!(h.ring_ent_in_out.payload_sz, 8);
        assert_eq!(payload, [7u8; 8]);
    }

    #[test]
    fn a_reply_shorter_than_its_header_is_refused() {
        let mut h = entry(fuse_opcode::FUSE_READ as u32, 1, &[], &[]);
        let before = h.in_out;
        let err = write_reply(&mut h, &mut [0u8; 8], &[IoSlice::new(&[0u8; 15])]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(h.in_out, before);
    }

    #[test]
    fn a_struct_reply_round_trips() {
        let mut h = entry(fuse_opcode::FUSE_WRITE as u32, 2, &[], &[]);
        let mut payload = vec![0u8; 64];
        ResponseStruct::new_write(4096)
            .with_iovec(RequestId(2), |iov| write_reply(&mut h, &mut payload, iov))
            .unwrap();
        // fuse_write_out: size, padding.
        assert_eq!(h.ring_ent_in_out.payload_sz, 8);
        assert_eq!(&payload[..4], &4096u32.to_ne_bytes());
    }

    #[test]
    fn an_error_reply_is_a_bare_header() {
        let out = error_reply(9, libc::EIO);
        assert_eq!((out.len, out.error, out.unique), (16, -libc::EIO, 9));
    }
}
