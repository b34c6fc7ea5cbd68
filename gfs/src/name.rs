//! File names of the store: slash-separated, relative, no tricks.
//!
//! A name is joined onto the data directory, so anything that could escape it
//! or alias another name ("..", ".", empty components, absolute paths) is
//! refused up front rather than trusted to the OS.

use crate::{Error, Result};

/// Longest component most Linux filesystems accept (NAME_MAX).
const MAX_COMPONENT: usize = 255;

/// Checks that `name` is a valid relative file name.
pub(crate) fn validate(name: &str) -> Result<()> {
    let bad = |why| Err(Error::InvalidName(name.to_string(), why));
    if name.is_empty() {
        return bad("empty name");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name.starts_with('/') {
        return bad("absolute name");
    }
    for part in name.split('/') {
        match part {
            "" => return bad("empty path component"),
            "." => return bad("'.' component"),
            ".." => return bad("'..' component"),
            p if p.len() > MAX_COMPONENT => return bad("component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_nested_names() {
        for ok in ["a", "log/000001.log", "x/y/z.sst", ".hidden", "a..b", "a b"] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_escapes_and_empty_parts() {
        let long = "x".repeat(256);
        for bad in [
            "", "/abs", "a//b", "a/", "/", ".", "..", "a/../b", "./a", "a/.", "nul\0", &long,
        ] {
            assert!(
                matches!(validate(bad), Err(Error::InvalidName(..))),
                "{bad:?}"
            );
        }
    }
}
