//! What a request is doing, as its error messages name it ("mkdir t/r"):
//! formatted only when a message is logged, not for every request.

use crate::node::Node;
use std::fmt;

/// `op parent/name`, or `op node` without a name.
pub(crate) struct Doing<'a> {
    op: &'static str,
    at: &'a Node,
    name: Option<&'a [u8]>,
}

impl<'a> Doing<'a> {
    /// `op` of the entry `name` in the directory `parent`.
    pub(crate) fn entry(op: &'static str, parent: &'a Node, name: &'a [u8]) -> Doing<'a> {
        Doing {
            op,
            at: parent,
            name: Some(name),
        }
    }

    /// `op` of `node` itself.
    pub(crate) fn node(op: &'static str, node: &'a Node) -> Doing<'a> {
        Doing {
            op,
            at: node,
            name: None,
        }
    }
}

impl fmt::Display for Doing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(n) => write!(f, "{} {}/{}", self.op, self.at, String::from_utf8_lossy(n)),
            None => write!(f, "{} {}", self.op, self.at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_the_old_messages() {
        let t = Node::Table(crate::node::Name::from("t"));
        assert_eq!(
            Doing::entry("mkdir", &t, b"r").to_string(),
            format!("mkdir {t}/r")
        );
        assert_eq!(Doing::node("commit", &t).to_string(), format!("commit {t}"));
    }
}
