//! ttmesh-ccl: collectives as device kernels over the 1D fabric: all_gather, reduce_scatter and
//! all_reduce, with Linear and Ring algorithms, and the host-side builders that turn one
//! collective over a line of chips into one program per chip.
//!
//! Owns: the collective algorithms, their semaphore protocol and scratch buffers. Must not
//! touch: mesh shapes and coordinates (the mesh crate hands it lines of chips and per-chip
//! tensors), routing (the fabric's), or allocation policy (the chip's).
//!
//! # Protocol
//!
//! Every chip of a line runs the same kernel, parameterised by its position. Data moves in
//! slots of a per-chip scratch buffer that sits at the same address on every chip (the mesh
//! allocates in lockstep), each slot guarded by its own fabric semaphore, so chunks that take
//! different links may land in any order. Before writing into a neighbour, a chip waits for
//! that neighbour's "ready" increment, which the neighbour sends only once it has entered the
//! same collective: a fast chip can never overwrite data a slow chip has not consumed, across
//! ops and across trace replays.
//!
//! # Reduction order
//!
//! Sums are added in f32 in a fixed order given by the line: on a ring, chunk `j` starts at
//! chip `j+1` and travels forward to `j`; on a line, chunk `j` is summed from the left end up
//! to `j` and from the right end down to `j`, then `left + right`. A partial sum crosses each
//! link in the tensor's format, as tt-metal's reduce_scatter packs each hop's sum to it: for a
//! bf16 tensor it is rounded to bf16 (nearest even) at every send, and the owner adds what
//! arrives in f32 and rounds once more; f32 tensors stay f32 throughout. The order does not
//! depend on timing, so results are identical run to run and replay to replay. (Chunk `j`
//! here is the one line position `j` owns: data chunk `CclConfig::chunk_order[j]`.)
//!
//! # Faults: right or an error, never wrong
//!
//! A collective that fails on one chip (a link down, a packet dropped or corrupted, a
//! timeout) leaves semaphore counts, slot contents and packets in flight that the next
//! collective would read as its own. So the first chip that fails aborts the fabric
//! (`Fabric::abort`, with the cause, which names the link and fault): every other chip's
//! waits and sends then fail at once with that cause instead of at their timeouts, and every
//! collective kernel started later fails the same way without touching memory. The error each
//! chip reports, traced or untraced, therefore names the link.
//!
//! The mesh's `synchronize_device` (and `finish` on a single-queue mesh) resets the fabric
//! once every chip's queues are idle: it waits until no packet is in flight, zeroes every
//! chip's semaphores and forgets recorded losses (`Fabric::recover`). The next collective
//! then starts clean and, once the fault is cleared, is right. If a chip is still busy the
//! reset waits for the next synchronize, and until then collectives fail naming the original
//! cause; if the fabric cannot be drained, the error says to close and reopen the mesh.
//! Slots need no reset: every slot is written before its semaphore is raised.
//!
//! # Where the time goes
//!
//! Measured with perf on a 2-core host, change by change, with dates and commands:
//! `docs/performance.md` at the repository's root.

#![forbid(unsafe_code)]

mod kernels;

use std::sync::Arc;

use ttmesh_chip::device::CqId;
use ttmesh_chip::ops::{Launch, LaunchSplit};
use ttmesh_chip::program::{program_key, Access, CoreSplit};
use ttmesh_chip::tensor::{DataType, Layout, MemoryConfig, Tensor, TensorSpec};
use ttmesh_chip::ChipError;
use ttmesh_fabric::Fabric;

pub use kernels::{
    set_step_runner, CollectiveKind, StepRunner, SEM_READY_FROM_LEFT, SEM_READY_FROM_RIGHT,
    SEM_SLOT_BASE,
};

#[derive(Debug, thiserror::Error)]
pub enum CclError {
    #[error("{op}: {detail}")]
    Invalid { op: &'static str, detail: String },
    #[error(transparent)]
    Chip(#[from] ChipError),
    /// The caller's lockstep allocation failed (its error, whole).
    #[error(transparent)]
    Allocate(Box<dyn std::error::Error + Send + Sync>),
}

/// Allocates one tensor of a spec on the chip of each given tensor, at one address on all of
/// them: every remote write relies on it. The caller owns that rule (the mesh allocates in
/// lockstep and checks it).
pub type LockstepAlloc<'a> = dyn Fn(
        &[Tensor],
        &TensorSpec,
    ) -> std::result::Result<Vec<Tensor>, Box<dyn std::error::Error + Send + Sync>>
    + 'a;

pub type Result<T, E = CclError> = std::result::Result<T, E>;

/// TT-NN's CCL topologies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    Linear,
    Ring,
}

