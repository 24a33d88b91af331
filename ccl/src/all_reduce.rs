//! all_reduce: the line's sum on every chip. Summable formats whose pages hold whole
//! elements (bf16, f32) run as one kernel: the reduce_scatter's fused reduction on pages split
//! as evenly as the line allows, then the all_gather's steps moving the sums output to output,
//! behind one handshake. Others run as reduce_scatter then all_gather.

use std::sync::Arc;

use ttmesh_chip::program::Launched;
use ttmesh_chip::tensor::{DataType, Layout, Tensor, TensorSpec};
use ttmesh_chip::ChipError;
use ttmesh_fabric::Fabric;

use crate::all_gather::gather_steps;
use crate::collective::{Call, Plan};
use crate::kernels::pages::{fuse, page_elems, with_work, Placement};
use crate::kernels::{CollectiveKind, Run};
use crate::reduce_scatter::fused_reduce_steps;
use crate::reduction::run_fused;
use crate::{CclConfig, CclLine, LockstepAlloc, Result};

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
    let op = "all_reduce";
    reduce(Call {
        op,
        inputs,
        line,
        fabric,
        cfg,
        outputs,
        alloc,
    })
}

/// The collective behind [`all_reduce`], on its call.
pub(crate) fn reduce(call: Call<'_, '_>) -> Result<Vec<Tensor>> {
    let n = call.inputs.len();
    if n == 1 {
        // One chip: a copy, whatever topology the config names.
        call.input_spec(0)?;
        return Ok(vec![ttmesh_chip::ops::copy(
            &call.inputs[0],
            &ttmesh_chip::ops::OpOptions {
                output: call.outputs.map(|o| o[0].clone()),
                cq: call.cfg.cq,
                ..Default::default()
            },
        )?]);
    }
    let (spec, topology) = call.check(0)?;
    if let Some((scratch_slots, slot_bytes)) = scratch(&spec, n) {
        let plan = Plan {
            kind: CollectiveKind::AllReduce,
            output_shape: spec.shape.clone(),
            scratch_slots,
            slot_bytes,
        };
        return call.launch(&spec, topology, plan);
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
            call.invalid(format!(
                "no dim of {:?} splits into {n} equal chunks; pad one to a multiple of {n}",
                spec.shape
            ))
        })?;
    // The sums in between stay in the input's memory config; the gather's output takes the
    // caller's.
    let mid_cfg = CclConfig {
        memory_config: None,
        ..call.cfg.clone()
    };
    let partial = crate::reduce_scatter::scatter(
        Call {
            op: "reduce_scatter",
            cfg: &mid_cfg,
            outputs: None,
            ..call
        },
        dim,
    )?;
    crate::all_gather::gather(
        Call {
            op: "all_gather",
            inputs: &partial,
            ..call
        },
        dim,
    )
}

/// Scratch of the one-kernel all_reduce over `n`: (slots, slot bytes). Slots `0..2n` carry
/// partial sums of the largest chunk in the input's format; the gather moves blocks straight
/// between the chips' outputs (its semaphores `2n..3n` have no slot).
pub(crate) fn scratch(spec: &TensorSpec, n: usize) -> Option<(usize, usize)> {
    fused_all_reduce_fits(spec).then(|| {
        let most = (spec.num_pages() as usize).div_ceil(n) * page_elems(spec);
        (2 * n, most * spec.page_size() as usize / page_elems(spec))
    })
}

/// True if all_reduce can run as one kernel on the pages of `spec`: a summable format whose
/// pages hold whole elements (every layout: a sum is element-wise, and tile padding is zeros).
fn fused_all_reduce_fits(spec: &TensorSpec) -> bool {
    let elem = match spec.dtype {
        DataType::BFloat16 => 2,
        DataType::Float32 => 4,
        _ => return false,
    };
    cfg!(target_endian = "little") && spec.page_size() as usize == page_elems(spec) * elem
}

/// Page range `[first, end)` of line position `j`'s chunk when `pages` pages split over `n`
/// positions as evenly as they can (chunks differ by at most one page; some may be empty).
pub(crate) fn chunk_pages(pages: usize, n: usize, j: usize) -> (usize, usize) {
    (j * pages / n, (j + 1) * pages / n)
}

/// all_reduce as one kernel on pages. The pages split as evenly as the line allows (nothing
/// outside the kernel sees the chunks, so they need not divide), a reduce_scatter runs on them
/// with partial sums in the input's format, and an all_gather moves the sums, encoded in the
/// output's format, straight between the chips' outputs, behind one handshake for both
/// phases. Every output byte is written by the steps, so when the line runs together a launch
/// may return as soon as its part is handed over (`Launched::Deferred`).
pub(crate) fn run(run: &Run, addresses: &[u32]) -> Result<Launched, ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let pages = k.input.num_pages() as usize;
    let (in_page, out_page) = (k.input.page_size() as usize, k.output.page_size() as usize);
    let ranges: Vec<(usize, usize)> = (0..n).map(|j| chunk_pages(pages, n, j)).collect();
    let at = Placement {
        chunk_start: ranges.iter().map(|&(a, _)| a * in_page).collect(),
        chunk_run: usize::MAX,
        chunk_stride: 0,
        out_first: ranges.iter().map(|&(a, _)| a * out_page).collect(),
    };
    let counts: Vec<usize> = ranges.iter().map(|(a, e)| e - a).collect();
    with_work(|w| {
        let pieces = fuse(run, addresses, w, &counts, at)?;
        run_fused(run, w, |pos| {
            let mut steps = fused_reduce_steps(k.topology, n, pos, 0, &pieces);
            steps.extend(gather_steps(k.topology, n, pos, 2 * n, &pieces, true));
            steps
        })
    })
}
