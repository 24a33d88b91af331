//! ttmesh-stress: topology stress tests. Generates a seeded matrix of cases (topology, op, dims,
//! size, dtype, links, memory config, traced or not, fault schedule), runs each on a mesh
//! under a watchdog, checks every result against a host reference written here (plain index
//! arithmetic, independent of the device path), and reports in nccl-tests' columns. Also the
//! soak mode (one mesh trace replayed without end while the process's RSS, threads and open
//! descriptors are watched).
//!
//! Owns: case generation and its names, the host references of the stress checks, the
//! watchdog, the reports. Must not touch: collective algorithms (ccl's), routing and fault
//! mechanics (the fabric's), chip internals: it uses the `ttmesh` API, the fabric's public
//! fault injection and semaphore reads, and chips' public queue calls only.

#![forbid(unsafe_code)]

mod cases;
mod error;
mod exec;
pub mod reference;
mod report;
mod runner;
mod soak;
mod spec;

pub use cases::{generate, Case, FaultPlan, Step};
pub use error::StressError;
pub use exec::{CaseResult, Verdict};
pub use report::{junit_xml, render_report, summary, Summary};
pub use runner::{run_cases, RunOptions};
pub use soak::{process_stats, run_soak, ProcessStats, SoakOptions, SoakReport, SoakSample};
pub use spec::{parse_size, FaultKind, OpKind, StressSpec, TopologyChoice};
