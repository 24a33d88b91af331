//! What every collective does around its own rules: check the inputs (one tensor per chip of
//! the line, one spec), pick the topology, place the outputs and the scratch (one address on
//! every chip: remote writes rely on it) and launch one program per chip. Each collective's
//! module adds its own checks, output shape and scratch size, and calls [`Call::launch`].

use std::sync::Arc;

use ttmesh_chip::ops::{Launch, LaunchSplit};
use ttmesh_chip::program::{program_key, Access, CoreSplit};
use ttmesh_chip::tensor::{DataType, Layout, MemoryConfig, Tensor, TensorSpec};
use ttmesh_fabric::Fabric;

use crate::kernels::{self, CollectiveKind};
use crate::{CclConfig, CclError, CclLine, LockstepAlloc, Result, Topology};

/// One collective as the caller asked for it: the public functions' arguments, checked and
/// launched the same way for all three.
pub(crate) struct Call<'a, 'b> {
    pub op: &'static str,
    pub inputs: &'a [Tensor],
    pub line: &'a CclLine,
    pub fabric: &'a Arc<Fabric>,
    pub cfg: &'a CclConfig,
    pub outputs: Option<&'a [Tensor]>,
    pub alloc: &'a LockstepAlloc<'b>,
}

/// What a collective launches: its kernel kind, output shape and scratch (slots x bytes).
pub(crate) struct Plan {
    pub kind: CollectiveKind,
    pub output_shape: Vec<usize>,
    pub scratch_slots: usize,
    pub slot_bytes: usize,
}

impl Call<'_, '_> {
    /// The shared preamble: the inputs' one spec (checked against the line and `dim`) and the
    /// topology the line and the config allow.
    pub(crate) fn check(&self, dim: usize) -> Result<(TensorSpec, Topology)> {
        let spec = self.input_spec(dim)?;
        let topology = resolve_topology(self.op, self.line, self.fabric, self.cfg)?;
        Ok((spec, topology))
    }

    /// The inputs' one spec, checked: one tensor per chip of the line, in line order, every
    /// one of the same spec, `dim` within its rank.
    pub(crate) fn input_spec(&self, dim: usize) -> Result<TensorSpec> {
        check_inputs(self.op, self.inputs, self.line, dim)
    }

    /// An error of this collective's, naming it.
    pub(crate) fn invalid(&self, detail: impl Into<String>) -> CclError {
        invalid(self.op, detail)
    }

    /// Launches `plan` on every chip of the line: outputs (the caller's, checked, or
    /// allocated), scratch, and one program per chip.
    pub(crate) fn launch(
        &self,
        spec: &TensorSpec,
        topology: Topology,
        plan: Plan,
    ) -> Result<Vec<Tensor>> {
        let mut output_spec = spec.clone();
        output_spec.shape = plan.output_shape;
        output_spec.memory_config = output_memory_config(spec, self.cfg)?;
        let scratch = scratch_spec(plan.scratch_slots, plan.slot_bytes);
        launch(self, plan.kind, output_spec, scratch, topology)
    }
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
    let ring_ok = line.is_ring && line.chips.len() > 2 && fabric_closes_ring(fabric, line);
    match cfg.topology {
        Some(Topology::Ring) if !ring_ok => Err(invalid(
            op,
            format!(
                "Topology::Ring needs a ring of 3 or more chips and a fabric that closes it: FabricConfig::Fabric1DRing, or a 2D torus config wrapping the line's axis (line {:?} is_ring={}, fabric {:?}); use Topology::Linear or open the mesh with a config that closes the ring",
                line.chips,
                line.is_ring,
                fabric.config()
            ),
        )),
        Some(t) => Ok(t),
        None => Ok(if ring_ok { Topology::Ring } else { Topology::Linear }),
    }
}

