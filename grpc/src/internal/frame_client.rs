//! The caller's end of the framed transport (`frame.rs`): a few idle
//! connections per peer, each taken by one calling thread for one call
//! (written in one piece, answered on the same connection) and given back.
//! No runtime and no other thread: the call's cost is two socket
//! operations and the callee's work.

use super::frame::{self, Short};
use super::messages::{Call, Reply};
use super::secret::{Nonce, Secret};
use crate::server::MAX_MESSAGE;
use parking_lot::Mutex;
use std::io::{BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use tonic::{Code, Status};

/// Idle connections kept per peer (more callers at once open more).
const KEEP: usize = 16;
/// A pooled connection idle this long is dropped rather than used: the
/// callee closes connections idle for `frame_server::IDLE`.
const STALE: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A reply as received: its status, tag and body.
struct Received {
    status: u8,
    tag: Vec<u8>,
    body: Vec<u8>,
}

struct Conn {
    r: BufReader<TcpStream>,
    used: Instant,
}

/// The connections to one peer.
pub(crate) struct Pool {
    addr: String,
    idle: Mutex<Vec<Conn>>,
}

fn unreachable(addr: &str, e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("{addr}: {e}"))
}

/// The metadata key that marks a call sent whole and never answered: the
/// callee may have done it (a write must not be sent again).
const UNANSWERED: &str = "x-bt-unanswered";

/// Whether `s` says that a call was sent and never answered.
pub(crate) fn unanswered(s: &Status) -> bool {
    s.metadata().get(UNANSWERED).is_some()
}

fn mark_unanswered(mut s: Status) -> Status {
    s.metadata_mut()
        .insert(UNANSWERED, tonic::metadata::MetadataValue::from_static("1"));
    s
}

