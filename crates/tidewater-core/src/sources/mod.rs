//! Built-in sources.

pub mod generator;
