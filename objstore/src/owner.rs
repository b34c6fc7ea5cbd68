//! One owner per prefix. A daemon that opens a prefix takes it over: it
//! raises the epoch in `OWNER` by compare-and-swap, then seals every log by
//! creating the next segment name empty. A daemon that still writes there
//! finds its next segment name taken, is fenced, and acknowledges nothing
//! more; it also learns it from `OWNER` within a few seconds and stops every
//! write. Taking over rather than refusing is what lets a daemon restart
//! after a crash or a reboot without a hand clearing a stale claim, and it
//! is safe because a fenced writer can no longer add to any log the new
//! owner recovers from.

use crate::client::Client;
use crate::keys::Keys;
use bytes::Bytes;
use object_store::PutMode;

/// Who owns the prefix now: our epoch.
#[derive(Clone, Debug)]
pub(crate) struct Claim {
    pub(crate) epoch: u64,
    /// The owner we fenced, as its `OWNER` object described it.
    pub(crate) previous: Option<String>,
}

fn describe(epoch: u64) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "epoch={epoch} host={} pid={} since={since}\n",
        host.trim(),
        std::process::id()
    )
}

/// The epoch an `OWNER` object names.
pub(crate) fn epoch_of(text: &str) -> Option<u64> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("epoch="))
        .and_then(|e| e.parse().ok())
}

/// Takes the prefix: a new epoch above any before it, written by
/// compare-and-swap so that of two daemons starting at once, one wins each
/// round and the other goes on to the next epoch.
pub(crate) fn claim(c: &Client, keys: &Keys) -> Result<Claim, object_store::Error> {
    let key = keys.owner();
    loop {
        let (epoch, mode, previous) = match c.get(&key, None) {
            Ok(body) => {
                let text = String::from_utf8_lossy(&body).into_owned();
                let etag = c.head(&key)?.e_tag;
                let e = epoch_of(&text).unwrap_or(0);
                (e + 1, Client::update(etag), Some(text.trim().to_string()))
            }
            Err(object_store::Error::NotFound { .. }) => (1, PutMode::Create, None),
            Err(e) => return Err(e),
        };
        match c.put(&key, Bytes::from(describe(epoch)), mode) {
            Ok(_) => return Ok(Claim { epoch, previous }),
            // Another daemon moved first: read again and go above it.
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Seals every log whose name starts with `prefix` (all of them for ""):
/// an empty segment after its last, so a fenced writer's next append
/// fails. Returns how many logs were sealed.
pub(crate) fn seal_logs(
    c: &Client,
    keys: &Keys,
    prefix: &str,
) -> Result<usize, object_store::Error> {
    let mut sealed = 0;
    let mut last: std::collections::BTreeMap<String, u64> = Default::default();
    for m in c.list(&keys.logs_dir_for(prefix))? {
        if let Some((name, seq)) = keys.segment_of(m.location.as_ref()) {
            if !name.starts_with(prefix) {
                continue;
            }
            let e = last.entry(name.to_string()).or_insert(seq);
            *e = (*e).max(seq);
        }
    }
    for (name, mut seq) in last {
        loop {
            seq += 1;
            match c.put(&keys.segment(&name, seq), Bytes::new(), PutMode::Create) {
                Ok(_) => break,
                // The old writer got there first: that append stands, and
                // the seal goes after it.
                Err(object_store::Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        sealed += 1;
    }
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_epoch() {
        assert_eq!(epoch_of("epoch=41 host=a pid=3 since=9"), Some(41));
        assert_eq!(epoch_of("garbage"), None);
        assert_eq!(epoch_of(&describe(7)), Some(7));
    }
}
