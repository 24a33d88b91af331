//! What the two reductions (a page reduce_scatter and the one-kernel all_reduce) share: their
//! step plan's rewrites for bf16 (each chunk encoded as soon as it is summed, a line's middle
//! sums joined, the last hop added at delivery) and running the rewritten plan.

use ttmesh_chip::program::Launched;
use ttmesh_chip::tensor::DataType;
use ttmesh_chip::ChipError;

use crate::kernels::execute::{Side, Step};
use crate::kernels::step::neighbour_pos;
use crate::kernels::work::Work;
use crate::kernels::Run;
use crate::Topology;

/// Runs a fused reduction's step list, `build`'s steps with this chip's chunk encoded as its
/// pieces are summed; the list is built at the kernel's first launch and kept. The steps
/// write the whole output, so the launch may defer.
pub(crate) fn run_fused(
    run: &Run,
    w: &mut Work,
    build: impl Fn(usize) -> Vec<Step>,
) -> Result<Launched, ChipError> {
    let k = run.k;
    let steps = k.fused_steps.get_or_init(|| {
        let bf16_out = k.input.dtype == DataType::BFloat16 && k.output.dtype == DataType::BFloat16;
        let list = |pos| encode_when_summed(build(pos), pos, bf16_out);
        let steps = match k.adds_at_delivery {
            true => {
                let n = k.line.chips.len();
                let beside = |pos, side| neighbour_pos(k.topology, n, pos, side);
                reduce_at_delivery(k.pos, list, beside)
            }
            false => list(k.pos),
        };
        join_middle_sums(steps, k.pos)
    });
    run.run_steps(w, steps.clone(), k.topology != Topology::Ring, true)
}

/// Puts an `Encode` of each piece of chunk `own` right after the last step that adds into it,
/// so the sum is encoded while it is still in the host's cache. With `bf16_out` (bf16
/// partials and output), a last add that is a `Reduce` becomes a `ReduceOut` instead, and
/// one that is an `AddPartial` (a line's middle position) an `AddPartialOut`: each writes
/// the rounded sum straight to the output. (Moving this position's sends of the piece
/// up behind it as well, to start the gather early, measured slower on line-2.)
pub(crate) fn encode_when_summed(steps: Vec<Step>, own: usize, bf16_out: bool) -> Vec<Step> {
    let adds_to = |s: &Step| match *s {
        Step::Reduce {
            chunk, piece, to, ..
        } if chunk == own && to.is_none() => Some(piece),
        Step::AddPartial { chunk, piece, .. } if chunk == own => Some(piece),
        _ => None,
    };
    let mut last = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        if let Some(q) = adds_to(s) {
            if last.len() <= q {
                last.resize(q + 1, usize::MAX);
            }
            last[q] = i;
        }
    }
    let mut out = Vec::with_capacity(steps.len() + last.len());
    for (i, &s) in steps.iter().enumerate() {
        let Some(q) = adds_to(&s).filter(|&q| last[q] == i) else {
            out.push(s);
            continue;
        };
        match s {
            Step::Reduce { from, .. } if bf16_out => out.push(Step::ReduceOut {
                from,
                chunk: own,
                piece: q,
            }),
            Step::AddPartial { slot, .. } if bf16_out => out.push(Step::AddPartialOut {
                slot,
                chunk: own,
                piece: q,
            }),
            _ => out.extend([
                s,
                Step::Encode {
                    chunk: own,
                    piece: q,
                },
            ]),
        }
    }
    out
}

/// At a line's middle position with bf16 partials and output, the own chunk's first add
/// (`Reduce` of the input and the left's sums into the f32 chunk) and its last
/// (`AddPartialOut` of the right's) become one step when the second piece arrives: `Hold`
/// waits for the left's piece where the `Reduce` was, and `JoinOut` adds both where the
/// `AddPartialOut` was, in the same order, so the f32 sums never go to memory. Other lists
/// are returned as they are.
pub(crate) fn join_middle_sums(steps: Vec<Step>, own: usize) -> Vec<Step> {
    // Per piece of the own chunk: the slot its first add takes from the left, and whether a
    // last add from the right follows (only a middle position has both).
    let mut pieces: Vec<(Option<usize>, bool)> = Vec::new();
    fn piece_at(pieces: &mut Vec<(Option<usize>, bool)>, q: usize) -> &mut (Option<usize>, bool) {
        if pieces.len() <= q {
            pieces.resize(q + 1, (None, false));
        }
        &mut pieces[q]
    }
    for s in &steps {
        match *s {
            Step::Reduce {
                from: Some(slot),
                chunk,
                piece,
                to: None,
            } if chunk == own => piece_at(&mut pieces, piece).0 = Some(slot),
            Step::AddPartialOut { chunk, piece, .. } if chunk == own => {
                piece_at(&mut pieces, piece).1 = true
            }
            _ => {}
        }
    }
    let both = |q: usize| pieces.get(q).and_then(|&(l, joined)| l.filter(|_| joined));
    steps
        .into_iter()
        .map(|s| match s {
            Step::Reduce {
                from: Some(slot),
                chunk,
                piece,
                to: None,
            } if chunk == own && both(piece).is_some() => Step::Hold { slot },
            Step::AddPartialOut { slot, chunk, piece } if chunk == own => match both(piece) {
                Some(l) => Step::JoinOut {
                    left: l,
                    right: slot,
                    chunk,
                    piece,
                },
                None => s,
            },
            _ => s,
        })
        .collect()
}

/// Adds each bf16 chunk's last hop at delivery (`Step::ReduceInto`, see `into`): where
/// position `pos` sends a piece's sums to a neighbour whose list only adds them to its input
/// and writes the output (`ReduceOut` from that slot), this position does that add and write
/// itself; where it is that neighbour, it only waits for them (`AwaitOutput`). `list(p)` is
/// position `p`'s list after `encode_when_summed`, `neighbour(p, side)` the position beside
/// it. Each position computes its own list the same way, so the pairs agree.
pub(crate) fn reduce_at_delivery(
    pos: usize,
    list: impl Fn(usize) -> Vec<Step>,
    neighbour: impl Fn(usize, Side) -> Option<usize>,
) -> Vec<Step> {
    let beside = [Side::Left, Side::Right].map(|side| (side, neighbour(pos, side).map(&list)));
    let list_of = |side: Side| {
        beside
            .iter()
            .find(|b| b.0 == side)
            .and_then(|b| b.1.as_ref())
    };
    let back = |side| match side {
        Side::Left => Side::Right,
        Side::Right => Side::Left,
    };
    list(pos)
        .into_iter()
        .map(|step| match step {
            Step::Reduce {
                from,
                chunk,
                piece,
                to: Some((to, slot)),
            } => {
                let last = Step::ReduceOut {
                    from: Some(slot),
                    chunk,
                    piece,
                };
                match list_of(to).is_some_and(|l| l.contains(&last)) {
                    true => Step::ReduceInto {
                        from,
                        chunk,
                        piece,
                        to,
                        slot,
                    },
                    false => step,
                }
            }
            Step::ReduceOut {
                from: Some(slot),
                chunk,
                piece,
            } => {
                let fed = |side: Side| {
                    list_of(side).is_some_and(|l| {
                        l.iter().any(|s| {
                            matches!(*s, Step::Reduce { chunk: c, piece: q, to: Some((t, sl)), .. }
                                if c == chunk && q == piece && t == back(side) && sl == slot)
                        })
                    })
                };
                match fed(Side::Left) || fed(Side::Right) {
                    true => Step::AwaitOutput { slot },
                    false => step,
                }
            }
            _ => step,
        })
        .collect()
}