/// Chips taking part, in line order (fabric chip ids); a ring if the ends are linked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CclLine {
    pub chips: Vec<u32>,
    pub is_ring: bool,
}

#[derive(Clone, Debug, Default)]
pub struct CclConfig {
    /// Ring needs a ring line and a ring-capable fabric; `None` picks Ring when possible.
    pub topology: Option<Topology>,
    /// Parallel ethernet links to spread slots over (default 1).
    pub num_links: usize,
    pub memory_config: Option<MemoryConfig>,
    pub cq: CqId,
    /// Where each line position's data goes in the result: position `p`'s all_gather block and
    /// reduce_scatter chunk is `chunk_order[p]` (a permutation of 0..n); empty = line order.
    /// The mesh passes mesh order, so results compose with its mappers whatever path the line
    /// takes through the mesh (a T3K's 8-chip line is its perimeter, not row-major order).
    pub chunk_order: Vec<usize>,
}

/// The chunk order a config asks for on a line of `n`, checked to be a permutation.
fn chunk_order(op: &'static str, cfg: &CclConfig, n: usize) -> Result<Vec<usize>> {
    if cfg.chunk_order.is_empty() {
        return Ok((0..n).collect());
    }
    let mut seen = vec![false; n];
    let ok = cfg.chunk_order.len() == n
        && cfg
            .chunk_order
            .iter()
            .all(|&c| c < n && !std::mem::replace(&mut seen[c], true));
    if !ok {
        return Err(invalid(
            op,
            format!(
                "chunk_order {:?} is not a permutation of 0..{n}; pass each chunk index once, or leave it empty for line order",
                cfg.chunk_order
            ),
        ));
    }
    Ok(cfg.chunk_order.clone())
}

fn invalid(op: &'static str, detail: impl Into<String>) -> CclError {
    CclError::Invalid {
        op,
        detail: detail.into(),
    }
}

/// Picks the algorithm a line and a config allow.
pub fn resolve_topology(
    op: &'static str,
    line: &CclLine,
    fabric: &Fabric,
    cfg: &CclConfig,
) -> Result<Topology> {
    let ring_ok = line.is_ring
        && line.chips.len() > 2
        && fabric.config() == ttmesh_fabric::FabricConfig::Fabric1DRing;
    match cfg.topology {
        Some(Topology::Ring) if !ring_ok => Err(invalid(
            op,
            format!(
                "Topology::Ring needs a ring of 3 or more chips and FabricConfig::Fabric1DRing (line {:?} is_ring={}, fabric {:?}); use Topology::Linear or open the mesh with Fabric1DRing",
                line.chips,
                line.is_ring,
                fabric.config()
            ),
        )),
        Some(t) => Ok(t),
        None => Ok(if ring_ok { Topology::Ring } else { Topology::Linear }),
    }
}

fn check_inputs(
    op: &'static str,
    inputs: &[Tensor],
    line: &CclLine,
    dim: usize,
) -> Result<TensorSpec> {
    if inputs.is_empty() || inputs.len() != line.chips.len() {
        return Err(invalid(
            op,
            format!(
                "{} inputs for a line of {} chips; pass one tensor per chip",
                inputs.len(),
                line.chips.len()
            ),
        ));
    }
    let spec = inputs[0].spec().clone();
    for (t, &chip) in inputs.iter().zip(&line.chips) {
        if t.chip().id() != chip {
            return Err(invalid(
                op,
                format!(
                    "{} is on chip {}, but its place in the line is chip {chip}",
                    t.name(),
                    t.chip().id()
                ),
            ));
        }
        if t.spec() != &spec {
            return Err(invalid(
                op,
                format!(
                    "{} differs from {}: every chip's tensor must have the same spec",
                    t.name(),
                    inputs[0].name()
                ),
            ));
        }
    }
    if dim >= spec.shape.len() {
        return Err(invalid(
            op,
            format!(
                "dim {dim} is out of range for rank {} ({:?})",
                spec.shape.len(),
                spec.shape
            ),
        ));
    }
    Ok(spec)
}

/// Scratch with `slots` rows of `slot_bytes` (rounded to u32s) in DRAM.
fn scratch_spec(slots: usize, slot_bytes: usize) -> TensorSpec {
    TensorSpec::new(
        vec![slots, slot_bytes.div_ceil(4).max(1)],
        DataType::UInt32,
        Layout::RowMajor,
        MemoryConfig::DRAM,
    )
}

struct Plan<'a> {
    op: &'static str,
    kind: CollectiveKind,
    inputs: &'a [Tensor],
    output_spec: TensorSpec,
    scratch: TensorSpec,
    outputs: Option<&'a [Tensor]>,
}

