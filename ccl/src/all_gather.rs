//! all_gather: every chip's tensor, concatenated along `dim` in chunk order, on every chip.
//! The call (its checks, output shape and scratch), the kernel's part on one chip (three data
//! paths: output to output when nothing lies above `dim`, whole pages through the slots, or
//! element by element), and its step plan.

use std::sync::Arc;

use ttmesh_chip::ops::{read_logical, write_logical};
use ttmesh_chip::program::Launched;
use ttmesh_chip::tensor::{DataType, HostData, Tensor, TensorSpec};
use ttmesh_chip::ChipError;
use ttmesh_fabric::Fabric;

use crate::collective::{Call, Plan};
use crate::kernels::execute::{Side, Step};
use crate::kernels::pages::{
    fused_io, page_split, read_pages, with_work, write_pages, PageSplit, Placement,
};
use crate::kernels::work::{piece_count, sized};
use crate::kernels::{from_wire, split_dims, to_wire, wire_bytes, CollectiveKind, Run};
use crate::{CclConfig, CclLine, LockstepAlloc, Result, Topology};

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
    let op = "all_gather";
    gather(
        Call {
            op,
            inputs,
            line,
            fabric,
            cfg,
            outputs,
            alloc,
        },
        dim,
    )
}

/// The collective behind [`all_gather`], on a checked call (all_reduce calls it too).
pub(crate) fn gather(call: Call<'_, '_>, dim: usize) -> Result<Vec<Tensor>> {
    let (spec, topology) = call.check(dim)?;
    let n = call.inputs.len();
    let mut output_shape = spec.shape.clone();
    output_shape[dim] *= n;
    let plan = Plan {
        kind: CollectiveKind::AllGather { dim },
        output_shape,
        scratch_slots: n,
        slot_bytes: slot_bytes(&spec),
    };
    call.launch(&spec, topology, plan)
}

/// Scratch slot size of an all_gather: one chip's tensor, as pages (fast path) or as wire
/// values (logical path), whichever is larger.
pub(crate) fn slot_bytes(spec: &TensorSpec) -> usize {
    (spec.volume() * wire_bytes(spec.dtype)).max(spec.buffer_size() as usize)
}

/// True if the steps write the whole output (the direct path), so a launch may defer.
pub(crate) fn defers(input: &TensorSpec, dim: usize) -> bool {
    gathers_direct(input, dim)
}

/// This chip's part of the all_gather, on the path its shape allows.
pub(crate) fn run(run: &Run, dim: usize, addresses: &[u32]) -> Result<Launched, ChipError> {
    let input = &run.k.input;
    if gathers_direct(input, dim) {
        return run_direct(run, addresses);
    }
    match page_split(input, dim, input.shape[dim]) {
        Some(split) => run_pages(run, split, addresses),
        None => run_logical(run, dim, addresses),
    }
    .map(|()| Launched::Done)
}

/// True if an all_gather along `dim` of `input` (per chip) moves between the chips' outputs
/// (`all_gather_direct`): its pages split along `dim` and nothing lies above it, so each line
/// position's block is one run of output pages.
pub(crate) fn gathers_direct(input: &TensorSpec, dim: usize) -> bool {
    page_split(input, dim, input.shape[dim]).is_some_and(|s| s.outer == 1)
}

/// all_gather whose blocks are runs of output pages (`gathers_direct`): this chip's input is
/// copied into its block of the output, and each block then moves from one chip's output
/// straight into the next one's (`PassOutput`, one write per DRAM bank run), as the
/// all_reduce's gather does: no block buffers, and no pass over the whole output at the
/// end. The steps write the whole output, so a launch may defer.
fn run_direct(run: &Run, addresses: &[u32]) -> Result<Launched, ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let len = k.input.buffer_size() as usize;
    let (in_page, out_page) = (k.input.page_size() as usize, k.output.page_size() as usize);
    debug_assert_eq!(in_page, out_page, "a gather moves pages as they are");
    with_work(|w| {
        w.shape(&[], &vec![len; n], Some(k.pos));
        let own = &mut w.bufs.blocks[k.pos][..len];
        read_pages(run.ctx, &k.input, addresses[0], own)?;
        write_pages(
            run.ctx,
            &k.output,
            addresses[2],
            k.order[k.pos] * len / out_page,
            own,
        )?;
        let at = Placement {
            chunk_start: Vec::new(),
            chunk_run: usize::MAX,
            chunk_stride: 0,
            out_first: k.order.iter().map(|&b| b * len).collect(),
        };
        w.fused = Some(fused_io(run, addresses, at, false)?);
        // One piece per block, as below.
        let steps = gather_steps(k.topology, n, k.pos, 0, &vec![1; n], true);
        run.run_steps(w, steps, k.topology != Topology::Ring, true)
    })
}

