//! reduce_scatter: the line's sum, chunk `j` (along `dim`) of it left on the chip whose chunk
//! order is `j`. The call (its checks, output shape and scratch), the kernel's part on one
//! chip (whole pages with the fused reduction, or element by element), and its step plan,
//! which all_reduce reuses.

use std::sync::Arc;

use ttmesh_chip::ops::{read_logical, write_logical};
use ttmesh_chip::program::Launched;
use ttmesh_chip::tensor::{DataType, HostData, Tensor, TensorSpec};
use ttmesh_chip::ChipError;
use ttmesh_fabric::Fabric;

use crate::collective::{Call, Plan};
use crate::kernels::execute::{Side, Step};
use crate::kernels::pages::{fuse, page_elems, page_split, with_work, PageSplit, Placement};
use crate::kernels::step::each_piece;
use crate::kernels::{split_dims, CollectiveKind, Run};
use crate::reduction::run_fused;
use crate::{CclConfig, CclLine, LockstepAlloc, Result, Topology};

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
    let op = "reduce_scatter";
    scatter(
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

/// The collective behind [`reduce_scatter`], on a checked call (all_reduce calls it too).
pub(crate) fn scatter(call: Call<'_, '_>, dim: usize) -> Result<Vec<Tensor>> {
    let (spec, topology) = call.check(dim)?;
    let n = call.inputs.len();
    if spec.shape[dim] % n != 0 {
        return Err(call.invalid(format!(
            "dim {dim} of {:?} ({}) does not split into {n} equal chunks; pad it to a multiple of {n}",
            spec.shape, spec.shape[dim]
        )));
    }
    if spec.dtype == DataType::UInt32 {
        return Err(
            call.invalid("UINT32 tensors cannot be summed here; typecast to BFLOAT16 or FLOAT32")
        );
    }
    let mut output_shape = spec.shape.clone();
    output_shape[dim] /= n;
    let plan = Plan {
        kind: CollectiveKind::ReduceScatter { dim },
        output_shape,
        scratch_slots: 2 * n,
        slot_bytes: slot_bytes(&spec, n),
    };
    call.launch(&spec, topology, plan)
}

/// Scratch slot size of a reduce_scatter over `n`: one chunk of f32 partial sums (the most a
/// partial sum takes on the wire: bf16 ones take half), counting the
/// tile padding the fast path carries.
pub(crate) fn slot_bytes(spec: &TensorSpec, n: usize) -> usize {
    let padded = (spec.num_pages() as usize).div_ceil(n) * page_elems(spec);
    (spec.volume() / n).max(padded) * 4
}

/// True if the steps write the whole output (the page path), so a launch may defer.
pub(crate) fn defers(input: &TensorSpec, dim: usize, n: usize) -> bool {
    page_split(input, dim, input.shape[dim] / n).is_some()
}

/// This chip's part of the reduce_scatter, on the path its shape allows.
pub(crate) fn run(run: &Run, dim: usize, addresses: &[u32]) -> Result<Launched, ChipError> {
    let input = &run.k.input;
    let n = run.k.line.chips.len();
    match page_split(input, dim, input.shape[dim] / n) {
        Some(split) => run_pages(run, split, addresses),
        None => run_logical(run, dim, addresses).map(|()| Launched::Done),
    }
}

/// reduce_scatter on pages: the fused reduction of `all_reduce` on chunks that are a run of
/// pages in each slice above the scattered dim, read in place from the input; this chip's
/// chunk is encoded piece by piece into the output's pages (same page order as the chunk).
/// The steps write the whole output, so a launch may defer.
fn run_pages(run: &Run, split: PageSplit, addresses: &[u32]) -> Result<Launched, ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let page_bytes = k.input.page_size() as usize;
    // The algorithm's chunk j (owned by line position j) is the data's chunk order[j]: in
    // each of the `outer` slices, its `cs * inner` pages.
    let cs = split.extent / n;
    let run_bytes = cs * split.inner * page_bytes;
    let at = Placement {
        chunk_start: k.order.iter().map(|&d| d * run_bytes).collect(),
        chunk_run: run_bytes,
        chunk_stride: split.extent * split.inner * page_bytes,
        out_first: vec![0; n],
    };
    let chunk_pages = vec![k.input.num_pages() as usize / n; n];
    with_work(|w| {
        let pieces = fuse(run, addresses, w, &chunk_pages, at)?;
        run_fused(run, w, |pos| {
            fused_reduce_steps(k.topology, n, pos, 0, &pieces)
        })
    })
}

