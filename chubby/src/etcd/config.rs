//! Settings of a cell on etcd, and the `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]`
//! address they are read from.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

use crate::error::{Error, Result};

/// Where the cell is and how the daemon keeps its session.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// `HOST:PORT` of each member.
    pub endpoints: Vec<String>,
    /// Key prefix of the cell: two prefixes on one etcd are two cells.
    pub prefix: String,
    /// CA certificate (PEM): connect with TLS.
    pub ca: Option<PathBuf>,
    /// Client certificate and key (PEM) for a cluster that asks for one.
    pub cert_key: Option<(PathBuf, PathBuf)>,
    /// A file holding `user:password`.
    pub user_file: Option<PathBuf>,
    /// The session's lease: how long the daemon keeps its locks without
    /// reaching etcd.
    pub lease_ttl: Duration,
    /// Longest an operation waits for etcd before failing (EIO).
    pub op_timeout: Duration,
    /// Lock-delay given to new nodes that do not ask for one.
    pub default_lock_delay: Duration,
    /// Upper bound for any node's lock-delay.
    pub max_lock_delay: Duration,
    /// Attributes of the root directory when the prefix is new.
    pub root_mode: u32,
    /// Owner of a new root.
    pub root_uid: u32,
    /// Group of a new root.
    pub root_gid: u32,
}

impl EtcdOptions {
    /// Reads `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` (prefix `/bigtable-fs`
    /// if none is given).
    pub fn from_url(url: &str) -> Result<EtcdOptions> {
        let rest = url.strip_prefix("etcd://").ok_or_else(|| {
            Error::invalid(format!("{url:?}: expected etcd://HOST:PORT[/PREFIX]"))
        })?;
        let (hosts, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let endpoints: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect();
        if endpoints.is_empty() || endpoints.iter().any(|h| !h.contains(':')) {
            return Err(Error::invalid(format!(
                "{url:?}: expected HOST:PORT endpoints"
            )));
        }
        let prefix = if prefix.is_empty() {
            "/bigtable-fs".to_string()
        } else {
            prefix
        };
        Ok(EtcdOptions {
            endpoints,
            prefix,
            ca: None,
            cert_key: None,
            user_file: None,
            lease_ttl: Duration::from_secs(10),
            op_timeout: Duration::from_secs(5),
            default_lock_delay: Duration::from_secs(5),
            max_lock_delay: Duration::from_secs(60),
            root_mode: 0o755,
            root_uid: 0,
            root_gid: 0,
        })
    }

    /// The endpoints as URLs (https with a CA).
    pub(super) fn urls(&self) -> Vec<String> {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect()
    }

    pub(super) fn connect_options(&self) -> Result<ConnectOptions> {
        let read =
            |p: &PathBuf| std::fs::read(p).map_err(|e| Error::io(p.display().to_string(), e));
        let mut o = ConnectOptions::new()
            .with_connect_timeout(self.op_timeout)
            .with_timeout(self.op_timeout)
            .with_keep_alive(Duration::from_secs(2), self.op_timeout);
        if let Some(ca) = &self.ca {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)?));
            if let Some((cert, key)) = &self.cert_key {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            o = o.with_tls(tls);
        }
        if let Some(f) = &self.user_file {
            let text = String::from_utf8(read(f)?)
                .map_err(|_| Error::invalid(format!("{}: not text", f.display())))?;
            let (user, pass) = text
                .trim_end_matches(['\n', '\r'])
                .split_once(':')
                .ok_or_else(|| {
                    Error::invalid(format!("{}: expected user:password", f.display()))
                })?;
            o = o.with_user(user, pass);
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses() {
        let o = EtcdOptions::from_url("etcd://a:1,b:2/cells/one/").unwrap();
        assert_eq!(o.endpoints, vec!["a:1", "b:2"]);
        assert_eq!(o.prefix, "/cells/one");
        assert_eq!(o.urls(), vec!["http://a:1", "http://b:2"]);
        let d = EtcdOptions::from_url("etcd://h:2379").unwrap();
        assert_eq!(d.prefix, "/bigtable-fs");
        for bad in ["http://h:1", "etcd://", "etcd://host/p"] {
            assert!(EtcdOptions::from_url(bad).is_err(), "{bad}");
        }
    }
}
