//! ttmesh-benches: the benchmarks `ttmesh bench` runs, each printing its figures side by side
//! with its goal; nothing here asserts on speed. They use only the library crates' public API,
//! so the libraries carry no code that exists just to be measured.
//!
//! Owns: workloads, timing and the printed tables. Must not touch: any library's internals.
//!
//! Comparing two builds on a small shared host: alternate their runs and take medians, and
//! pin single-threaded measurements to one CPU (`taskset -c 1`). On the 2-vCPU host these
//! were tuned on, CPU 0 ran memory-bound work about 1.5x slower than CPU 1 (untraced
//! dispatch 1253-1365 against 792-817 ns per op; replay of a 16 MB trace 42-46 against 31 ns
//! per record) while cache-resident work and plain arithmetic ran alike: the "bimodal"
//! figures of `bench trace` (c) (about 850 or 1480 ns) match which CPU the host thread ran on.

#![forbid(unsafe_code)]

pub mod ccl;
pub mod chip;
pub mod decode;
pub mod fabric;
pub mod fabric2d;
pub mod monitor;
pub mod predict;
pub mod profile;
pub mod ranks;
pub mod replay;
pub mod ring_floor;

/// The upper middle of `v` once sorted (the median of an odd count); NaN if empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
