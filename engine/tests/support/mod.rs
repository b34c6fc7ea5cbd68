//! What the engine's tests share: opening an S3 store on the test server.

use objstore::{Credentials, S3Config, S3Store};
use std::sync::Arc;
use std::time::Duration;

/// Opens an [`S3Store`] on `location` (`s3://BUCKET/PREFIX`) at `endpoint`
/// with these keys. Each call is a new daemon's store: it takes the prefix
/// over and seals its logs, fencing any store opened before it.
pub fn open_s3(endpoint: &str, location: &str, key: &str, secret: &str) -> Arc<dyn gfs::FileStore> {
    let mut c = S3Config::from_url(location).unwrap();
    c.endpoint = Some(endpoint.to_string());
    c.credentials = Some(Credentials {
        access_key_id: key.to_string(),
        secret_access_key: secret.to_string(),
        session_token: None,
    });
    c.timeout = Duration::from_secs(20);
    Arc::new(S3Store::open(c).unwrap())
}
