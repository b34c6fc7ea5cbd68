//! The callee's end of the framed transport (`frame.rs`): a thread per
//! connection that reads a request, checks its token before reading its
//! body, runs the engine call itself and writes the reply in one piece.
//! Connections share the listener's port with HTTP/2 (told apart by their
//! first byte), its cap on connections, its budget of bytes being received
//! and its replay cache, so one check holds whichever way a call comes.

use super::auth::log_refusal;
use super::frame::{self, Short};
use super::messages::{Call, Reply};
use super::nonces::{Fresh, Nonces};
use super::secret::{now_secs, sha256, Secret};
use super::service::{data_op, dispatch, Target};
use crate::guard::{self, Budget, Conns, Limits, Permit};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;

/// How long a connection may wait for its next request before it is
/// closed (callers drop a pooled connection idle half as long).
pub(crate) const IDLE: Duration = Duration::from_secs(60);
/// A call that has run this long gets heartbeats (`frame::HEARTBEAT`).
const BEAT_AFTER: Duration = Duration::from_secs(2);
/// How long one write of a reply may block.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

type Writer = Arc<Mutex<TcpStream>>;

/// What every connection's thread shares.
pub(crate) struct FrameServer {
    pub(crate) target: Target,
    /// Watches and invalidations between daemons.
    pub(crate) coherence: Arc<super::coherence::Coherence>,
    pub(crate) secret: Option<Secret>,
    pub(crate) advertised: Arc<str>,
    pub(crate) nonces: Arc<Nonces>,
    pub(crate) served: Arc<AtomicU64>,
    pub(crate) limits: Limits,
    pub(crate) budget: Arc<Budget>,
    stop: AtomicBool,
    /// Calls running, by number: when each started and its connection.
    busy: Mutex<HashMap<u64, (Instant, Writer)>>,
    calls: AtomicU64,
}

/// A refusal: the status written back, and whether the connection is
/// closed after it (its stream is no longer at a frame's start, or the
/// caller is not one to keep talking to).
struct Refusal {
    code: Code,
    why: String,
    close: bool,
}

fn refuse(code: Code, why: impl Into<String>, close: bool) -> Refusal {
    Refusal {
        code,
        why: why.into(),
        close,
    }
}

