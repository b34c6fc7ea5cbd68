//! End-to-end test support: see tests/*.rs.
