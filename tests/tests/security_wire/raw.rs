//! A raw gRPC client over HTTP/2 (the h2 crate): sends exactly the frames
//! an attacker chooses — no token, a body that never ends, a length prefix
//! that lies — which a gRPC client library would not.

use bytes::Bytes;
use std::future::poll_fn;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub type Conn = h2::client::SendRequest<Bytes>;

/// A connection to `addr`.
pub async fn connect(addr: &str) -> Conn {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// The gRPC frame header of a message of `len` bytes.
pub fn frame_header(len: u32) -> Vec<u8> {
    let mut h = vec![0u8];
    h.extend_from_slice(&len.to_be_bytes());
    h
}

/// A request's answer: the gRPC status code (None: the stream broke
/// before one came) and message.
#[derive(Debug)]
pub struct Answer {
    pub code: Option<i32>,
    pub message: String,
}

/// Opens a stream to `path` with `headers`; returns its send half and the
/// future of its answer.
pub async fn open(
    conn: &mut Conn,
    addr: &str,
    path: &str,
    headers: &[(&str, String)],
    end: bool,
) -> (
    h2::SendStream<Bytes>,
    impl std::future::Future<Output = Answer>,
) {
    let mut req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    let mut c = conn.clone().ready().await.unwrap();
    let (resp, send) = c.send_request(req.body(()).unwrap(), end).unwrap();
    (send, async move { answer(resp).await })
}

async fn answer(resp: h2::client::ResponseFuture) -> Answer {
    let resp = match resp.await {
        Ok(r) => r,
        Err(e) => {
            return Answer {
                code: None,
                message: e.to_string(),
            }
        }
    };
    let (parts, mut body) = resp.into_parts();
    let status = |h: &http::HeaderMap| {
        let code = h
            .get("grpc-status")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let message = unpercent(
            h.get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        );
        code.map(|c| Answer {
            code: Some(c),
            message,
        })
    };
    if let Some(a) = status(&parts.headers) {
        return a;
    }
    while let Some(d) = body.data().await {
        match d {
            Ok(d) => {
                let _ = body.flow_control().release_capacity(d.len());
            }
            Err(e) => {
                return Answer {
                    code: None,
                    message: e.to_string(),
                }
            }
        }
    }
    match body.trailers().await {
        Ok(Some(t)) => status(&t).unwrap_or(Answer {
            code: None,
            message: "trailers without a status".into(),
        }),
        Ok(None) => Answer {
            code: None,
            message: "no trailers".into(),
        },
        Err(e) => Answer {
            code: None,
            message: e.to_string(),
        },
    }
}

/// A `grpc-message` as text (it travels percent-encoded).
fn unpercent(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One whole unary request.
pub async fn call(addr: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> Answer {
    let mut conn = connect(addr).await;
    let (mut send, answer) = open(&mut conn, addr, path, headers, false).await;
    let mut msg = frame_header(body.len() as u32);
    msg.extend_from_slice(body);
    let _ = send.send_data(Bytes::from(msg), true);
    answer.await
}

/// Sends `data` on `send` as flow control allows, until done, refused or
/// `deadline`; returns the bytes sent.
pub async fn send_all(send: &mut h2::SendStream<Bytes>, data: &[u8], deadline: Instant) -> usize {
    let mut sent = 0;
    while sent < data.len() {
        let want = (data.len() - sent).min(1 << 20);
        send.reserve_capacity(want);
        let left = deadline.saturating_duration_since(Instant::now());
        let cap = match tokio::time::timeout(left, poll_fn(|cx| send.poll_capacity(cx))).await {
            Ok(Some(Ok(n))) if n > 0 => n.min(want),
            Ok(Some(Ok(_))) => continue,
            _ => return sent,
        };
        if send
            .send_data(Bytes::copy_from_slice(&data[sent..sent + cap]), false)
            .is_err()
        {
            return sent;
        }
        sent += cap;
    }
    sent
}

/// Waits at most `d` for `f`.
pub async fn within<T>(d: Duration, f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(d, f).await.ok()
}
