//! Who the daemon's network ports let in: the bearer tokens of
//! `grpc_tokens=FILE` (for the gRPC API and the console) and, with
//! `grpc_trust_loopback`, the daemon's own user for callers on loopback.

use crate::mountopts::MountConfig;
use engine::access::{Identity, Tokens};
use std::ffi::CString;

/// The daemon's own user, with its supplementary groups.
pub fn daemon_identity() -> Identity {
    Identity {
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        groups: nix::unistd::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default(),
    }
}

/// A user name as the system's passwd and group databases resolve it.
pub fn resolve_user(name: &str) -> Option<Identity> {
    let user = nix::unistd::User::from_name(name).ok()??;
    let cname = CString::new(name).ok()?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid)
        .map(|g| {
            g.into_iter()
                .map(|g| g.as_raw())
                .filter(|&g| g != user.gid.as_raw())
                .collect()
        })
        .unwrap_or_default();
    Some(Identity {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
    })
}

/// The tokens file, read and checked (empty when none is given).
pub fn tokens(cfg: &MountConfig) -> Result<Tokens, String> {
    match &cfg.grpc_tokens {
        Some(path) => Tokens::load(path, nix::unistd::geteuid().as_raw(), resolve_user)
            .map_err(|e| format!("grpc_tokens: {e}")),
        None => Ok(Tokens::default()),
    }
}

/// How the gRPC API identifies callers.
pub fn grpc_auth(cfg: &MountConfig, tokens: &Tokens) -> grpc::Auth {
    grpc::Auth {
        tokens: tokens.clone(),
        loopback: cfg.grpc_trust_loopback.then(daemon_identity),
    }
}
