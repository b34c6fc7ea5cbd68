//! GenerateConsistencyToken and CheckConsistency. There is one cluster and
//! no replication, so a token is consistent as soon as every write
//! acknowledged before it is durable: the token is the commit clock at the
//! call (µs), and a check syncs every tablet server's commit log before it
//! answers true. The calls are served for real all the same (clients call
//! them after writes, and wait on them in tests): the table must exist and
//! be readable by the caller, and a token must be one this server made.

use crate::admin_v2 as a;
use crate::shared::{blocking, Shared};
use crate::wire::FullMaps;
use crate::{auth, status};
use engine::access::R;
use prost::bytes::BufMut;
use prost::Message;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// What starts every token (a version, should its form change).
const PREFIX: &str = "bt1-";
/// How far ahead of this server's clock a token may be (another daemon's
/// clock may run a little ahead).
const SKEW_US: u64 = 60_000_000;

impl FullMaps for a::GenerateConsistencyTokenResponse {
    fn encode_full(self, buf: &mut impl BufMut) {
        self.encode_raw(buf);
    }
}

impl FullMaps for a::CheckConsistencyResponse {
    fn encode_full(self, buf: &mut impl BufMut) {
        self.encode_raw(buf);
    }
}

/// The table `name` names, after checking that it exists and that `who`
/// may read it (NOT_FOUND, PERMISSION_DENIED).
async fn readable_table<T>(
    shared: &Arc<Shared>,
    req: &Request<T>,
    name: &str,
) -> Result<(), Status> {
    let who = shared.auth.identify(req)?;
    let id = shared.table(name)?;
    let sh = shared.clone();
    blocking(move || {
        let s = sh.bt.schema(&id).map_err(status::from_engine)?;
        auth::table(&who, &id, &s, R)
    })
    .await
}

pub(crate) async fn generate(
    shared: &Arc<Shared>,
    req: Request<a::GenerateConsistencyTokenRequest>,
) -> Result<Response<a::GenerateConsistencyTokenResponse>, Status> {
    readable_table(shared, &req, &req.get_ref().name).await?;
    Ok(Response::new(a::GenerateConsistencyTokenResponse {
        consistency_token: format!("{PREFIX}{}", engine::now_micros()),
    }))
}

pub(crate) async fn check(
    shared: &Arc<Shared>,
    req: Request<a::CheckConsistencyRequest>,
) -> Result<Response<a::CheckConsistencyResponse>, Status> {
    readable_table(shared, &req, &req.get_ref().name).await?;
    let at = parse(&req.get_ref().consistency_token)?;
    if at > engine::now_micros().saturating_add(SKEW_US) {
        return Err(Status::invalid_argument(
            "the consistency token is from the future: not one this server made",
        ));
    }
    // Every write acknowledged before the token reached a commit log;
    // syncing them makes it durable.
    let sh = shared.clone();
    blocking(move || sh.bt.sync().map_err(status::from_engine)).await?;
    Ok(Response::new(a::CheckConsistencyResponse {
        consistent: true,
    }))
}

/// A token's time, or INVALID_ARGUMENT.
fn parse(token: &str) -> Result<u64, Status> {
    token
        .strip_prefix(PREFIX)
        .filter(|d| !d.is_empty() && d.len() <= 20 && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| {
            Status::invalid_argument(
                "not a consistency token of this server (GenerateConsistencyToken makes them)",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_back_and_others_are_refused() {
        assert_eq!(parse("bt1-1764625000123456").unwrap(), 1764625000123456);
        for bad in [
            "",
            "bt1-",
            "bt1-x1",
            "1764625000123456",
            "bt1-99999999999999999999999",
            "bt1--1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