impl FrameServer {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        target: Target,
        coherence: Arc<super::coherence::Coherence>,
        secret: Option<Secret>,
        advertised: Arc<str>,
        nonces: Arc<Nonces>,
        served: Arc<AtomicU64>,
        limits: Limits,
        budget: Arc<Budget>,
    ) -> Arc<FrameServer> {
        let s = Arc::new(FrameServer {
            target,
            coherence,
            secret,
            advertised,
            nonces,
            served,
            limits,
            budget,
            stop: AtomicBool::new(false),
            busy: Mutex::default(),
            calls: AtomicU64::new(0),
        });
        let beat = Arc::downgrade(&s);
        let spawned = std::thread::Builder::new()
            .name("bt-rpc-beat".into())
            .spawn(move || heartbeats(beat));
        if let Err(e) = spawned {
            log::warn!("no heartbeats for long internal calls: {e}");
        }
        s
    }

    /// Ends every connection's thread (at its next tick) and the heartbeats.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Tells the callers of calls running for a while that this daemon is
    /// alive.
    fn beat(&self) {
        let old: Vec<(u64, Writer)> = self
            .busy
            .lock()
            .iter()
            .filter(|(_, (t, _))| t.elapsed() >= BEAT_AFTER)
            .map(|(id, (_, w))| (*id, w.clone()))
            .collect();
        for (id, w) in old {
            let mut w = w.lock();
            // Still running (its reply, written under this lock after
            // the call leaves `busy`, is not out yet).
            if self.busy.lock().contains_key(&id) {
                let _ = w.write_all(&[frame::HEARTBEAT]);
            }
        }
    }

    /// Serves connection `stream` from `peer` on a thread of its own,
    /// holding `permit` until it closes.
    pub(crate) fn spawn(self: &Arc<Self>, stream: TcpStream, peer: IpAddr, permit: Permit) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("bt-rpc-conn".into())
            .spawn(move || {
                let _permit = permit;
                me.serve(stream, peer);
            });
        if let Err(e) = spawned {
            log::warn!("cannot serve an internal connection from {peer}: {e}");
        }
    }

    fn serve(&self, stream: TcpStream, peer: IpAddr) {
        let setup = || -> std::io::Result<(BufReader<TcpStream>, Writer)> {
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(frame::TICK))?;
            stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
            let w = stream.try_clone()?;
            Ok((
                BufReader::with_capacity(64 << 10, stream),
                Arc::new(Mutex::new(w)),
            ))
        };
        let Ok((mut r, w)) = setup() else { return };
        let stop = || self.stopped();
        let mut magic = [0; frame::MAGIC.len()];
        let by = Instant::now() + self.limits.header_timeout;
        if frame::read_full(&mut r, &mut magic, by, frame::SILENT, &stop).is_err()
            || &magic != frame::MAGIC
        {
            log_refusal(Some(peer), "not a frame of the internal RPC");
            return;
        }
        loop {
            match self.one(&mut r, &w, peer) {
                Ok(true) => {}
                Ok(false) => return,
                Err(r) => {
                    if matches!(r.code, Code::Unauthenticated) {
                        log_refusal(Some(peer), &r.why);
                    } else {
                        guard::count("refused");
                        log::debug!("refused an internal frame from {peer}: {}", r.why);
                    }
                    let f = frame::reply(r.code as u8, None, r.why.as_bytes());
                    let _ = w.lock().write_all(&f);
                    if r.close {
                        return;
                    }
                }
            }
        }
    }

    /// Reads, checks and answers one request; false when the connection
    /// ended.
    fn one(&self, r: &mut BufReader<TcpStream>, w: &Writer, peer: IpAddr) -> Result<bool, Refusal> {
        let stop = || self.stopped();
        let mut head = [0; frame::REQUEST_HEAD];
        match frame::read_full(r, &mut head, Instant::now() + IDLE, IDLE, &stop) {
            Ok(()) => {}
            Err(Short::Closed | Short::Stopped | Short::Late) => return Ok(false),
            Err(e) => {
                log::debug!("an internal connection from {peer}: {e}");
                return Ok(false);
            }
        }
        let Some(method) = frame::route_name(head[0]) else {
            return Err(refuse(
                Code::Unauthenticated,
                "not a frame of the internal RPC",
                true,
            ));
        };
        let (token_len, body_len) = (frame::u16_at(&head, 1), frame::u32_at(&head, 3));
        let max = if method == "Call" {
            self.limits.max_request
        } else {
            self.limits.max_control
        };
        if body_len > max {
            let why =
                format!("{method} requests are limited to {max} bytes; this one has {body_len}");
            return Err(refuse(Code::OutOfRange, why, true));
        }
        if token_len > frame::MAX_TOKEN {
            return Err(refuse(
                Code::Unauthenticated,
                "wrong or missing cluster secret",
                true,
            ));
        }
        let mut token = vec![0; token_len];
        let by = Instant::now() + self.limits.header_timeout;
        frame::read_full(r, &mut token, by, frame::SILENT, &stop)
            .map_err(|e| refuse(Code::DeadlineExceeded, format!("the token: {e}"), true))?;
        let claims = self.check(method, &token)?;
        if !self.budget.charge(body_len) {
            guard::count("too_large");
            return Err(refuse(
                Code::ResourceExhausted,
                "too many bytes of requests being received; retry",
                true,
            ));
        }
        let mut body = vec![0; body_len];
        let by = Instant::now() + self.limits.body_timeout;
        let read = frame::read_full(r, &mut body, by, self.limits.body_timeout, &stop);
        self.budget.release(body_len);
        read.map_err(|e| {
            refuse(
                Code::DeadlineExceeded,
                format!("the request's body: {e}"),
                true,
            )
        })?;
        if let Some(c) = &claims {
            if sha256(&body) != c.digest {
                let why = "a body other than the one its token covers";
                return Err(refuse(Code::Unauthenticated, why, true));
            }
        }
        let call: Call = super::codec::decode_bounded(&body).map_err(|e| {
            refuse(
                Code::InvalidArgument,
                format!("malformed message: {e}"),
                false,
            )
        })?;
        drop(body);
        self.served.fetch_add(1, Ordering::Relaxed);
        let Some(bt) = self.target.get().cloned() else {
            return Err(refuse(Code::Unavailable, "the daemon is starting", false));
        };
        if data_op(&call.op) != (method == "Call") {
            let why = "an operation sent by the wrong route";
            return Err(refuse(Code::InvalidArgument, why, false));
        }
        let id = self.calls.fetch_add(1, Ordering::Relaxed);
        self.busy.lock().insert(id, (Instant::now(), w.clone()));
        let result = match self.coherence.handle(&call.op) {
            Some(r) => r,
            None => dispatch(&bt, call),
        };
        self.busy.lock().remove(&id);
        let bytes = bincode::serialize(&Reply(result))
            .map_err(|e| refuse(Code::Internal, format!("cannot encode a reply: {e}"), false))?;
        let tag = match (&self.secret, &claims) {
            (Some(s), Some(c)) => Some(s.reply_tag(method, c.nonce, &bytes)),
            _ => None,
        };
        let f = frame::reply(0, tag.as_ref(), &bytes);
        Ok(w.lock().write_all(&f).is_ok())
    }

    /// The token's claims (None without a secret), checked before a byte
    /// of the body is read, its nonce admitted once.
    fn check(&self, method: &str, token: &[u8]) -> Result<Option<super::secret::Claims>, Refusal> {
        let Some(secret) = &self.secret else {
            return Ok(None);
        };
        let unauth = |why: &str| refuse(Code::Unauthenticated, why, true);
        let token =
            std::str::from_utf8(token).map_err(|_| unauth("wrong or missing cluster secret"))?;
        let now = now_secs();
        let claims = secret
            .verify_token(token, method, &self.advertised, now)
            .map_err(unauth)?;
        match self.nonces.admit(claims.secs, claims.nonce.value(), now) {
            Fresh::Yes => Ok(Some(claims)),
            Fresh::Replayed => {
                telemetry::refused("cluster", "replayed");
                Err(unauth("a replayed call (its nonce was seen)"))
            }
            Fresh::Full => {
                if let Some(more) = super::quiet::should_log("the replay cache") {
                    log::warn!(
                        "refused internal calls: the replay cache is full \
                         (cluster_replay_cache; {more} more since this was last logged)"
                    );
                }
                Err(refuse(
                    Code::Unavailable,
                    "too many calls in the last minute to check for replays; retry",
                    true,
                ))
            }
        }
    }
}

