//! The framed transport's wire format (docs/internal-rpc.md, "Frames"):
//! `Call` and `Control` as length-prefixed frames on a plain TCP
//! connection, each written in one piece and answered on the same
//! connection, so that a call runs on its caller's thread at one end and
//! on the connection's thread at the other, with no runtime between.
//!
//! A connection starts with [`MAGIC`] (its first byte tells it from an
//! HTTP/2 preface, `P`, on the same port). A request is
//! `[route u8][token length u16][body length u32][token][body]`, a reply
//! `[status u8][tag length u8][body length u32][tag][body]` (integers
//! little-endian): status 0 carries the reply message, any other is a gRPC
//! code and its message in UTF-8. [`HEARTBEAT`] bytes may come before a
//! reply: the callee is still working (sent every second once a call has
//! run two), so a caller notices a dead or frozen peer within
//! [`SILENT`] whatever the call's timeout.

use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

/// The first bytes a caller sends on a connection.
pub(crate) const MAGIC: &[u8; 8] = b"BTFRAME1";
/// A request's fixed head: route, token length, body length.
pub(crate) const REQUEST_HEAD: usize = 7;
/// A reply's fixed head: status, tag length, body length.
pub(crate) const REPLY_HEAD: usize = 6;
/// The longest token a request may carry (a real one is ~170 bytes).
pub(crate) const MAX_TOKEN: usize = 512;
/// A reply's status byte that is not a reply: the callee still works.
pub(crate) const HEARTBEAT: u8 = 0xff;
/// How long a callee may stay silent during a call before its caller gives
/// up on it (the HTTP/2 transport's keep-alive noticed within 10 s too).
pub(crate) const SILENT: Duration = Duration::from_secs(10);
/// How often a blocked read wakes to look at its deadlines.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// The routes, by their byte.
pub(crate) fn route_name(b: u8) -> Option<&'static str> {
    match b {
        1 => Some("Call"),
        2 => Some("Control"),
        _ => None,
    }
}

/// The byte of route `name`.
pub(crate) fn route_byte(name: &str) -> u8 {
    if name == "Call" {
        1
    } else {
        2
    }
}

/// A request frame, ready for one write (with the magic first on a new
/// connection).
pub(crate) fn request(route: &str, token: &[u8], body: &[u8], first: bool) -> Vec<u8> {
    let mut f = Vec::with_capacity(MAGIC.len() + REQUEST_HEAD + token.len() + body.len());
    if first {
        f.extend_from_slice(MAGIC);
    }
    f.push(route_byte(route));
    f.extend_from_slice(&(token.len() as u16).to_le_bytes());
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(token);
    f.extend_from_slice(body);
    f
}

/// A reply frame: `status` 0 with the reply's bytes and tag, else a code
/// and its message.
pub(crate) fn reply(status: u8, tag: Option<&[u8; 32]>, body: &[u8]) -> Vec<u8> {
    let tag: &[u8] = tag.map_or(&[], |t| t);
    let mut f = Vec::with_capacity(REPLY_HEAD + tag.len() + body.len());
    f.push(status);
    f.push(tag.len() as u8);
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(tag);
    f.extend_from_slice(body);
    f
}

/// The little-endian u16 at `b[i..]`.
pub(crate) fn u16_at(b: &[u8], i: usize) -> usize {
    u16::from_le_bytes([b[i], b[i + 1]]) as usize
}

/// The little-endian u32 at `b[i..]`.
pub(crate) fn u32_at(b: &[u8], i: usize) -> usize {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as usize
}

/// Why a read stopped short.
#[derive(Debug)]
pub(crate) enum Short {
    /// The peer closed the connection before the first byte.
    Closed,
    /// The deadline passed, or the peer was silent for too long.
    Late,
    /// Told to stop.
    Stopped,
    /// Anything else (a reset, a close mid-message).
    Io(std::io::Error),
}

impl std::fmt::Display for Short {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Short::Closed => f.write_str("the connection was closed"),
            Short::Late => f.write_str("no answer in time"),
            Short::Stopped => f.write_str("stopping"),
            Short::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Fills `buf` from `r`, whose reads time out every [`TICK`]: by
/// `deadline`, with no gap of more than `silent` between bytes, until
/// `stop` says so.
pub(crate) fn read_full(
    r: &mut impl Read,
    buf: &mut [u8],
    deadline: Instant,
    silent: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<(), Short> {
    let mut filled = 0;
    let mut last = Instant::now();
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Err(Short::Closed),
            Ok(0) => return Err(Short::Io(ErrorKind::UnexpectedEof.into())),
            Ok(n) => {
                filled += n;
                last = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if stop() {
                    return Err(Short::Stopped);
                }
                let now = Instant::now();
                if now >= deadline || now.duration_since(last) >= silent {
                    return Err(Short::Late);
                }
            }
            Err(e) => return Err(Short::Io(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_lay_out_as_documented() {
        let f = request("Call", b"tok", b"body", true);
        assert_eq!(&f[..8], MAGIC);
        assert_eq!(f[8], 1);
        assert_eq!(u16_at(&f, 9), 3);
        assert_eq!(u32_at(&f, 11), 4);
        assert_eq!(&f[15..], b"tokbody");
        assert_eq!(request("Control", b"", b"", false), [2, 0, 0, 0, 0, 0, 0]);
        let r = reply(16, None, b"no");
        assert_eq!(r, [16, 0, 2, 0, 0, 0, b'n', b'o']);
        assert_ne!(MAGIC[0], b'P', "told apart from HTTP/2's preface");
        assert_ne!(MAGIC[0], 0x16, "and from a TLS handshake");
    }

    #[test]
    fn a_read_gives_up_on_a_silent_peer_and_on_its_deadline() {
        struct Silent;
        impl Read for Silent {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_millis(5));
                Err(ErrorKind::TimedOut.into())
            }
        }
        let mut b = [0; 4];
        let far = Instant::now() + Duration::from_secs(60);
        let r = read_full(&mut Silent, &mut b, far, Duration::from_millis(20), &|| {
            false
        });
        assert!(matches!(r, Err(Short::Late)), "{r:?}");
        let r = read_full(
            &mut Silent,
            &mut b,
            Instant::now(),
            Duration::from_secs(60),
            &|| false,
        );
        assert!(matches!(r, Err(Short::Late)), "{r:?}");
        let r = read_full(&mut Silent, &mut b, far, Duration::from_secs(60), &|| true);
        assert!(matches!(r, Err(Short::Stopped)), "{r:?}");
        let r = read_full(&mut &b"ab"[..], &mut b, far, SILENT, &|| false);
        assert!(matches!(r, Err(Short::Io(_))), "{r:?}");
        let r = read_full(&mut &b""[..], &mut b, far, SILENT, &|| false);
        assert!(matches!(r, Err(Short::Closed)), "{r:?}");
    }
}
