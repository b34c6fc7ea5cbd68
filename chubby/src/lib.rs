//! chubby
