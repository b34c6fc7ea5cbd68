//! UNIMPLEMENTED replies that say what is not served. A method this server
//! does not have (a Table Admin method beyond the subset, or a whole
//! service such as google.longrunning.Operations) is answered by tonic with an empty
//! message; the calls' layer (`timing.rs`) names the method and what is
//! served instead.

use http::header::HeaderValue;

/// What this server serves, for the message.
const SERVED: &str = "this server serves the Data API's ReadRows, SampleRowKeys, \
    MutateRow, MutateRows, CheckAndMutateRow, PingAndWarm, ReadModifyWriteRow, \
    GenerateInitialChangeStreamPartitions and ReadChangeStream; the Table Admin API's \
    CreateTable, ListTables, GetTable, DeleteTable, ModifyColumnFamilies, DropRowRange, \
    UpdateTable, UndeleteTable, GenerateConsistencyToken, CheckConsistency, CreateBackup, \
    GetBackup, ListBackups, UpdateBackup, DeleteBackup, RestoreTable and CopyBackup; and \
    the Instance Admin API's instance, cluster and app profile calls and \
    TestIamPermissions (no authorized, logical or materialized views, hot tablets, \
    snapshots, SQL, or google.longrunning.Operations: every operation is returned done)";

/// Gives a trailers-only UNIMPLEMENTED reply without a message one.
pub(crate) fn name(path: &str, headers: &mut http::HeaderMap) {
    let unimplemented = headers
        .get("grpc-status")
        .is_some_and(|s| s.as_bytes() == b"12");
    if !unimplemented || headers.contains_key("grpc-message") {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(&message(path)) {
        headers.insert("grpc-message", v);
    }
}

/// `google.bigtable.admin.v2.BigtableInstanceAdmin/CreateInstance is not
/// served: ...`. The path is shown with only the characters a method name
/// has (a header value is printable ASCII, and `%` would start an escape).
pub(crate) fn message(path: &str) -> String {
    let method: String = path
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-') {
                c
            } else {
                '?'
            }
        })
        .collect();
    format!("method {method} is not implemented: {SERVED}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_method_once() {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("12"));
        name("/google.bigtable.v2.Bigtable/ExecuteQuery", &mut h);
        let m = h["grpc-message"].to_str().unwrap();
        assert!(
            m.starts_with("method google.bigtable.v2.Bigtable/ExecuteQuery is not implemented: ")
        );
        // A message already given, or another status, is left alone.
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("12"));
        h.insert("grpc-message", HeaderValue::from_static("mine"));
        name("/x/y", &mut h);
        assert_eq!(h["grpc-message"], "mine");
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("5"));
        name("/x/y", &mut h);
        assert!(!h.contains_key("grpc-message"));
        assert!(message("/a%20b\n/c").starts_with("method a?20b?/c is"));
    }
}
