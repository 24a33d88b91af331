//! Runs one case on an open mesh: inputs, the op (untraced, or captured and replayed), the
//! fault, every chip's queue result, the check against the host reference.
//!
//! Here: the result types, opening a case's mesh, and what collectives and sends share
//! (inputs, errors). Beside it: `probe` (what a running case is doing, for the watchdog),
//! `faults` (where a fault lands on the op's routes and what it must end with),
//! `collective` and `send` (the two kinds of case), `ranks` (what a case's ranks share when
//! its mesh is split over MPI ranks).

mod collective;
mod faults;
mod probe;
mod ranks;
mod send;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use ttmesh::{
    CqId, HostTensor, MemoryConfig, MeshConfig, MeshDevice, MeshError, MeshMapper, MeshShape,
    MeshTensor,
};
use ttmesh_chip::ChipError;

use crate::cases::{Case, FaultPlan};
use crate::reference;
use crate::spec::{OpKind, TopologyChoice};

use collective::run_collective;
pub use probe::Probe;
use send::run_send;

/// The semaphore a send's last packet raises on its destination (far above the collectives').
pub const SEND_SEMAPHORE: u32 = 0x5EED_0000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Right data (no fault, a fault off the path, a slow link, or a fault that missed).
    Passed,
    /// The fault's error, naming its link or chip, within the timeout.
    ExpectedError,
    Wrong,
    Hang,
    UnexpectedError,
    /// Not run: its mesh does not split over the MPI ranks (the detail says why).
    Skipped,
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub index: u64,
    pub case: String,
    pub topology: String,
    pub op: &'static str,
    pub dtype: &'static str,
    pub fault: String,
    pub verdict: Verdict,
    /// nccl-tests' size: bytes per chip (an all_gather's output, the others' input).
    pub size: u64,
    pub count: u64,
    /// Time of the op (launch to every chip idle; a traced case: its replay), microseconds.
    pub time_us: f64,
    pub chips: usize,
    pub wrong: u64,
    /// The error seen, or what was wrong or still waiting.
    pub detail: String,
    pub elapsed_ms: f64,
}

impl CaseResult {
    pub fn failed(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::Wrong | Verdict::Hang | Verdict::UnexpectedError
        )
    }
    pub fn new(case: &Case, verdict: Verdict, detail: String) -> CaseResult {
        let n = case.steps.iter().map(|s| s.chips).product::<usize>().max(1);
        let gathers = case.op == OpKind::AllGather;
        CaseResult {
            index: case.index,
            case: case.to_string(),
            topology: case.topology.name(),
            op: case.op.name(),
            dtype: crate::spec::dtype_name(case.dtype),
            fault: case.fault.to_string(),
            verdict,
            size: case.input_bytes() * if gathers { n as u64 } else { 1 },
            count: case.elements() * if gathers { n as u64 } else { 1 },
            time_us: 0.0,
            chips: if case.op == OpKind::Send { 2 } else { n },
            wrong: 0,
            detail,
            elapsed_ms: 0.0,
        }
    }
}

/// Opens the mesh a topology choice runs on, with its fabric config.
pub fn open_mesh(t: &TopologyChoice, timeout: Duration) -> Result<MeshDevice, MeshError> {
    let (name, (rows, cols), fabric_config) = t.mesh_key();
    MeshDevice::open(MeshConfig {
        topology: name,
        mesh_shape: (!t.own_shape()).then(|| MeshShape::new(rows, cols)),
        trace_region_size: 4 << 20,
        fabric_config,
        operation_timeout: Some(timeout),
        ..Default::default()
    })
}

/// Gives each chip its own host tensor.
struct PerChip(Vec<HostTensor>);

impl MeshMapper for PerChip {
    fn map(&self, _host: &HostTensor, _shape: MeshShape) -> ttmesh::Result<Vec<HostTensor>> {
        Ok(self.0.clone())
    }
}

/// Every error in a chain, joined: a fault's link may be named by a source.
pub use ttmesh::error_chain as chain;

fn memory_config(case: &Case) -> MemoryConfig {
    if case.l1 {
        MemoryConfig::L1
    } else {
        MemoryConfig::DRAM
    }
}

/// Every chip's input of round `round`, as host tensors and as the reference's values.
fn inputs(case: &Case, chips: usize, round: u64) -> (Vec<HostTensor>, Vec<Vec<f32>>) {
    let n: usize = case.shape.iter().product();
    let values: Vec<Vec<f32>> = (0..chips)
        .map(|i| reference::input_values(case.data_seed() ^ round, i, n))
        .collect();
    let hosts = values
        .iter()
        .map(|v| {
            HostTensor::from_f32(case.shape.clone(), case.dtype, v.clone())
                .expect("a stress input converts")
        })
        .collect();
    (hosts, values)
}

/// What a run ended with: every chip's error (mesh index, text), or none.
type Errors = Vec<(usize, String)>;

fn errors_of(results: &[Result<(), ChipError>], mesh: &MeshDevice) -> Errors {
    results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.as_ref()
                .err()
                .map(|e| (i, format!("chip {}: {}", mesh.chips()[i].id(), chain(e))))
        })
        .collect()
}

/// Runs one case; an error the case does not expect (setting up, or from the op) is an
/// UnexpectedError result. Sets `dirty` when the mesh should not be reused (a stall, an
/// unexpected error).
pub fn run_case(
    mesh: &MeshDevice,
    case: &Case,
    timeout: Duration,
    probe: &Probe,
    dirty: &AtomicBool,
) -> CaseResult {
    let started = Instant::now();
    let r = match if case.op == OpKind::Send {
        run_send(mesh, case, timeout, probe)
    } else {
        run_collective(mesh, case, timeout, probe)
    } {
        Ok(r) => r,
        Err(e) => CaseResult::new(case, Verdict::UnexpectedError, chain(&e)),
    };
    let here = r.detail.clone();
    let mut r = match ranks::agree(mesh, r, rank_wait(timeout)) {
        Ok(r) => r,
        Err(e) => {
            // The ranks no longer make the same calls: no later case could agree either.
            let e = format!("{}; here the case ended with: {here}", chain(&e));
            *probe.fatal.lock() = Some(e.clone());
            CaseResult::new(case, Verdict::UnexpectedError, e)
        }
    };
    if r.verdict == Verdict::UnexpectedError || matches!(case.fault, FaultPlan::Stall { .. }) {
        dirty.store(true, Ordering::Relaxed);
    }
    r.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    r
}

/// How long a rank waits for the others to share a case's evidence: a rank whose chip was
/// stalled gets there up to one and a half operation timeouts and a second later.
fn rank_wait(timeout: Duration) -> Duration {
    timeout * 2 + Duration::from_secs(2)
}

fn read(t: &MeshTensor) -> Result<Vec<Vec<f32>>, MeshError> {
    Ok(t.to_host_shards(CqId(0))?
        .into_iter()
        .map(|h| h.to_f32_vec())
        .collect())
}
