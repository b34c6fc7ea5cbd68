//! memtable (to be written)
