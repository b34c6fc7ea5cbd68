//! Who calls, and what they may do: a caller names an identity with a
//! bearer token (`authorization: Bearer TOKEN`, what Cloud Bigtable's
//! clients send) from the daemon's tokens file, or, when the daemon is told
//! to trust loopback, is the daemon's own user if it calls from a loopback
//! address without one. Its rights are the mount's: the owner, group and
//! mode of each table and family (`engine::access`).

use engine::access::{bearer, Identity, Tokens, R, W};
use engine::schema::{FamilySchema, TableSchema};
use engine::{Mutation, RowFilter};
use tonic::{Request, Status};

/// How callers are identified.
#[derive(Debug, Default, Clone)]
pub struct Auth {
    /// Bearer tokens and the identity each names.
    pub tokens: Tokens,
    /// The identity of a caller from a loopback address that gives no
    /// token (`grpc_trust_loopback`: the daemon's user); None: such a
    /// caller is refused.
    pub loopback: Option<Identity>,
}

impl Auth {
    /// The caller of `req`: UNAUTHENTICATED unless it gives a known token,
    /// or gives none from loopback when loopback is trusted.
    pub fn identify<T>(&self, req: &Request<T>) -> Result<Identity, Status> {
        match req.metadata().get("authorization") {
            Some(v) => {
                let token = bearer(v.as_bytes()).ok_or_else(|| {
                    unauthenticated("the authorization header is not `Bearer TOKEN`")
                })?;
                self.tokens
                    .lookup(token)
                    .cloned()
                    .ok_or_else(|| unauthenticated("unknown bearer token"))
            }
            None => {
                let local = req
                    .remote_addr()
                    .is_some_and(|a| a.ip().to_canonical().is_loopback());
                match &self.loopback {
                    Some(id) if local => Ok(id.clone()),
                    _ => Err(unauthenticated(
                        "no credentials: send `authorization: Bearer TOKEN` (a token of the daemon's grpc_tokens file)",
                    )),
                }
            }
        }
    }
}

fn unauthenticated(why: &str) -> Status {
    telemetry::refused("grpc", "unauthenticated");
    Status::unauthenticated(why)
}

/// A refusal of what `who` may not do, logged and counted.
pub fn denied(who: &Identity, what: &str) -> Status {
    telemetry::refused("grpc", "permission");
    log::info!("grpc: uid {} refused: {what}", who.uid);
    Status::permission_denied(format!("permission denied: {what}"))
}

/// Refuses unless `who` has `want` on the table.
pub fn table(who: &Identity, name: &str, t: &TableSchema, want: u32) -> Result<(), Status> {
    if who.on_table(t, want) {
        return Ok(());
    }
    Err(denied(who, &format!("{} table {name}", verb(want))))
}

/// Refuses unless `who` has `want` on the family.
pub fn family(who: &Identity, f: &FamilySchema, want: u32) -> Result<(), Status> {
    if who.on_family(f, want) {
        return Ok(());
    }
    Err(denied(
        who,
        &format!("{} column family {}", verb(want), f.name),
    ))
}

/// Refuses unless `who` may write every family of the table (what deleting
/// rows whole takes: each family's cells go).
pub fn every_family(who: &Identity, t: &TableSchema, want: u32) -> Result<(), Status> {
    t.families.values().try_for_each(|f| family(who, f, want))
}

fn verb(want: u32) -> &'static str {
    match (want & R != 0, want & W != 0) {
        (true, true) => "read and write",
        (false, true) => "write",
        _ => "read",
    }
}

/// Refuses mutations of a family `who` may not write; a row deletion
/// writes every family. A family not in the schema is left to the engine
/// (it answers NOT_FOUND).
pub fn mutations(who: &Identity, t: &TableSchema, ms: &[Mutation]) -> Result<(), Status> {
    for m in ms {
        let fam = match m {
            Mutation::SetCell { family, .. }
            | Mutation::DeleteCells { family, .. }
            | Mutation::DeleteFamily { family }
            | Mutation::AddToCell { family, .. } => family,
            Mutation::DeleteRow => {
                every_family(who, t, W)?;
                continue;
            }
        };
        if let Some(f) = t.families.get(fam) {
            family(who, f, W)?;
        }
    }
    Ok(())
}

/// The families `who` may read when it may not read them all (None: all).
pub fn readable(who: &Identity, t: &TableSchema) -> Option<Vec<String>> {
    let r = who.readable_families(t);
    (r.len() != t.families.len()).then_some(r)
}

/// `filter` evaluated over the families in `readable` only, so that a
/// condition cannot tell anything of the others.
pub fn over(readable: &[String], filter: RowFilter) -> RowFilter {
    let only = if readable.is_empty() {
        RowFilter::BlockAll
    } else {
        let names: Vec<String> = readable.iter().map(|f| regex::escape(f)).collect();
        RowFilter::FamilyNameRegex(format!("(?:{})", names.join("|")))
    };
    RowFilter::Chain(vec![only, filter])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifies_by_token_or_loopback() {
        let tokens = Tokens::parse("0123456789abcdef 65534:65534", |_| None).unwrap();
        let mut auth = Auth {
            tokens,
            loopback: None,
        };
        let req = |token: Option<&str>| {
            let mut r = Request::new(());
            if let Some(t) = token {
                r.metadata_mut().insert("authorization", t.parse().unwrap());
            }
            r
        };
        assert_eq!(
            auth.identify(&req(Some("Bearer 0123456789abcdef")))
                .unwrap()
                .uid,
            65534
        );
        for bad in [Some("Bearer 0123456789abcdeX"), Some("Basic x"), None] {
            assert_eq!(
                auth.identify(&req(bad)).unwrap_err().code(),
                tonic::Code::Unauthenticated
            );
        }
        // Without a connection there is no loopback address either.
        auth.loopback = Some(Identity::new(0, 0));
        assert!(auth.identify(&req(None)).is_err());
    }

    #[test]
    fn mutations_need_each_family() {
        let mut t = TableSchema::with_families([FamilySchema::new("a"), FamilySchema::new("b")]);
        t.families.get_mut("b").unwrap().mode = 0o700;
        let nobody = Identity::new(65534, 65534);
        let set = |f: &str| Mutation::SetCell {
            family: f.into(),
            qualifier: vec![],
            timestamp: None,
            value: vec![],
        };
        // Families are 0755 by default: others may not write them either.
        assert!(mutations(&nobody, &t, &[set("a")]).is_err());
        t.families.get_mut("a").unwrap().mode = 0o777;
        assert!(mutations(&nobody, &t, &[set("a"), set("zz")]).is_ok());
        assert!(mutations(&nobody, &t, &[set("b")]).is_err());
        assert!(mutations(&nobody, &t, &[Mutation::DeleteRow]).is_err());
        assert_eq!(readable(&nobody, &t), Some(vec!["a".to_string()]));
        assert_eq!(readable(&Identity::new(0, 0), &t), None);
    }
}
