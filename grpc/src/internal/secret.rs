//! The cluster's shared secret: daemons prove membership by sending it with
//! every internal call; one that does not is refused and logged.

use std::path::Path;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// The metadata key the secret travels in.
const KEY: &str = "x-bigtable-cluster-secret";

/// Bytes below which a secret is refused as guessable.
pub const MIN_SECRET_BYTES: usize = 16;

/// A secret read from a file.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
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
        Ok(Secret(text.to_string()))
    }

    /// Adds the secret to an outgoing call.
    pub(crate) fn attach<T>(&self, req: &mut Request<T>) {
        if let Ok(v) = MetadataValue::try_from(self.0.as_str()) {
            req.metadata_mut().insert(KEY, v);
        }
    }

    /// Refuses a call that does not carry this secret.
    pub(crate) fn check<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let given = req.metadata().get(KEY).map(|v| v.as_bytes()).unwrap_or(b"");
        if constant_time_eq(given, self.0.as_bytes()) {
            return Ok(());
        }
        let peer = req
            .remote_addr()
            .map_or_else(|| "an unknown peer".to_string(), |a| a.to_string());
        log::warn!("refused an internal call from {peer}: wrong or missing cluster secret");
        Err(Status::unauthenticated("wrong or missing cluster secret"))
    }
}

/// Equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
    fn only_the_same_secret_passes() {
        let s = Secret::new("0123456789abcdef").unwrap();
        let mut ok = Request::new(());
        s.attach(&mut ok);
        assert!(s.check(&ok).is_ok());
        let mut wrong = Request::new(());
        Secret::new("0123456789abcdeX").unwrap().attach(&mut wrong);
        assert_eq!(
            s.check(&wrong).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(s.check(&Request::new(())).is_err());
    }
}
