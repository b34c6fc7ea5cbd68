//! The cluster's shared secret, which never crosses the network. A caller
//! proves it knows the secret with an HMAC that binds the call: its route,
//! the callee's advertised address, a SHA-256 digest of the request's
//! body, the time and a fresh nonce. The callee checks the HMAC on the
//! headers (before reading the body), refuses a nonce it has seen in the
//! window (see `nonces.rs`), and compares the body it then receives with
//! the digest before decoding it. It proves itself back with an HMAC of the
//! nonce and the reply's bytes (of each message, numbered, for a scan's
//! stream). So a captured call cannot be replayed, redirected to another
//! daemon, or given another body, and a reply cannot be forged or altered.
//! A caller without the secret is refused and logged; a callee without it
//! (a daemon that registered in the lock service but was not given the
//! secret) is not believed, so no tablet is loaded on it and nothing read
//! from it.

use ring::{digest, hmac};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::Request;

/// The request's token: `SECS.NONCE.DIGEST.HMAC`.
const AUTH: &str = "x-bigtable-cluster-auth";
/// The reply's proof: the HMAC of the request's nonce and the reply.
const PROOF: &str = "x-bigtable-cluster-proof";

/// Bytes below which a secret is refused as guessable.
pub const MIN_SECRET_BYTES: usize = 16;

/// How far a token's time may be from the callee's clock (the daemons'
/// clocks must agree within this), and so how long its nonce is kept.
pub const TOKEN_WINDOW_SECS: u64 = 60;

/// A secret read from a file.
#[derive(Clone)]
pub struct Secret(hmac::Key);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// What a call's token named: the nonce the reply's proof covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Nonce(u64);

/// A checked token's claims, for the handler (request extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claims {
    pub(crate) secs: u64,
    pub(crate) nonce: Nonce,
    /// The SHA-256 of the body the token covers.
    pub(crate) digest: [u8; 32],
}

impl Nonce {
    pub(crate) fn value(self) -> u64 {
        self.0
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    out
}

/// Lower-case hex, in one allocation (every call hexes two or three
/// digests: a `format!` per byte was some 100 allocations a call).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return None;
    }
    t.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Whether `a` and `b` are equal, in time that does not depend on where
/// they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && std::hint::black_box(a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y))) == 0
}

const WRONG: &str = "wrong or missing cluster secret";

