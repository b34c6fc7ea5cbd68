//! sstable (to be written)
