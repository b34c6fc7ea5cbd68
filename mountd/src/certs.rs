//! A small certificate authority for a cluster's mutual TLS (`bigtable-bench
//! certs DIR --names a,b,c`): the CA, and for each daemon a certificate
//! naming it (its host name or IP, which other daemons dial) that serves as
//! both its server and its client certificate. Keys are written 0600. The
//! CA is made once and reused: run it again with new names to add daemons.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Errors making certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("a daemon's name must not be empty or contain '/'")]
    BadName,
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), CertError> {
    let io = |e| CertError::Io(path.to_path_buf(), e);
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)
}

/// The CA in `dir` (made if missing): its certificate and key.
fn authority(dir: &Path) -> Result<(rcgen::Certificate, KeyPair), CertError> {
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "bigtable cluster CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    if let Ok(key_pem) = std::fs::read_to_string(&key_path) {
        // Reuse the CA: new certificates are signed with its key under its
        // name, so ca.pem (kept as it is) verifies them as it does the
        // certificates made before.
        let key = KeyPair::from_pem(&key_pem)?;
        let cert = params.self_signed(&key)?;
        if !cert_path.exists() {
            write(&cert_path, &cert.pem(), 0o644)?;
        }
        return Ok((cert, key));
    }
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    write(&key_path, &key.serialize_pem(), 0o600)?;
    write(&cert_path, &cert.pem(), 0o644)?;
    Ok((cert, key))
}

/// Makes `dir`/ca.pem (and ca-key.pem) unless there, and for each name
/// `dir`/NAME.pem and NAME-key.pem, valid for the name and `extra` (host
/// names or IPs every certificate also names, e.g. 127.0.0.1). Returns
/// the files written.
pub fn make(dir: &Path, names: &[String], extra: &[String]) -> Result<Vec<PathBuf>, CertError> {
    std::fs::create_dir_all(dir).map_err(|e| CertError::Io(dir.to_path_buf(), e))?;
    let (ca, ca_key) = authority(dir)?;
    let mut out = vec![dir.join("ca.pem")];
    for name in names {
        if name.is_empty() || name.contains('/') {
            return Err(CertError::BadName);
        }
        let mut sans = vec![name.clone()];
        sans.extend(extra.iter().filter(|e| *e != name).cloned());
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        write(&c, &cert.pem(), 0o644)?;
        write(&k, &key.serialize_pem(), 0o600)?;
        out.extend([c, k]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_ca_and_daemon_certificates_with_private_keys() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["node1".to_string(), "10.0.0.2".to_string()];
        let files = make(dir.path(), &names, &["127.0.0.1".into()]).unwrap();
        assert_eq!(files.len(), 5);
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("ca-key.pem"), 0o600);
        assert_eq!(mode("node1-key.pem"), 0o600);
        assert_eq!(mode("node1.pem"), 0o644);
        let ca = std::fs::read_to_string(dir.path().join("ca.pem")).unwrap();
        // Again, with another name: the same CA.
        make(dir.path(), &["node3".to_string()], &[]).unwrap();
        let key = std::fs::read_to_string(dir.path().join("ca-key.pem")).unwrap();
        assert!(key.contains("PRIVATE KEY"));
        let again = std::fs::read_to_string(dir.path().join("ca.pem")).unwrap();
        assert_eq!(ca, again);
    }
}
