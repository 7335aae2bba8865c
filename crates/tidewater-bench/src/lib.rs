//! The benchmarks' library part: [`fused`], the hand-written loop that does
//! the backfill example's work with no framework, the limit the benchmarks
//! measure tidewater against (`backfill --engine fused`).

pub mod fused;