fn launch(
    plan: Plan<'_>,
    line: &CclLine,
    topology: Topology,
    fabric: &Arc<Fabric>,
    cfg: &CclConfig,
    alloc: &LockstepAlloc<'_>,
) -> Result<Vec<Tensor>> {
    let order = chunk_order(plan.op, cfg, plan.inputs.len())?;
    let outputs = match plan.outputs {
        Some(o) => {
            if o.len() != plan.inputs.len() {
                return Err(invalid(
                    plan.op,
                    format!("{} outputs for {} chips", o.len(), plan.inputs.len()),
                ));
            }
            for (t, input) in o.iter().zip(plan.inputs) {
                // The same chip object, not just the same id: another mesh's chip 0 has its own
                // allocator, and remote writes would land in memory it never handed out.
                if !Arc::ptr_eq(t.chip(), input.chip()) {
                    return Err(invalid(
                        plan.op,
                        format!(
                            "output {} is not on the chip of input {} (chip {}); allocate outputs on the inputs' chips",
                            t.name(),
                            input.name(),
                            input.chip().id()
                        ),
                    ));
                }
                if t.spec() != &plan.output_spec {
                    return Err(invalid(
                        plan.op,
                        format!("output {} must have spec {}", t.name(), plan.output_spec),
                    ));
                }
            }
            o.to_vec()
        }
        None => alloc(plan.inputs, &plan.output_spec).map_err(CclError::Allocate)?,
    };
    let scratch = alloc(plan.inputs, &plan.scratch).map_err(CclError::Allocate)?;
    let num_links = cfg.num_links.max(1);
    // A collective runs on the ethernet-facing workers: a few cores, not the grid.
    let split = CoreSplit {
        cores: 2 * num_links as u32,
        units_per_core: plan.output_spec.num_pages() as u32,
        args_per_core: 8,
    };
    // Everything but the position is the line's (every input has one spec, checked above):
    // hashed once, not once per chip (on 32 chips that was 32 hashes of the chip list, the
    // chunk order and two specs per collective).
    // A reduction's last hop may read the receiver's input from the sender's thread only
    // where every input sits at one address (a mesh tensor's do).
    let address = |t: &Tensor| t.buffer_address().ok();
    let first = plan.inputs.first().and_then(address);
    let inputs_share_address = first.is_some() && plan.inputs.iter().all(|t| address(t) == first);
    let line_key = program_key(&(
        plan.op,
        plan.kind,
        &line.chips,
        &order,
        topology,
        num_links,
        plan.inputs.first().map(Tensor::spec),
        &plan.output_spec,
        inputs_share_address,
    ));
    for (pos, ((input, out), scr)) in plan.inputs.iter().zip(&outputs).zip(&scratch).enumerate() {
        let key = program_key(&(line_key, pos));
        let operands = [
            (input, Access::Read),
            (scr, Access::ReadWrite),
            (out, Access::Write),
        ];
        let launch = Launch {
            name: plan.op,
            key,
            operands: &operands,
            split: LaunchSplit::Cores(split.clone()),
            cq: cfg.cq,
        };
        ttmesh_chip::ops::launch(
            &launch,
            || {
                format!(
                    "{}(dim, {:?}) at position {pos} of line {:?}",
                    plan.op, plan.kind, line.chips
                )
            },
            || {
                Ok(Arc::new(kernels::CollectiveKernel::new(
                    plan.kind,
                    pos,
                    line.clone(),
                    order.clone(),
                    topology,
                    num_links,
                    input.spec().clone(),
                    plan.output_spec.clone(),
                    plan.scratch.clone(),
                    fabric.clone(),
                    inputs_share_address,
                )))
            },
        )?;
    }
    Ok(outputs)
}

fn output_memory_config(spec: &TensorSpec, cfg: &CclConfig) -> Result<MemoryConfig> {
    let mc = cfg
        .memory_config
        .clone()
        .unwrap_or_else(|| spec.memory_config.clone());
    if mc.is_sharded() {
        return Err(invalid("ccl", "sharded CCL outputs are not supported yet; use an interleaved DRAM or L1 memory config"));
    }
    Ok(mc)
}