impl Secret {
    /// Reads the secret from `path` (surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Secret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the cluster secret {}: {e}", path.display()))?;
        Secret::new(text.trim())
    }

    /// A secret no one else knows, for a daemon that calls only itself.
    pub fn random() -> Secret {
        let bytes: [u8; 32] = rand::random();
        Secret(hmac::Key::new(hmac::HMAC_SHA256, &bytes))
    }

    /// A secret from its text: at least [`MIN_SECRET_BYTES`] printable bytes.
    pub fn new(text: &str) -> Result<Secret, String> {
        if text.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the cluster secret is {} bytes; at least {MIN_SECRET_BYTES} are needed",
                text.len()
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the cluster secret must be printable ASCII without spaces".into());
        }
        Ok(Secret(hmac::Key::new(hmac::HMAC_SHA256, text.as_bytes())))
    }

    fn call_message(method: &str, target: &str, secs: u64, nonce: u64, digest: &[u8]) -> String {
        format!(
            "bigtable internal call v2\n{method}\n{target}\n{secs}\n{nonce}\n{}",
            hex(digest)
        )
    }

    fn mac(&self, head: &str, body: &[u8]) -> [u8; 32] {
        let mut c = hmac::Context::with_key(&self.0);
        c.update(head.as_bytes());
        c.update(body);
        let mut out = [0; 32];
        out.copy_from_slice(c.sign().as_ref());
        out
    }

    /// Adds a token to an outgoing call on route `method` to the daemon
    /// advertised as `target`, whose body is `body`; returns the nonce its
    /// reply must prove.
    pub(crate) fn attach<T>(
        &self,
        req: &mut Request<T>,
        method: &str,
        target: &str,
        body: &[u8],
    ) -> Nonce {
        self.attach_at(
            req,
            method,
            target,
            &sha256(body),
            now_secs(),
            rand::random(),
        )
    }

    fn attach_at<T>(
        &self,
        req: &mut Request<T>,
        method: &str,
        target: &str,
        digest: &[u8; 32],
        secs: u64,
        nonce: u64,
    ) -> Nonce {
        let token = self.token_at(method, target, digest, secs, nonce);
        if let Ok(v) = MetadataValue::try_from(token.as_str()) {
            req.metadata_mut().insert(AUTH, v);
        }
        Nonce(nonce)
    }

    /// The token of a call on route `method` to `target` whose body is
    /// `body` (as [`Secret::attach`] puts in a header), and its nonce.
    pub(crate) fn token(&self, method: &str, target: &str, body: &[u8]) -> (String, Nonce) {
        let nonce = rand::random();
        let token = self.token_at(method, target, &sha256(body), now_secs(), nonce);
        (token, Nonce(nonce))
    }

    fn token_at(
        &self,
        method: &str,
        target: &str,
        digest: &[u8; 32],
        secs: u64,
        nonce: u64,
    ) -> String {
        let msg = Self::call_message(method, target, secs, nonce, digest);
        let tag = hmac::sign(&self.0, msg.as_bytes());
        format!("{secs}.{nonce}.{}.{}", hex(digest), hex(tag.as_ref()))
    }

    /// The claims of a call's token if this secret made it for route
    /// `method` to `target` within the window around `now`. Reads the
    /// headers only; the nonce's freshness and the body's digest are for
    /// the caller to check.
    pub(crate) fn check(
        &self,
        headers: &http::HeaderMap,
        method: &str,
        target: &str,
        now: u64,
    ) -> Result<Claims, &'static str> {
        let token = headers
            .get(AUTH)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        self.verify_token(token, method, target, now)
    }

    /// [`Secret::check`] of a token given as text.
    pub(crate) fn verify_token(
        &self,
        token: &str,
        method: &str,
        target: &str,
        now: u64,
    ) -> Result<Claims, &'static str> {
        let mut parts = token.splitn(4, '.');
        let (Some(secs), Some(nonce), Some(digest), Some(tag)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(WRONG);
        };
        let (Ok(secs), Ok(nonce), Some(digest), Some(tag)) = (
            secs.parse::<u64>(),
            nonce.parse::<u64>(),
            unhex(digest),
            unhex(tag),
        ) else {
            return Err(WRONG);
        };
        let digest: [u8; 32] = digest.try_into().map_err(|_| WRONG)?;
        let msg = Self::call_message(method, target, secs, nonce, &digest);
        hmac::verify(&self.0, msg.as_bytes(), &tag).map_err(|_| {
            "wrong or missing cluster secret, or a token for another call or daemon"
        })?;
        if secs.abs_diff(now) > TOKEN_WINDOW_SECS {
            return Err("a cluster token from another time (clocks apart, or a replay)");
        }
        Ok(Claims {
            secs,
            nonce: Nonce(nonce),
            digest,
        })
    }

    fn reply_head(method: &str, nonce: Nonce) -> String {
        format!("bigtable internal reply v2\n{method}\n{}\n", nonce.0)
    }

    /// The proof of a reply to the call `nonce` on route `method`.
    pub(crate) fn reply_tag(&self, method: &str, nonce: Nonce, body: &[u8]) -> [u8; 32] {
        self.mac(&Self::reply_head(method, nonce), body)
    }

    /// Whether `tag` is [`Secret::reply_tag`] of this reply.
    pub(crate) fn verify_reply_tag(
        &self,
        method: &str,
        nonce: Nonce,
        body: &[u8],
        tag: &[u8],
    ) -> bool {
        same(&self.reply_tag(method, nonce, body), tag)
    }

    /// The reply's proof that this daemon knows the secret and sent `body`.
    pub(crate) fn prove(&self, method: &str, nonce: Nonce, body: &[u8], reply: &mut MetadataMap) {
        let tag = self.mac(&Self::reply_head(method, nonce), body);
        if let Ok(v) = MetadataValue::try_from(hex(&tag).as_str()) {
            reply.insert(PROOF, v);
        }
    }

    /// Whether a reply proves its sender knows the secret and sent `body`.
    pub(crate) fn verify_reply(
        &self,
        method: &str,
        nonce: Nonce,
        body: &[u8],
        reply: &MetadataMap,
    ) -> bool {
        let Some(tag) = reply
            .get(PROOF)
            .and_then(|v| v.to_str().ok())
            .and_then(unhex)
        else {
            return false;
        };
        same(&self.mac(&Self::reply_head(method, nonce), body), &tag)
    }

    fn chunk_head(nonce: Nonce, seq: u64) -> String {
        format!("bigtable internal chunk v2\n{}\n{seq}\n", nonce.0)
    }

    /// The tag of message `seq` (from 0) of the stream answering `nonce`.
    pub(crate) fn tag_chunk(&self, nonce: Nonce, seq: u64, body: &[u8]) -> [u8; 32] {
        self.mac(&Self::chunk_head(nonce, seq), body)
    }

    /// Whether `tag` is that of message `seq` with `body`.
    pub(crate) fn verify_chunk(&self, nonce: Nonce, seq: u64, body: &[u8], tag: &[u8]) -> bool {
        same(&self.tag_chunk(nonce, seq, body), tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "10.0.0.1:7100";

    fn token_of<X>(r: &Request<X>) -> String {
        r.metadata()
            .get(AUTH)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn short_or_unprintable_secrets_are_refused() {
        assert!(Secret::new("short").is_err());
        assert!(Secret::new("sixteen bytes!!!").is_err(), "spaces");
        assert!(Secret::new("0123456789abcdef").is_ok());
    }

    #[test]
    fn only_the_same_secret_passes_and_the_secret_never_travels() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let mut ok = Request::new(());
        let nonce = s.attach(&mut ok, "Call", T, b"body");
        let token = token_of(&ok);
        assert!(!token.contains("0123456789abcdef"), "{token}");
        let check =
            |r: &Request<()>| s.check(&r.metadata().clone().into_headers(), "Call", T, now_secs());
        let claims = check(&ok).unwrap();
        assert_eq!(claims.nonce, nonce);
        assert_eq!(claims.digest, sha256(b"body"));
        let mut wrong = Request::new(());
        Secret::new("0123456789abcdeX")
            .unwrap()
            .attach(&mut wrong, "Call", T, b"body");
        assert!(check(&wrong).is_err());
        assert!(check(&Request::new(())).is_err());
        // A tampered nonce breaks the token.
        let forged = token.replacen('.', ".1", 1);
        assert!(s.verify_token(&forged, "Call", T, now_secs()).is_err());
    }

    #[test]
    fn a_token_is_for_one_route_one_daemon_and_one_body() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let mut req = Request::new(());
        s.attach(&mut req, "Control", T, b"unload 7");
        let token = token_of(&req);
        let now = now_secs();
        assert!(s.verify_token(&token, "Control", T, now).is_ok());
        assert!(s.verify_token(&token, "Call", T, now).is_err(), "route");
        assert!(
            s.verify_token(&token, "Control", "10.0.0.2:7100", now)
                .is_err(),
            "another daemon"
        );
        // Another body's digest in the token breaks its HMAC.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[2] = hex(&sha256(b"unload 8"));
        assert!(s.verify_token(&parts.join("."), "Control", T, now).is_err());
    }

    #[test]
    fn old_tokens_are_refused() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let mut req = Request::new(());
        s.attach_at(&mut req, "Call", T, &sha256(b""), 1_000, 7);
        let token = token_of(&req);
        let c = s
            .verify_token(&token, "Call", T, 1_000 + TOKEN_WINDOW_SECS)
            .unwrap();
        assert_eq!((c.secs, c.nonce), (1_000, Nonce(7)));
        assert!(s
            .verify_token(&token, "Call", T, 1_001 + TOKEN_WINDOW_SECS)
            .is_err());
    }

    #[test]
    fn a_reply_proves_the_callee_knows_the_secret_and_its_body() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let other = Secret::new("fedcba9876543210").unwrap();
        let mut reply = MetadataMap::new();
        assert!(!s.verify_reply("Call", Nonce(5), b"r", &reply), "no proof");
        other.prove("Call", Nonce(5), b"r", &mut reply);
        assert!(
            !s.verify_reply("Call", Nonce(5), b"r", &reply),
            "another secret"
        );
        s.prove("Call", Nonce(5), b"r", &mut reply);
        assert!(s.verify_reply("Call", Nonce(5), b"r", &reply));
        assert!(
            !s.verify_reply("Call", Nonce(6), b"r", &reply),
            "another call"
        );
        assert!(
            !s.verify_reply("Call", Nonce(5), b"R", &reply),
            "another body"
        );
        let t = s.tag_chunk(Nonce(5), 3, b"cells");
        assert!(s.verify_chunk(Nonce(5), 3, b"cells", &t));
        assert!(!s.verify_chunk(Nonce(5), 4, b"cells", &t), "reordered");
        assert!(!s.verify_chunk(Nonce(5), 3, b"cellz", &t), "altered");
    }

    #[test]
    fn hex_is_lower_case_two_digits_a_byte_and_reads_back() {
        let all: Vec<u8> = (0..=255).collect();
        let h = hex(&all);
        let slow: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(h, slow);
        assert_eq!(unhex(&h), Some(all));
        assert_eq!(unhex("0A"), Some(vec![10]));
        for bad in ["0", "0g", "+f", " 1"] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
    }
}