impl Pool {
    pub(crate) fn new(addr: &str) -> Pool {
        Pool {
            addr: addr.to_string(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle connection, or a new one (true: the magic is still to send).
    fn take(&self) -> Result<(Conn, bool), Status> {
        {
            let mut idle = self.idle.lock();
            while let Some(c) = idle.pop() {
                if c.used.elapsed() < STALE {
                    return Ok((c, false));
                }
            }
        }
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(|e| unreachable(&self.addr, e))?
            .next()
            .ok_or_else(|| unreachable(&self.addr, "no address"))?;
        let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| unreachable(&self.addr, e))?;
        let setup = || -> std::io::Result<()> {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(frame::TICK))?;
            s.set_write_timeout(Some(super::frame_server::WRITE_TIMEOUT))
        };
        setup().map_err(|e| unreachable(&self.addr, e))?;
        let conn = Conn {
            r: BufReader::with_capacity(64 << 10, s),
            used: Instant::now(),
        };
        Ok((conn, true))
    }

    fn give_back(&self, mut c: Conn) {
        c.used = Instant::now();
        let mut idle = self.idle.lock();
        if idle.len() < KEEP {
            idle.push(c);
        }
    }

    /// Sends `call` on route `method` and waits for the reply, which must
    /// prove the peer knows `secret` (when there is one).
    pub(crate) fn call(
        &self,
        secret: Option<&Secret>,
        call: &Call,
        method: &str,
        timeout: Duration,
    ) -> Result<Reply, Status> {
        let body = bincode::serialize(call)
            .map_err(|e| Status::internal(format!("cannot encode a message: {e}")))?;
        let (token, nonce) = match secret {
            Some(s) => {
                let (t, n) = s.token(method, &self.addr, &body);
                (t, Some(n))
            }
            None => (String::new(), None),
        };
        let (mut c, first) = self.take()?;
        let f = frame::request(method, token.as_bytes(), &body, first);
        drop(body);
        c.r.get_mut()
            .write_all(&f)
            .map_err(|e| unreachable(&self.addr, e))?;
        drop(f);
        let received = self.answer(&mut c, timeout).map_err(mark_unanswered)?;
        let reply = self.open(secret, method, nonce, received);
        // A refused call's connection may have been closed by the callee:
        // only a clean reply's is kept.
        if reply.is_ok() {
            self.give_back(c);
        }
        reply
    }

    /// The reply's status, tag and body.
    fn answer(&self, c: &mut Conn, timeout: Duration) -> Result<Received, Status> {
        let deadline = Instant::now() + timeout;
        let never = || false;
        let late = |e: Short| match e {
            Short::Late => Status::deadline_exceeded(format!(
                "{}: no answer (silent {:?}, or past the call's {timeout:?})",
                self.addr,
                frame::SILENT
            )),
            e => unreachable(&self.addr, e),
        };
        let mut head = [0; frame::REPLY_HEAD];
        loop {
            frame::read_full(&mut c.r, &mut head[..1], deadline, frame::SILENT, &never)
                .map_err(late)?;
            if head[0] != frame::HEARTBEAT {
                break;
            }
        }
        frame::read_full(&mut c.r, &mut head[1..], deadline, frame::SILENT, &never)
            .map_err(late)?;
        let (tag_len, len) = (head[1] as usize, frame::u32_at(&head, 2));
        if len > MAX_MESSAGE {
            return Err(unreachable(&self.addr, format!("a reply of {len} bytes")));
        }
        let mut tag = vec![0; tag_len];
        let mut body = vec![0; len];
        frame::read_full(&mut c.r, &mut tag, deadline, frame::SILENT, &never).map_err(late)?;
        frame::read_full(&mut c.r, &mut body, deadline, frame::SILENT, &never).map_err(late)?;
        Ok(Received {
            status: head[0],
            tag,
            body,
        })
    }

    fn open(
        &self,
        secret: Option<&Secret>,
        method: &str,
        nonce: Option<Nonce>,
        Received { status, tag, body }: Received,
    ) -> Result<Reply, Status> {
        if status != 0 {
            let msg = String::from_utf8_lossy(&body).into_owned();
            return Err(Status::new(Code::from_i32(i32::from(status)), msg));
        }
        if let (Some(s), Some(n)) = (secret, nonce) {
            if !s.verify_reply_tag(method, n, &body, &tag) {
                return Err(super::quiet::unproven(&self.addr, "a reply"));
            }
        }
        super::codec::decode_bounded(&body)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::internal::messages::Op;
    use std::io::Read;
    use std::net::TcpListener;

    fn is_serving() -> Call {
        Call {
            server: Some("ts0".into()),
            op: Op::IsServing,
        }
    }

    /// A callee at the returned address that reads one request, then does
    /// what `then` does with the connection.
    fn callee(then: impl FnOnce(&mut TcpStream) + Send + 'static) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0; 256];
            let _ = c.read(&mut b);
            then(&mut c);
        });
        addr
    }

    #[test]
    fn a_silent_callee_fails_the_call_long_before_its_timeout() {
        let addr = callee(|c| {
            // Alive at the TCP level, never answering (a frozen daemon).
            std::thread::sleep(Duration::from_secs(30));
            let _ = c.write_all(&[]);
        });
        let t = Instant::now();
        let e = Pool::new(&addr)
            .call(None, &is_serving(), "Control", Duration::from_secs(600))
            .unwrap_err();
        assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
        assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    }

    #[test]
    fn heartbeats_keep_a_long_call_alive() {
        let addr = callee(|c| {
            // Working longer than a caller waits in silence, saying so.
            for _ in 0..12 {
                std::thread::sleep(Duration::from_secs(1));
                c.write_all(&[frame::HEARTBEAT]).unwrap();
            }
            let reply = bincode::serialize(&Reply(Ok(bincode::serialize(&true).unwrap()))).unwrap();
            c.write_all(&frame::reply(0, None, &reply)).unwrap();
        });
        let pool = Pool::new(&addr);
        let reply = pool
            .call(None, &is_serving(), "Control", Duration::from_secs(600))
            .unwrap();
        let serving: bool = bincode::deserialize(&reply.0.unwrap()).unwrap();
        assert!(serving);
        assert_eq!(pool.idle.lock().len(), 1, "the connection is kept");
    }
}
