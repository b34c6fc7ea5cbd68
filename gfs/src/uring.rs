//! io_uring (to be written)
