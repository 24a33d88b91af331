//! ttmesh-benches: the benchmarks `ttmesh bench` runs, each printing its figures side by side
//! with its goal; nothing here asserts on speed. They use only the library crates' public API,
//! so the libraries carry no code that exists just to be measured.
//!
//! Owns: workloads, timing and the printed tables. Must not touch: any library's internals.

#![forbid(unsafe_code)]

pub mod ccl;
pub mod chip;
pub mod decode;
pub mod fabric;
pub mod monitor;
pub mod profile;
pub mod replay;
pub mod ring_floor;
