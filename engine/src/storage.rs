//! How a locality group's SSTables are stored: block compression and what
//! their Bloom filters answer. A leaf: the schema, the data model and the
//! SSTable layer all name these, and it names none of them.

/// Per-block compression of a locality group's SSTables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Blocks are stored as they are.
    None,
    /// Blocks are lz4-compressed.
    #[default]
    Lz4,
}

/// What a locality group's Bloom filters answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BloomKind {
    /// No filter.
    None,
    /// "Might this row be here?"
    Row,
    /// "Might this row be here?" and "might this row/column be here?"
    #[default]
    RowColumn,
}