/// Gathers every chip's tensor along `dim`: output `shape[dim] *= n` on every chip, in line order.
pub fn all_gather(
    inputs: &[Tensor],
    dim: usize,
    line: &CclLine,
    fabric: &Arc<Fabric>,
    cfg: &CclConfig,
    outputs: Option<&[Tensor]>,
    alloc: &LockstepAlloc<'_>,
) -> Result<Vec<Tensor>> {
    let spec = check_inputs("all_gather", inputs, line, dim)?;
    let topology = resolve_topology("all_gather", line, fabric, cfg)?;
    let n = inputs.len();
    let mut out = spec.clone();
    out.shape[dim] *= n;
    out.memory_config = output_memory_config(&spec, cfg)?;
    let slot_bytes = kernels::gather_slot_bytes(&spec);
    let plan = Plan {
        op: "all_gather",
        kind: CollectiveKind::AllGather { dim },
        inputs,
        output_spec: out,
        scratch: scratch_spec(n, slot_bytes),
        outputs,
    };
    launch(plan, line, topology, fabric, cfg, alloc)
}

/// Sums every chip's tensor and leaves chunk `i` (along `dim`) of the sum on the i-th chip of the
/// line: output `shape[dim] /= n`.
pub fn reduce_scatter(
    inputs: &[Tensor],
    dim: usize,
    line: &CclLine,
    fabric: &Arc<Fabric>,
    cfg: &CclConfig,
    outputs: Option<&[Tensor]>,
    alloc: &LockstepAlloc<'_>,
) -> Result<Vec<Tensor>> {
    let spec = check_inputs("reduce_scatter", inputs, line, dim)?;
    let topology = resolve_topology("reduce_scatter", line, fabric, cfg)?;
    let n = inputs.len();
    if spec.shape[dim] % n != 0 {
        return Err(invalid(
            "reduce_scatter",
            format!("dim {dim} of {:?} ({}) does not split into {n} equal chunks; pad it to a multiple of {n}", spec.shape, spec.shape[dim]),
        ));
    }
    if spec.dtype == DataType::UInt32 {
        return Err(invalid(
            "reduce_scatter",
            "UINT32 tensors cannot be summed here; typecast to BFLOAT16 or FLOAT32",
        ));
    }
    let mut out = spec.clone();
    out.shape[dim] /= n;
    out.memory_config = output_memory_config(&spec, cfg)?;
    let chunk_bytes = kernels::scatter_slot_bytes(&spec, n);
    let plan = Plan {
        op: "reduce_scatter",
        kind: CollectiveKind::ReduceScatter { dim },
        inputs,
        output_spec: out,
        scratch: scratch_spec(2 * n, chunk_bytes),
        outputs,
    };
    launch(plan, line, topology, fabric, cfg, alloc)
}

/// Sum across the line, result on every chip. Summable formats whose pages hold whole elements
/// (bf16, f32) run as one kernel over their pages; others as reduce_scatter then all_gather
/// along the largest dim that splits evenly (the result does not depend on which).
pub fn all_reduce(
    inputs: &[Tensor],
    line: &CclLine,
    fabric: &Arc<Fabric>,
    cfg: &CclConfig,
    outputs: Option<&[Tensor]>,
    alloc: &LockstepAlloc<'_>,
) -> Result<Vec<Tensor>> {
    let n = inputs.len();
    let spec = check_inputs("all_reduce", inputs, line, 0)?;
    if n == 1 {
        return Ok(vec![ttmesh_chip::ops::copy(
            &inputs[0],
            &ttmesh_chip::ops::OpOptions {
                output: outputs.map(|o| o[0].clone()),
                cq: cfg.cq,
                ..Default::default()
            },
        )?]);
    }
    let topology = resolve_topology("all_reduce", line, fabric, cfg)?;
    if let Some((slots, slot_bytes)) = kernels::all_reduce_scratch(&spec, n) {
        let mut out = spec.clone();
        out.memory_config = output_memory_config(&spec, cfg)?;
        let plan = Plan {
            op: "all_reduce",
            kind: CollectiveKind::AllReduce,
            inputs,
            output_spec: out,
            scratch: scratch_spec(slots, slot_bytes),
            outputs,
        };
        return launch(plan, line, topology, fabric, cfg, alloc);
    }
    let dim = (0..spec.shape.len())
        .rev()
        .find(|&d| {
            spec.shape[d] % n == 0
                && (d + 2 < spec.shape.len()
                    || spec.layout == Layout::RowMajor
                    || (spec.shape[d] / n).is_multiple_of(32))
        })
        .or_else(|| {
            (0..spec.shape.len())
                .rev()
                .find(|&d| spec.shape[d] % n == 0)
        })
        .ok_or_else(|| {
            invalid(
                "all_reduce",
                format!(
                    "no dim of {:?} splits into {n} equal chunks; pad one to a multiple of {n}",
                    spec.shape
                ),
            )
        })?;
    let mid_cfg = CclConfig {
        memory_config: None,
        ..cfg.clone()
    };
    let partial = reduce_scatter(inputs, dim, line, fabric, &mid_cfg, None, alloc)?;
    all_gather(&partial, dim, line, fabric, cfg, outputs, alloc)
}
