//! The algorithms as step lists: what line position `pos` of `n` does, in order. Every list is
//! written per *piece*: chunk (or block) `j` moves in `pieces[j]` pieces, each its own fabric
//! message and semaphore increment, so a receiver starts on piece 0 while piece 1 is on the
//! way, and each piece is summed, sent and written while it is still in the host's cache.
//! Slot `s` receives its pieces in order (one link per slot), and a receive of piece `q`
//! waits for one increment, so the count of increments says which piece has landed.

use super::steps::{Side, Step};
use crate::Topology;

/// Every piece of chunk `c`, as steps made by `f(piece)`.
fn each_piece(s: &mut Vec<Step>, pieces: &[usize], c: usize, f: impl Fn(usize) -> Step) {
    s.extend((0..pieces[c]).map(f));
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
    let (has_left, has_right) = (pos > 0, pos + 1 < n);
    // Rightward: partial sums of positions 0..=pos for the chunks of pos and further right
    // (the left end starts them from its input alone).
    for c in pos..n {
        let from = has_left.then_some(base + c);
        if c != pos {
            each_piece(
                &mut s,
                pieces,
                c,
                reduce(from, c, Some((Side::Right, base + c))),
            );
        } else if has_left {
            each_piece(&mut s, pieces, c, reduce(from, c, None));
        }
    }
    // Leftward: partial sums of positions pos..n for the chunks of pos and further left.
    for c in (0..=pos).rev() {
        let slot = base + n + c;
        let from = has_right.then_some(slot);
        if c != pos {
            each_piece(&mut s, pieces, c, reduce(from, c, Some((Side::Left, slot))));
        } else if has_right && has_left {
            // The chunk already holds its input plus the left's sums.
            each_piece(&mut s, pieces, c, |piece| Step::AddPartial {
                slot,
                chunk: c,
                piece,
            });
        } else if has_right {
            each_piece(&mut s, pieces, c, reduce(from, c, None));
        }
    }
    s
}

/// Puts an `Encode` of each piece of chunk `own` right after the last step that adds into it,
/// so the sum is encoded while it is still in the host's cache. With `bf16_out` (bf16
/// partials and output), a last add that is a `Reduce` becomes a `ReduceOut` instead, which
/// writes the rounded sum straight to the output. (Moving this position's sends of the piece
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

/// The gather steps of line position `pos` (slots `base..base + n`): block `pos` is this
/// position's; afterwards every block `j` holds position `j`'s. A block received is passed
/// on piece by piece as its pieces land. `direct`: blocks move between the chips' outputs
/// (`PassOutput`, `AwaitOutput`; slots only name semaphores), else through the slots into
/// the work's blocks.
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
            false => Step::SendBlock {
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
    let (has_left, has_right) = (pos > 0, pos + 1 < n);
    for q in 0..pieces[pos] {
        if has_right {
            s.push(send(Side::Right, pos, q));
        }
        if has_left {
            s.push(send(Side::Left, pos, q));
        }
    }
    // Blocks from the left arrive nearest first; pass each on to the right, and back.
    for c in (0..pos).rev() {
        for q in 0..pieces[c] {
            s.push(take(c, q));
            if has_right {
                s.push(send(Side::Right, c, q));
            }
        }
    }
    for (c, &count) in pieces.iter().enumerate().skip(pos + 1) {
        for q in 0..count {
            s.push(take(c, q));
            if has_left {
                s.push(send(Side::Left, c, q));
            }
        }
    }
    s
}
