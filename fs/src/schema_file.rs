//! The `.schema` file: the engine's schema text with user and group names
//! resolved through the system's user database.

use engine::schema::{self, FamilySchema, NameResolver, TableSchema};
use nix::unistd::{Gid, Group, Uid, User};

/// Resolves names with getpwnam/getgrnam (and numbers as themselves).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemNames;

impl NameResolver for SystemNames {
    fn uid(&self, name: &str) -> Option<u32> {
        if let Ok(n) = name.parse() {
            return Some(n);
        }
        User::from_name(name).ok().flatten().map(|u| u.uid.as_raw())
    }
    fn gid(&self, name: &str) -> Option<u32> {
        if let Ok(n) = name.parse() {
            return Some(n);
        }
        Group::from_name(name)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    }
    fn user_name(&self, uid: u32) -> Option<String> {
        User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name)
    }
    fn group_name(&self, gid: u32) -> Option<String> {
        Group::from_gid(Gid::from_raw(gid))
            .ok()
            .flatten()
            .map(|g| g.name)
    }
}

/// The text of `.schema`.
pub fn render(s: &TableSchema) -> Vec<u8> {
    schema::format(s, &SystemNames).into_bytes()
}

/// Applies written text to the current schema: `replace_all` when the whole
/// file was written, merge when lines were appended. Returns the new schema
/// and the families it drops. Nothing is changed on error.
pub fn apply(
    current: &TableSchema,
    text: &[u8],
    replace_all: bool,
) -> engine::Result<(TableSchema, Vec<String>)> {
    let text = std::str::from_utf8(text).map_err(|e| {
        let line = text[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        engine::Error::BadSchema {
            line,
            reason: "not UTF-8 text".into(),
        }
    })?;
    current.apply_text(text, &SystemNames, replace_all)
}

/// Whether `new` changes the owner, group or mode of a family that `old` has.
pub fn changes_permissions(old: &TableSchema, new: &TableSchema) -> bool {
    new.families.values().any(|f| {
        old.families
            .get(&f.name)
            .is_some_and(|o| (o.owner, o.group, o.mode) != (f.owner, f.group, f.mode))
    })
}

/// The families of `old` that `new` drops or whose settings it changes
/// (a non-owner needs write permission on each of them).
pub fn changed_families<'a>(old: &'a TableSchema, new: &TableSchema) -> Vec<&'a FamilySchema> {
    old.families
        .values()
        .filter(|o| new.families.get(&o.name) != Some(*o))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::schema::FamilySchema;

    #[test]
    fn root_resolves_both_ways() {
        assert_eq!(SystemNames.uid("root"), Some(0));
        assert_eq!(SystemNames.uid("4242"), Some(4242));
        assert_eq!(SystemNames.user_name(0).as_deref(), Some("root"));
        assert_eq!(SystemNames.gid("no-such-group-xyz"), None);
    }

    #[test]
    fn append_merges_and_whole_file_replaces() {
        let cur = TableSchema::with_families([FamilySchema::new("a"), FamilySchema::new("b")]);
        let (merged, dropped) = apply(&cur, b"c max_versions=2\n", false).unwrap();
        assert_eq!(merged.families.len(), 3);
        assert!(dropped.is_empty());
        assert_eq!(merged.families["c"].gc.max_versions(), Some(2));
        let (replaced, dropped) = apply(&cur, b"a\n", true).unwrap();
        assert_eq!(replaced.families.len(), 1);
        assert_eq!(dropped, vec!["b".to_string()]);
        assert!(matches!(
            apply(&cur, b"a\nb bogus=1\n", true),
            Err(engine::Error::BadSchema { line: 2, .. })
        ));
        assert!(matches!(
            apply(&cur, b"a\n\xff\n", true),
            Err(engine::Error::BadSchema { line: 2, .. })
        ));
    }

    #[test]
    fn render_round_trips_and_detects_permission_changes() {
        let cur = TableSchema::with_families([FamilySchema::new("a")]);
        let text = render(&cur);
        let (again, _) = apply(&cur, &text, true).unwrap();
        assert_eq!(again, cur);
        let (chmod, _) = apply(&cur, b"a mode=0700\n", false).unwrap();
        assert!(changes_permissions(&cur, &chmod));
        assert!(!changes_permissions(&cur, &again));
    }
}
