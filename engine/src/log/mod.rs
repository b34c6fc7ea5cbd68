//! commit log (to be written)
