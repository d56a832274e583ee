//! Weka trace parsing, the content-addressed mmap cache, zero-copy views and prompt synthesis.

pub mod tokens;
