//! merge (to be written)
