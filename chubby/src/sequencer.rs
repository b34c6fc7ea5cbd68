//! Sequencers: a printable token naming a lock, its mode and its generation,
//! which a server can check to refuse requests from a stale lock holder.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::path;
use crate::types::LockMode;

/// `"/bigtable/master:exclusive:17"`: the lock's path, mode and generation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sequencer {
    /// The locked node's path.
    pub path: String,
    /// The mode the lock was held in.
    pub mode: LockMode,
    /// The node's lock generation at the grant; a later writer-mode grant makes it stale.
    pub generation: u64,
}

impl fmt::Display for Sequencer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.path, self.mode, self.generation)
    }
}

impl FromStr for Sequencer {
    type Err = Error;

    /// Parses from the right, so a path may itself contain ':'. Surrounding
    /// whitespace (a trailing newline from `echo`) is ignored.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::invalid(format!("not a sequencer: {s:?}"));
        let mut parts = s.trim().rsplitn(3, ':');
        let generation = parts.next().ok_or_else(bad)?;
        let mode = parts.next().ok_or_else(bad)?;
        let path = parts.next().ok_or_else(bad)?;
        let generation: u64 = generation.parse().map_err(|_| bad())?;
        let mode = match mode {
            "exclusive" => LockMode::Exclusive,
            "shared" => LockMode::Shared,
            _ => return Err(bad()),
        };
        path::components(path)?;
        Ok(Sequencer {
            path: path.to_string(),
            mode,
            generation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let s = Sequencer {
            path: "/bigtable/master".into(),
            mode: LockMode::Exclusive,
            generation: 17,
        };
        assert_eq!(s.to_string(), "/bigtable/master:exclusive:17");
        assert_eq!(
            "/bigtable/master:exclusive:17\n"
                .parse::<Sequencer>()
                .unwrap(),
            s
        );
        let colon: Sequencer = "/a:b:shared:3".parse().unwrap();
        assert_eq!(colon.path, "/a:b");
        assert_eq!(colon.mode, LockMode::Shared);
        assert_eq!(colon.generation, 3);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "x",
            "/a:exclusive",
            "/a:writer:1",
            "/a:shared:-1",
            "a:shared:1",
        ] {
            assert!(bad.parse::<Sequencer>().is_err(), "{bad:?} parsed");
        }
    }
}