/// Bytes of a received block an all_gather copies from its slot into the output at a time.
const ASSEMBLY_BYTES: usize = 32 << 10;

/// all_gather on pages: every chip's input pages travel as they are, and received blocks are
/// forwarded from the slots they land in; the output is assembled page run by page run from
/// this chip's block and the slots.
fn run_pages(run: &Run, split: PageSplit, addresses: &[u32]) -> Result<(), ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let pos = k.pos;
    let len = k.input.buffer_size() as usize;
    with_work(|w| {
        w.shape(&[], &vec![len; n], Some(pos));
        read_pages(
            run.ctx,
            &k.input,
            addresses[0],
            &mut w.bufs.blocks[pos][..len],
        )?;
        // One piece per block: without a fused reduction, pieces only add waits.
        let pieces = vec![piece_count(len, w.block_piece); n];
        let steps = gather_steps(k.topology, n, pos, 0, &pieces, false);
        run.run_steps(w, steps, k.topology != Topology::Ring, false)?;
        // Output page run (o, b) is input run o of the line position whose order is b.
        let mut from_position = vec![0; n];
        for (p, &blk) in k.order.iter().enumerate() {
            from_position[blk] = p;
        }
        // Received blocks stay in their slots (`Step::TakeBlock`; block j in slot j, as the
        // gather's slots start at 0): each run is read from there a few pages at a time,
        // through a buffer that stays in the host's cache.
        let ps = k.input.page_size() as usize;
        let run_pages = split.extent * split.inner;
        let pages_at_once = (ASSEMBLY_BYTES / ps).clamp(1, run_pages.max(1));
        let mut buf = std::mem::take(&mut w.bufs.staged);
        for o in 0..split.outer {
            for (blk, &j) in from_position.iter().enumerate() {
                for p in (0..run_pages).step_by(pages_at_once) {
                    let count = pages_at_once.min(run_pages - p);
                    let (at, len) = ((o * run_pages + p) * ps, count * ps);
                    let src = match j == pos {
                        true => &w.block(j)[at..at + len],
                        false => {
                            run.read_slot_into(j, at, sized(&mut buf, len))?;
                            &buf[..len]
                        }
                    };
                    let first = (o * n + blk) * run_pages + p;
                    write_pages(run.ctx, &k.output, addresses[2], first, src)?;
                }
            }
        }
        w.bufs.staged = buf;
        Ok(())
    })
}

/// all_gather element by element, for splits that fall inside pages: each chip's tensor
/// travels as wire values through the slots and the output is assembled logically.
fn run_logical(run: &Run, dim: usize, addresses: &[u32]) -> Result<(), ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let pos = k.pos;
    let dtype = k.input.dtype;
    let own = to_wire(dtype, &read_logical(run.ctx, &k.input, addresses[0])?);
    let len = own.len();
    run.write_slot_local(pos, &own)?;
    if k.topology == Topology::Ring {
        run.handshake(false, true)?;
        let right = run.ep.right.expect("a ring has a right neighbour");
        for t in 0..n - 1 {
            let c = (pos + n - t) % n;
            let data = if t == 0 {
                own.clone()
            } else {
                run.read_slot(c, len)?
            };
            run.send(right, c, &data)?;
            run.wait_slot((pos + 2 * n - 1 - t) % n)?;
        }
    } else {
        run.handshake(true, true)?;
        if let Some(r) = run.ep.right {
            run.send(r, pos, &own)?;
        }
        if let Some(l) = run.ep.left {
            run.send(l, pos, &own)?;
        }
        // Chunks from the left arrive nearest first; pass each on to the right.
        for c in (0..pos).rev() {
            run.wait_slot(c)?;
            if let Some(r) = run.ep.right {
                run.send(r, c, &run.read_slot(c, len)?)?;
            }
        }
        for c in pos + 1..n {
            run.wait_slot(c)?;
            if let Some(l) = run.ep.left {
                run.send(l, c, &run.read_slot(c, len)?)?;
            }
        }
    }
    run.flush()?;
    // Assemble the output: slot j holds chip j's tensor; concatenate along `dim`.
    let (outer, extent, inner) = split_dims(&k.input.shape, dim);
    let block = extent * inner;
    // Block b of the output comes from the line position whose order is b.
    let mut from_position = vec![0; n];
    for (p, &b) in k.order.iter().enumerate() {
        from_position[b] = p;
    }
    let shards: Vec<HostData> = from_position
        .into_iter()
        .map(|j| {
            let bytes = if j == pos {
                own.clone()
            } else {
                run.read_slot(j, len)?
            };
            let mut d = if dtype == DataType::UInt32 {
                HostData::U32(Vec::new())
            } else {
                HostData::F32(Vec::new())
            };
            from_wire(dtype, &bytes, &mut d);
            Ok(d)
        })
        .collect::<Result<_, ChipError>>()?;
    let out = match &shards[0] {
        HostData::F32(_) => HostData::F32(concat(&shards, outer, block, |d| match d {
            HostData::F32(v) => v,
            HostData::U32(_) => unreachable!("shards share one dtype"),
        })),
        HostData::U32(_) => HostData::U32(concat(&shards, outer, block, |d| match d {
            HostData::U32(v) => v,
            HostData::F32(_) => unreachable!("shards share one dtype"),
        })),
    };
    write_logical(run.ctx, &k.output, addresses[2], &out)
}

