//! LocalStore (to be written).
/// A FileStore over one local directory.
pub struct LocalStore;