/// Whether the fabric carries the line's closing hop (last chip to first) over one link: a
/// 1D ring config, or a 2D torus whose wrap links close this row or column.
fn fabric_closes_ring(fabric: &Fabric, line: &CclLine) -> bool {
    let config = fabric.config();
    if config == ttmesh_fabric::FabricConfig::Fabric1DRing {
        return true;
    }
    let (Some(&first), Some(&last)) = (line.chips.first(), line.chips.last()) else {
        return false;
    };
    config.is_2d() && fabric.route(last, first).is_ok_and(|r| r.hops == 1)
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
    if let Some(&chip) = line.chips.iter().find(|&&c| c >= crate::MAX_CHIP_ID) {
        return Err(invalid(
            op,
            format!(
                "chip {chip} is beyond the {} chips a collective's semaphores number; run it on a mesh of fewer chips",
                crate::MAX_CHIP_ID
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

fn launch(
    call: &Call<'_, '_>,
    kind: CollectiveKind,
    output_spec: TensorSpec,
    scratch_spec: TensorSpec,
    topology: Topology,
) -> Result<Vec<Tensor>> {
    let (op, inputs, line, fabric, cfg, alloc) = (
        call.op,
        call.inputs,
        call.line,
        call.fabric,
        call.cfg,
        call.alloc,
    );
    let order = chunk_order(op, cfg, inputs.len())?;
    let outputs = match call.outputs {
        Some(o) => {
            if o.len() != inputs.len() {
                return Err(invalid(
                    op,
                    format!("{} outputs for {} chips", o.len(), inputs.len()),
                ));
            }
            for (t, input) in o.iter().zip(inputs) {
                // The same chip object, not just the same id: another mesh's chip 0 has its own
                // allocator, and remote writes would land in memory it never handed out.
                if !Arc::ptr_eq(t.chip(), input.chip()) {
                    return Err(invalid(
                        op,
                        format!(
                            "output {} is not on the chip of input {} (chip {}); allocate outputs on the inputs' chips",
                            t.name(),
                            input.name(),
                            input.chip().id()
                        ),
                    ));
                }
                if t.spec() != &output_spec {
                    return Err(invalid(
                        op,
                        format!("output {} must have spec {}", t.name(), output_spec),
                    ));
                }
            }
            o.to_vec()
        }
        None => alloc(inputs, &output_spec).map_err(CclError::Allocate)?,
    };
    let scratch = alloc(inputs, &scratch_spec).map_err(CclError::Allocate)?;
    let num_links = cfg.num_links.max(1);
    // A collective runs on the ethernet-facing workers: a few cores, not the grid.
    let split = CoreSplit {
        cores: 2 * num_links as u32,
        units_per_core: output_spec.num_pages() as u32,
        args_per_core: 8,
    };
    // Everything but the position is the line's (every input has one spec, checked above):
    // hashed once, not once per chip (on 32 chips that was 32 hashes of the chip list, the
    // chunk order and two specs per collective).
    // A reduction's last hop may read the receiver's input from the sender's thread only
    // where every input sits at one address (a mesh tensor's do).
    let address = |t: &Tensor| t.buffer_address().ok();
    let first = inputs.first().and_then(address);
    let inputs_share_address = first.is_some() && inputs.iter().all(|t| address(t) == first);
    let line_key = program_key(&(
        op,
        kind,
        &line.chips,
        &order,
        topology,
        num_links,
        inputs.first().map(Tensor::spec),
        &output_spec,
        inputs_share_address,
    ));
    for (pos, ((input, out), scr)) in inputs.iter().zip(&outputs).zip(&scratch).enumerate() {
        let key = program_key(&(line_key, pos));
        let operands = [
            (input, Access::Read),
            (scr, Access::ReadWrite),
            (out, Access::Write),
        ];
        let launch = Launch {
            name: op,
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
                    op, kind, line.chips
                )
            },
            || {
                Ok(Arc::new(kernels::CollectiveKernel::new(
                    kind,
                    pos,
                    line.clone(),
                    order.clone(),
                    topology,
                    num_links,
                    input.spec().clone(),
                    output_spec.clone(),
                    scratch_spec.clone(),
                    fabric.clone(),
                    inputs_share_address,
                )))
            },
        )?;
    }
    Ok(outputs)
}
