//! The cluster's shared secret, which never crosses the network: a caller
//! proves it knows the secret with an HMAC of the time and a fresh nonce,
//! and the callee proves it back with an HMAC of that nonce. A caller
//! without the secret is refused and logged; a callee without it (a daemon
//! that registered in the lock service but was not given the secret) is
//! not believed, so no tablet is loaded on it and nothing read from it.

use ring::hmac;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Status};

/// The request's token: `SECS.NONCE.HMAC`.
const AUTH: &str = "x-bigtable-cluster-auth";
/// The reply's proof: the HMAC of the request's nonce.
const PROOF: &str = "x-bigtable-cluster-proof";

/// Bytes below which a secret is refused as guessable.
pub const MIN_SECRET_BYTES: usize = 16;

/// How far a token's time may be from the callee's clock: bounds how long
/// a token captured on the wire can be replayed.
const TOKEN_SKEW_SECS: u64 = 300;

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

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Secret {
    /// Reads the secret from `path` (surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Secret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the cluster secret {}: {e}", path.display()))?;
        Secret::new(text.trim())
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

    fn call_message(secs: u64, nonce: u64) -> String {
        format!("bigtable internal call\n{secs}\n{nonce}")
    }

    fn reply_message(nonce: Nonce) -> String {
        format!("bigtable internal reply\n{}", nonce.0)
    }

    /// Adds a token to an outgoing call; returns the nonce its reply must
    /// prove.
    pub(crate) fn attach<T>(&self, req: &mut Request<T>) -> Nonce {
        self.attach_at(req, now_secs(), rand::random())
    }

    fn attach_at<T>(&self, req: &mut Request<T>, secs: u64, nonce: u64) -> Nonce {
        let tag = hmac::sign(&self.0, Self::call_message(secs, nonce).as_bytes());
        let token = format!("{secs}.{nonce}.{}", hex(tag.as_ref()));
        if let Ok(v) = MetadataValue::try_from(token.as_str()) {
            req.metadata_mut().insert(AUTH, v);
        }
        Nonce(nonce)
    }

    /// Refuses a call (to route `_method`, from `peer`) whose token this
    /// secret did not make, or made too long ago; returns the nonce to
    /// prove in the reply. Reads the headers only.
    pub(crate) fn check(
        &self,
        headers: &http::HeaderMap,
        _method: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Nonce, Status> {
        let token = headers
            .get(AUTH)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let verdict = self.verify_token(token, now_secs());
        verdict.map_err(|why| {
            let peer = super::quiet::ip_key(peer);
            if let Some(more) = super::quiet::should_log(&peer) {
                log::warn!(
                    "refused an internal call from {peer}: {why} \
                     ({more} more refused since this was last logged)"
                );
            }
            Status::unauthenticated(why)
        })
    }

    fn verify_token(&self, token: &str, now: u64) -> Result<Nonce, &'static str> {
        let mut parts = token.splitn(3, '.');
        let (Some(secs), Some(nonce), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("wrong or missing cluster secret");
        };
        let (Ok(secs), Ok(nonce), Some(tag)) =
            (secs.parse::<u64>(), nonce.parse::<u64>(), unhex(tag))
        else {
            return Err("wrong or missing cluster secret");
        };
        hmac::verify(&self.0, Self::call_message(secs, nonce).as_bytes(), &tag)
            .map_err(|_| "wrong or missing cluster secret")?;
        if secs.abs_diff(now) > TOKEN_SKEW_SECS {
            return Err("a cluster token from another time (clocks apart, or a replay)");
        }
        Ok(Nonce(nonce))
    }

    /// The reply's proof that this daemon knows the secret too.
    pub(crate) fn prove(&self, nonce: Nonce, reply: &mut MetadataMap) {
        let tag = hmac::sign(&self.0, Self::reply_message(nonce).as_bytes());
        if let Ok(v) = MetadataValue::try_from(hex(tag.as_ref()).as_str()) {
            reply.insert(PROOF, v);
        }
    }

    /// Whether a reply proves its sender knows the secret.
    pub(crate) fn verify_reply(&self, nonce: Nonce, reply: &MetadataMap) -> bool {
        let Some(tag) = reply
            .get(PROOF)
            .and_then(|v| v.to_str().ok())
            .and_then(unhex)
        else {
            return false;
        };
        hmac::verify(&self.0, Self::reply_message(nonce).as_bytes(), &tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let nonce = s.attach(&mut ok);
        let token = ok
            .metadata()
            .get(AUTH)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(!token.contains("0123456789abcdef"), "{token}");
        let check = |r: &Request<()>| s.check(&r.metadata().clone().into_headers(), "Call", None);
        assert_eq!(check(&ok).unwrap(), nonce);
        let mut wrong = Request::new(());
        Secret::new("0123456789abcdeX").unwrap().attach(&mut wrong);
        assert_eq!(
            check(&wrong).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(check(&Request::new(())).is_err());
        // A tampered nonce breaks the token.
        let forged = token.replacen('.', ".1", 1);
        assert!(s.verify_token(&forged, now_secs()).is_err());
    }

    #[test]
    fn old_tokens_are_refused() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let mut req = Request::new(());
        s.attach_at(&mut req, 1_000, 7);
        let token = req
            .metadata()
            .get(AUTH)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            s.verify_token(&token, 1_000 + TOKEN_SKEW_SECS),
            Ok(Nonce(7))
        );
        assert!(s.verify_token(&token, 1_001 + TOKEN_SKEW_SECS).is_err());
    }

    #[test]
    fn a_reply_proves_the_callee_knows_the_secret() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let other = Secret::new("fedcba9876543210").unwrap();
        let mut reply = MetadataMap::new();
        assert!(!s.verify_reply(Nonce(5), &reply), "no proof");
        other.prove(Nonce(5), &mut reply);
        assert!(!s.verify_reply(Nonce(5), &reply), "another secret's proof");
        s.prove(Nonce(5), &mut reply);
        assert!(s.verify_reply(Nonce(5), &reply));
        assert!(!s.verify_reply(Nonce(6), &reply), "another call's proof");
    }
}
