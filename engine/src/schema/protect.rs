//! Deletion protection: while a table has it, the table cannot be deleted
//! and none of its families dropped (Cloud Bigtable's `deletion_protection`).
//! The master checks it on every way in (mount, gRPC, other daemons).

use super::TableSchema;
use crate::error::{Error, Result};

impl TableSchema {
    /// Refuses deleting table `table` while it is protected.
    pub fn check_deletable(&self, table: &str) -> Result<()> {
        if self.deletion_protection {
            return Err(Error::DeletionProtected {
                table: table.to_string(),
                what: "deleting the table".into(),
            });
        }
        Ok(())
    }

    /// Refuses restoring table `table` in place from a snapshot while it is
    /// protected: a restore drops every cell written since (HBase's
    /// restore_snapshot needs the table disabled; a protected table is one
    /// its owner said must not lose data).
    pub fn check_restorable(&self, table: &str) -> Result<()> {
        if self.deletion_protection {
            return Err(Error::DeletionProtected {
                table: table.to_string(),
                what: "restoring it from a snapshot".into(),
            });
        }
        Ok(())
    }

    /// Refuses replacing this schema by `new` when that drops a family
    /// while the table is protected (now: turning protection off and
    /// dropping in one change is refused too).
    pub fn check_change(&self, table: &str, new: &TableSchema) -> Result<()> {
        if !self.deletion_protection {
            return Ok(());
        }
        match self
            .families
            .keys()
            .find(|f| !new.families.contains_key(*f))
        {
            Some(f) => Err(Error::DeletionProtected {
                table: table.to_string(),
                what: format!("dropping column family {f:?}"),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::FamilySchema;
    use super::*;

    #[test]
    fn protection_refuses_delete_and_drop_only() {
        let mut s = TableSchema::with_families([FamilySchema::new("a"), FamilySchema::new("b")]);
        let mut fewer = s.clone();
        fewer.families.remove("b");
        assert!(s.check_deletable("t").is_ok());
        assert!(s.check_change("t", &fewer).is_ok());
        s.deletion_protection = true;
        assert!(matches!(
            s.check_deletable("t"),
            Err(Error::DeletionProtected { .. })
        ));
        assert!(matches!(
            s.check_change("t", &fewer),
            Err(Error::DeletionProtected { .. })
        ));
        // Adding a family, or turning protection off alone, is allowed.
        let mut more = s.clone();
        more.families.insert("c".into(), FamilySchema::new("c"));
        more.deletion_protection = false;
        assert!(s.check_change("t", &more).is_ok());
    }
}