/// Partial sums as they travel: f32 bytes, each rounded to bf16 first for a bf16 tensor, so
/// this path sums exactly as the page path, which sends bf16 partials (see the crate docs).
fn partial_bytes(dtype: DataType, v: &[f32]) -> Vec<u8> {
    let round = |x: f32| match dtype {
        DataType::BFloat16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    };
    v.iter().flat_map(|&x| round(x).to_le_bytes()).collect()
}

fn add_bytes(acc: &mut [f32], bytes: &[u8]) {
    for (a, b) in acc.iter_mut().zip(bytes.chunks_exact(4)) {
        *a += f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// reduce_scatter element by element, for chunks that fall inside pages: f32 partial sums
/// (rounded to bf16 first for a bf16 tensor) travel through the slots.
fn run_logical(run: &Run, dim: usize, addresses: &[u32]) -> Result<(), ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let pos = k.pos;
    let dtype = k.input.dtype;
    let input = match read_logical(run.ctx, &k.input, addresses[0])? {
        HostData::F32(v) => v,
        HostData::U32(v) => v.into_iter().map(|x| x as f32).collect(),
    };
    // Chunk j = for every outer index, rows [j*cs, (j+1)*cs) of `dim`.
    let (outer, extent, inner) = split_dims(&k.input.shape, dim);
    let cs = extent / n;
    // The algorithm's chunk j (owned by line position j) is the data's chunk order[j].
    let mut chunks: Vec<Vec<f32>> = k
        .order
        .iter()
        .map(|&j| {
            let mut c = Vec::with_capacity(outer * cs * inner);
            for o in 0..outer {
                let start = o * extent * inner + j * cs * inner;
                c.extend_from_slice(&input[start..start + cs * inner]);
            }
            c
        })
        .collect();
    let len = chunks[0].len() * 4;
    let result = if k.topology == Topology::Ring {
        run.handshake(false, true)?;
        let right = run.ep.right.expect("a ring has a right neighbour");
        for t in 0..n - 1 {
            let send_c = (pos + 2 * n - t - 1) % n;
            run.send(right, t, &partial_bytes(dtype, &chunks[send_c]))?;
            run.wait_slot(t)?;
            let recv_c = (pos + 2 * n - t - 2) % n;
            add_bytes(&mut chunks[recv_c], &run.read_slot(t, len)?);
        }
        std::mem::take(&mut chunks[pos])
    } else {
        run.handshake(true, true)?;
        // Rightward stream: slots 0..n carry partial sums of chips 0..=i for chunks owned further right.
        let mut from_left: Option<Vec<f32>> = None;
        if run.ep.left.is_none() {
            if let Some(r) = run.ep.right {
                for (c, chunk) in chunks.iter().enumerate().take(n).skip(1) {
                    run.send(r, c, &partial_bytes(dtype, chunk))?;
                }
            }
        } else {
            for (c, chunk) in chunks.iter().enumerate().take(n).skip(pos) {
                run.wait_slot(c)?;
                let mut p = chunk.clone();
                add_bytes(&mut p, &run.read_slot(c, len)?);
                if c == pos {
                    from_left = Some(p);
                } else if let Some(r) = run.ep.right {
                    run.send(r, c, &partial_bytes(dtype, &p))?;
                }
            }
        }
        // Leftward stream: slots n..2n carry partial sums of chips i..n for chunks owned further left.
        let mut from_right: Option<Vec<u8>> = None;
        if run.ep.right.is_none() {
            if let Some(l) = run.ep.left {
                for c in (0..n - 1).rev() {
                    run.send(l, n + c, &partial_bytes(dtype, &chunks[c]))?;
                }
            }
        } else {
            for c in (0..=pos).rev() {
                run.wait_slot(n + c)?;
                let bytes = run.read_slot(n + c, len)?;
                if c == pos {
                    from_right = Some(bytes);
                } else if let Some(l) = run.ep.left {
                    let mut p = chunks[c].clone();
                    add_bytes(&mut p, &bytes);
                    run.send(l, n + c, &partial_bytes(dtype, &p))?;
                }
            }
        }
        let mut total = from_left.unwrap_or_else(|| chunks[pos].clone());
        if let Some(r) = from_right {
            add_bytes(&mut total, &r);
        }
        total
    };
    run.flush()?;
    write_logical(run.ctx, &k.output, addresses[2], &HostData::F32(result))
}

/// The reduction of an all_reduce straight from the input (slots `base..base + 2n`):
/// afterwards chunk `pos` holds the line's sum, added in the fixed order the crate docs give.
/// Ring: chunk `j` starts at position `j+1` and travels forward; each position adds its input
/// to the partial sums it received and sends them on. Line: partial sums of the left end
/// travel right (slots `base + c`), of the right end travel left (slots `base + n + c`), and
/// position `j` adds the two (its input plus the left's, then the right's).
pub(crate) fn fused_reduce_steps(
    topology: Topology,
    n: usize,
    pos: usize,
    base: usize,
    pieces: &[usize],
) -> Vec<Step> {
    let mut s = Vec::new();
    let reduce = |from: Option<usize>, chunk, to: Option<(Side, usize)>| {
        move |piece| Step::Reduce {
            from,
            chunk,
            piece,
            to,
        }
    };
    if n == 1 {
        each_piece(&mut s, pieces, 0, reduce(None, 0, None));
        return s;
    }
    if topology == Topology::Ring {
        for t in 0..n - 1 {
            let c = (pos + 2 * n - t - 1) % n;
            let from = (t > 0).then(|| base + t - 1);
            each_piece(
                &mut s,
                pieces,
                c,
                reduce(from, c, Some((Side::Right, base + t))),
            );
        }
        each_piece(&mut s, pieces, pos, reduce(Some(base + n - 2), pos, None));
        return s;
    }
    line_reduce_steps(n, pos, base, pieces)
}

/// The line's reduction at position `pos`, ordered by when each piece can be had. Partial
/// sums of the left end travel right (slots `base + c`) and of the right end travel left
/// (slots `base + n + c`); each end sends its farthest chunk first, so the longest chain
/// starts first, and a position takes its pieces in the order they reach it, from either
/// side: a step that waits for the left chain does not hold back a send the right end needs
/// (with the right end reducing before sending, line-2's two chips ran one after the other).
/// Which piece comes when changes no sum: each is added in the order the crate docs give.
fn line_reduce_steps(n: usize, pos: usize, base: usize, pieces: &[usize]) -> Vec<Step> {
    let (has_left, has_right) = (pos > 0, pos + 1 < n);
    // (ready, step): a piece's place in its end's sending order plus its hops to here.
    let mut timed: Vec<(usize, Step)> = Vec::new();
    // Rightward: chunks pos..n, farthest first, as the left end sends them.
    let mut sent_before = 0;
    for c in (pos..n).rev() {
        let from = has_left.then_some(base + c);
        let to = (c != pos).then_some((Side::Right, base + c));
        if c != pos || has_left {
            timed.extend((0..pieces[c]).map(|piece| {
                let step = Step::Reduce {
                    from,
                    chunk: c,
                    piece,
                    to,
                };
                (sent_before + piece + pos, step)
            }));
        }
        sent_before += pieces[c];
    }
    // Leftward: chunks 0..=pos, farthest first, as the right end sends them.
    let beyond: usize = pieces[pos + 1..].iter().sum();
    let own_right_ready = |piece: usize| beyond + piece + pos;
    let mut sent_before = 0;
    for (c, &count) in pieces.iter().enumerate().take(pos + 1) {
        let slot = base + n + c;
        let from = has_right.then_some(slot);
        let hops = n - 1 - pos;
        for piece in 0..count {
            let ready = sent_before + piece + hops;
            let step = if c != pos {
                Step::Reduce {
                    from,
                    chunk: c,
                    piece,
                    to: Some((Side::Left, slot)),
                }
            } else if has_right && has_left {
                // The chunk already holds its input plus the left's sums: after them.
                timed.push((
                    ready.max(own_right_ready(piece) + 1),
                    Step::AddPartial {
                        slot,
                        chunk: c,
                        piece,
                    },
                ));
                continue;
            } else if has_right {
                Step::Reduce {
                    from,
                    chunk: c,
                    piece,
                    to: None,
                }
            } else {
                continue;
            };
            timed.push((ready, step));
        }
        sent_before += count;
    }
    // At equal times a send goes first: a neighbour waits for it, and nothing waits for
    // this position's own sum. Stable: a slot's pieces stay in order.
    timed.sort_by_key(|&(ready, step)| (ready, step.sends().is_none()));
    timed.into_iter().map(|(_, step)| step).collect()
}
