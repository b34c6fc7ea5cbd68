//! The table's change log as the schema sees it: `change_retention` (how
//! long changes are kept; 0 = no log), and the hidden family and locality
//! group that hold the log's records inside each tablet (docs/changes.md).
//! Their names start with '.', which no user family or group may, so a
//! user can neither write nor read them through the families they name.

use super::{FamilySchema, GcRule, LocalityGroup, TableSchema};
use crate::error::{Error, Result};
use std::borrow::Cow;

/// The hidden family of change records.
pub const CHANGES_FAMILY: &str = ".changes";
/// The hidden locality group holding only [`CHANGES_FAMILY`], so reading
/// changes reads no data and reading data reads no changes.
pub const CHANGES_GROUP: &str = ".changes";
/// The longest retention (Cloud Bigtable's limit): 7 days in microseconds.
pub const MAX_CHANGE_RETENTION: u64 = 7 * 86_400_000_000;

impl TableSchema {
    /// Whether the table keeps a change log.
    pub fn logs_changes(&self) -> bool {
        self.change_retention > 0
    }

    pub(super) fn check_change_retention(&self) -> Result<()> {
        if self.change_retention > MAX_CHANGE_RETENTION {
            return Err(Error::invalid(format!(
                "change_retention {} is above the limit of 7d",
                crate::duration::duration_str(self.change_retention)
            )));
        }
        Ok(())
    }

    /// The hidden change family's settings: collected by age alone, after
    /// the retention.
    fn changes_family(&self) -> Option<FamilySchema> {
        if !self.logs_changes() {
            return None;
        }
        let mut f = FamilySchema::new(CHANGES_FAMILY);
        f.locality_group = CHANGES_GROUP.to_string();
        f.gc = GcRule::MaxAge(self.change_retention);
        Some(f)
    }

    /// The family whose stored entries are named `name`: a schema family, or
    /// the hidden change family while the table logs changes. For the
    /// storage layers (compaction, the change reader); what users name goes
    /// through [`TableSchema::family`].
    pub fn stored_family(&self, name: &str) -> Option<Cow<'_, FamilySchema>> {
        if name == CHANGES_FAMILY {
            return self.changes_family().map(Cow::Owned);
        }
        self.family(name).map(Cow::Borrowed)
    }

    /// The hidden change group, while the table logs changes.
    pub(super) fn changes_group(&self) -> Option<LocalityGroup> {
        self.changes_family().map(|f| LocalityGroup {
            families: vec![f.name.clone()],
            ..LocalityGroup::named(CHANGES_GROUP)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hidden_family_exists_only_while_logging() {
        let mut s = TableSchema::with_families([FamilySchema::new("a")]);
        assert!(s.stored_family(CHANGES_FAMILY).is_none());
        assert_eq!(s.locality_groups().len(), 1);
        s.change_retention = 60_000_000;
        let f = s.stored_family(CHANGES_FAMILY).unwrap();
        assert_eq!(f.gc, GcRule::MaxAge(60_000_000));
        assert!(s.family(CHANGES_FAMILY).is_none());
        let groups = s.locality_groups();
        assert_eq!(groups.last().unwrap().name, CHANGES_GROUP);
        assert!(s.validate().is_ok());
        s.change_retention = MAX_CHANGE_RETENTION + 1;
        assert!(s.validate().is_err());
    }
}
