//! Parsing and validation of slash-separated node paths ("/a/b"). Paths are
//! names in the cell's namespace, never local filesystem paths.

use crate::error::{Error, Result};

/// Longest name of one node, as on Linux filesystems.
pub(crate) const MAX_NAME_LEN: usize = 255;
/// Longest whole path (PATH_MAX).
pub(crate) const MAX_PATH_LEN: usize = 4096;

/// Checks one path component.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty name");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not names");
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::NameTooLong(name.to_string()));
    }
    Ok(())
}

/// Splits an absolute path into validated components; "/" gives none.
/// Repeated and trailing slashes are ignored, as in POSIX.
pub(crate) fn components(path: &str) -> Result<Vec<&str>> {
    if !path.starts_with('/') {
        return Err(Error::InvalidName {
            name: path.to_string(),
            reason: "path must start with '/'",
        });
    }
    if path.len() > MAX_PATH_LEN {
        return Err(Error::NameTooLong(path.to_string()));
    }
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    for c in &comps {
        check_name(c)?;
    }
    Ok(comps)
}

/// Splits a path into its parent's components and its last name; the root
/// has no parent and gives `InvalidArgument`.
pub(crate) fn split_last(path: &str) -> Result<(Vec<&str>, &str)> {
    let mut comps = components(path)?;
    match comps.pop() {
        Some(last) => Ok((comps, last)),
        None => Err(Error::invalid("the root has no parent")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        assert!(components("/").unwrap().is_empty());
        assert_eq!(components("/a//b/").unwrap(), vec!["a", "b"]);
        assert!(matches!(components("a/b"), Err(Error::InvalidName { .. })));
        assert!(matches!(
            components("/a/../b"),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            components("/a\0b"),
            Err(Error::InvalidName { .. })
        ));
        let long = format!("/{}", "x".repeat(256));
        assert!(matches!(components(&long), Err(Error::NameTooLong(_))));
        assert_eq!(split_last("/a/b").unwrap(), (vec!["a"], "b"));
        assert!(matches!(split_last("/"), Err(Error::InvalidArgument(_))));
    }
}