/// Heartbeats once a second until the server is stopped or dropped.
fn heartbeats(server: std::sync::Weak<FrameServer>) {
    loop {
        std::thread::sleep(frame::TICK);
        match server.upgrade() {
            Some(s) if !s.stopped() => s.beat(),
            _ => return,
        }
    }
}

/// The connections `listener` accepts: those that start with
/// `frame::MAGIC` are served by `frames`, on threads of their own; the
/// others (HTTP/2) are returned for tonic. Both count against `conns`,
/// and one that sends nothing within the header timeout is closed.
/// Called inside the server's runtime.
pub(crate) fn incoming(
    listener: std::net::TcpListener,
    conns: Conns,
    header_timeout: Duration,
    frames: Arc<FrameServer>,
) -> std::io::Result<
    impl tokio_stream::Stream<Item = std::io::Result<guard::Conn<tokio::net::TcpStream>>>,
> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let (s, peer) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    log::debug!("accepting an internal connection: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let Some(permit) = conns.permit() else {
                continue; // closed at once
            };
            let _ = s.set_nodelay(true);
            let (tx, conns, frames) = (tx.clone(), conns.clone(), frames.clone());
            tokio::spawn(async move {
                let mut first = [0; 1];
                match tokio::time::timeout(header_timeout, s.peek(&mut first)).await {
                    Ok(Ok(1)) if first[0] == frame::MAGIC[0] => match s.into_std() {
                        Ok(s) => frames.spawn(s, peer.ip(), permit),
                        Err(e) => log::debug!("an internal connection from {peer}: {e}"),
                    },
                    Ok(Ok(_)) => {
                        let _ = tx.send(Ok(conns.wrap(s, permit))).await;
                    }
                    Ok(Err(e)) => log::debug!("an internal connection from {peer}: {e}"),
                    Err(_) => guard::count("too_slow"),
                }
            });
        }
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}
