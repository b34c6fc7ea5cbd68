//! The API's view of a table, as the Table Admin calls return it.

use crate::admin_v2 as a;
use crate::wire::OrderedTable;
use crate::{gc, value_type};
use engine::schema::TableSchema;

/// The table's name and (unless NAME_ONLY) its families, in the order
/// they were made, and deletion protection.
pub(crate) fn table_message(name: String, schema: Option<&TableSchema>) -> OrderedTable {
    let mut t = a::Table {
        name,
        granularity: a::table::TimestampGranularity::Millis as i32,
        ..Default::default()
    };
    let mut order = Vec::new();
    if let Some(s) = schema {
        t.deletion_protection = s.deletion_protection;
        t.change_stream_config = crate::change_config::to_api(s.change_retention);
        for fs in s.ordered() {
            order.push(fs.name.clone());
            t.column_families.insert(
                fs.name.clone(),
                a::ColumnFamily {
                    gc_rule: gc::to_api(&fs.gc),
                    value_type: value_type::to_api(fs.aggregate),
                },
            );
        }
    }
    OrderedTable { table: t, order }
}