fn concat<T: Copy>(
    shards: &[HostData],
    outer: usize,
    block: usize,
    get: impl Fn(&HostData) -> &Vec<T>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * block * shards.len());
    for o in 0..outer {
        for s in shards {
            out.extend_from_slice(&get(s)[o * block..(o + 1) * block]);
        }
    }
    out
}

/// The gather steps of line position `pos` (slots `base..base + n`): block `pos` is this
/// position's; afterwards every block `j` holds position `j`'s. A block received is passed
/// on piece by piece as its pieces land. `direct`: blocks move between the chips' outputs
/// (`PassOutput`, `AwaitOutput`; slots only name semaphores), else through the slots, where
/// received blocks stay (`SendBlock` of this position's, `TakeBlock`, `PassSlot`).
pub(crate) fn gather_steps(
    topology: Topology,
    n: usize,
    pos: usize,
    base: usize,
    pieces: &[usize],
    direct: bool,
) -> Vec<Step> {
    let mut s = Vec::new();
    let send = |to, c: usize, piece| {
        let (slot, block) = (base + c, c);
        match direct {
            true => Step::PassOutput {
                to,
                slot,
                block,
                piece,
            },
            // A received block is forwarded from the slot it landed in.
            false if c == pos => Step::SendBlock {
                to,
                slot,
                block,
                piece,
            },
            false => Step::PassSlot {
                to,
                slot,
                block,
                piece,
            },
        }
    };
    let take = |c: usize, piece| {
        let (slot, block) = (base + c, c);
        match direct {
            true => Step::AwaitOutput { slot },
            false => Step::TakeBlock { slot, block, piece },
        }
    };
    if topology == Topology::Ring {
        for t in 0..n - 1 {
            // Sends the block taken in the previous round; takes the next one from the left.
            let c = (pos + n - t) % n;
            let r = (pos + 2 * n - 1 - t) % n;
            for q in 0..pieces[c].max(pieces[r]) {
                if q < pieces[c] {
                    s.push(send(Side::Right, c, q));
                }
                if q < pieces[r] {
                    s.push(take(r, q));
                }
            }
        }
        return s;
    }
    // A line: this position's own pieces go both ways first; then each block's pieces are
    // taken (and passed on) in the order they can arrive, from either side, so a middle
    // position does not hold the right's blocks back while it waits for the left's.
    let (has_left, has_right) = (pos > 0, pos + 1 < n);
    let mut timed: Vec<(usize, Step)> = Vec::new();
    for q in 0..pieces[pos] {
        if has_right {
            timed.push((q, send(Side::Right, pos, q)));
        }
        if has_left {
            timed.push((q, send(Side::Left, pos, q)));
        }
    }
    for (c, &count) in pieces.iter().enumerate().filter(|&(c, _)| c != pos) {
        let (hops, on) = match c < pos {
            true => (pos - c, has_right.then_some(Side::Right)),
            false => (c - pos, has_left.then_some(Side::Left)),
        };
        for q in 0..count {
            timed.push((hops + q, take(c, q)));
            if let Some(side) = on {
                timed.push((hops + q, send(side, c, q)));
            }
        }
    }
    // Stable: a take stays just before its pass, and a block's pieces stay in order.
    timed.sort_by_key(|&(ready, _)| ready);
    s.extend(timed.into_iter().map(|(_, step)| step));
    s
}
