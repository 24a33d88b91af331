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

/// The position beside `pos` on a line of `n` (a ring wraps round).
pub(crate) fn neighbour_pos(topology: Topology, n: usize, pos: usize, side: Side) -> Option<usize> {
    match (topology, side) {
        (Topology::Ring, Side::Left) => Some((pos + n - 1) % n),
        (Topology::Ring, Side::Right) => Some((pos + 1) % n),
        (Topology::Linear, Side::Left) => pos.checked_sub(1),
        (Topology::Linear, Side::Right) => (pos + 1 < n).then_some(pos + 1),
    }
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Runs every position's list with each step taking one unit of time and a receive
    /// starting once its piece was sent: the time the line takes, or None if it never ends.
    /// (A line's ends never send outward, so the ring's neighbours serve both.)
    fn makespan(lists: &[Vec<Step>]) -> Option<usize> {
        let n = lists.len();
        let neighbour = |p: usize, side: Side| match side {
            Side::Right => (p + 1) % n,
            Side::Left => (p + n - 1) % n,
        };
        let (mut pc, mut clock) = (vec![0; n], vec![0; n]);
        let mut sent: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
        let mut taken: HashMap<(usize, usize), usize> = HashMap::new();
        loop {
            let mut moved = false;
            for p in 0..n {
                while let Some(step) = lists[p].get(pc[p]) {
                    let mut start = clock[p];
                    if let Some(slot) = step.receives() {
                        let k = taken.entry((p, slot)).or_default();
                        match sent.get(&(p, slot)).and_then(|t| t.get(*k)) {
                            Some(&t) => start = start.max(t),
                            None => break,
                        }
                        *k += 1;
                    }
                    clock[p] = start + 1;
                    if let Some((side, slot)) = step.sends() {
                        sent.entry((neighbour(p, side), slot))
                            .or_default()
                            .push(clock[p]);
                    }
                    pc[p] += 1;
                    moved = true;
                }
            }
            if (0..n).all(|p| pc[p] == lists[p].len()) {
                return clock.into_iter().max();
            }
            if !moved {
                return None;
            }
        }
    }

    /// Each slot's pieces are taken, and sent, in order; a middle position adds the right's
    /// sums into its own chunk only after its input and the left's are in it.
    fn check_order(n: usize, pos: usize, list: &[Step]) {
        let mut next_in: HashMap<usize, usize> = HashMap::new();
        let mut next_out: HashMap<(Side, usize), usize> = HashMap::new();
        let mut own_summed = std::collections::HashSet::new();
        for step in list {
            if let Some(slot) = step.receives() {
                let k = next_in.entry(slot).or_default();
                let q = step.piece().unwrap_or(*k);
                assert_eq!(q, *k, "n {n} pos {pos}: slot {slot} out of order");
                *k += 1;
            }
            if let Some((side, slot)) = step.sends() {
                let k = next_out.entry((side, slot)).or_default();
                assert_eq!(
                    step.piece(),
                    Some(*k),
                    "n {n} pos {pos}: send {slot} out of order"
                );
                *k += 1;
            }
            match *step {
                Step::Reduce {
                    chunk,
                    piece,
                    to: None,
                    ..
                } if chunk == pos => {
                    own_summed.insert(piece);
                }
                Step::AddPartial { piece, .. } | Step::AddPartialOut { piece, .. } => {
                    assert!(
                        own_summed.contains(&piece),
                        "n {n} pos {pos}: added before summed"
                    )
                }
                _ => {}
            }
        }
    }

    /// Every position's list for `n` chips and `per` pieces a chunk, each checked for order:
    /// the busiest position's step count and the time the line takes (`makespan`).
    fn simulate(
        n: usize,
        per: usize,
        list: impl Fn(usize, &[usize]) -> Vec<Step>,
    ) -> (usize, usize) {
        simulate_pieces(&vec![per; n], list)
    }

    fn simulate_pieces(
        pieces: &[usize],
        list: impl Fn(usize, &[usize]) -> Vec<Step>,
    ) -> (usize, usize) {
        let n = pieces.len();
        let lists: Vec<Vec<Step>> = (0..n).map(|pos| list(pos, pieces)).collect();
        for (pos, list) in lists.iter().enumerate() {
            check_order(n, pos, list);
        }
        let busiest = lists.iter().map(Vec::len).max().unwrap();
        let took = makespan(&lists).expect("the lists wait on each other forever");
        (busiest, took)
    }

    #[test]
    fn line_reductions_start_every_chain_at_once() {
        for n in 2..=6 {
            for per in 1..=3 {
                let (busiest, took) = simulate(n, per, |pos, pieces| {
                    fused_reduce_steps(Topology::Linear, n, pos, 0, pieces)
                });
                // The busiest position's steps plus the two chains' fill, which meet in the
                // middle. Taking one chain after the other (the right end reducing before it
                // sent) took 2 (line-2: twice the time) to 17 (6 chips, 3 pieces) units more.
                let fill = (n - 1) / 2;
                assert!(took <= busiest + fill, "n {n}, {per} pieces: {took}");
            }
        }
    }

    #[test]
    fn ring_reductions_pipeline_fully() {
        for n in 2..=8 {
            for per in 1..=3 {
                let (busiest, took) = simulate(n, per, |pos, pieces| {
                    fused_reduce_steps(Topology::Ring, n, pos, 0, pieces)
                });
                assert_eq!(took, busiest, "n {n}, {per} pieces");
            }
        }
    }

    #[test]
    fn gathers_take_blocks_as_they_come() {
        for topology in [Topology::Linear, Topology::Ring] {
            for n in 2..=6 {
                for per in 1..=3 {
                    let (busiest, took) = simulate(n, per, |pos, pieces| {
                        gather_steps(topology, n, pos, 0, pieces, true)
                    });
                    // A ring pipelines fully. On a line the middle positions pass blocks both
                    // ways; taking all of the left's before any of the right's took 4 more on
                    // 6 chips.
                    let fill = if topology == Topology::Ring { 0 } else { n - 1 };
                    assert!(
                        took <= busiest + fill,
                        "{topology:?} n {n}, {per} pieces: {took}"
                    );
                }
            }
        }
    }

    /// Through the slots, a position sends only its own block from its work (`SendBlock`);
    /// every other block it forwards from the slot it landed in, after taking it there.
    #[test]
    fn slot_gathers_forward_received_blocks_from_their_slots() {
        for topology in [Topology::Linear, Topology::Ring] {
            for n in 2..=6 {
                for pos in 0..n {
                    let list = gather_steps(topology, n, pos, 0, &vec![2; n], false);
                    let mut taken = std::collections::HashSet::new();
                    for step in &list {
                        match *step {
                            Step::SendBlock { block, .. } => assert_eq!(block, pos),
                            Step::TakeBlock { slot, block, piece } => {
                                assert_eq!(slot, block);
                                taken.insert((block, piece));
                            }
                            Step::PassSlot {
                                slot, block, piece, ..
                            } => {
                                assert_eq!(slot, block);
                                assert!(taken.contains(&(block, piece)), "{topology:?} n {n}");
                            }
                            other => panic!("unexpected step {other:?}"),
                        }
                    }
                    assert_eq!(taken.len(), 2 * (n - 1), "{topology:?} n {n} pos {pos}");
                }
                // And the lists pipeline as the direct gather's do.
                let (busiest, took) = simulate(n, 2, |pos, pieces| {
                    gather_steps(topology, n, pos, 0, pieces, false)
                });
                let fill = if topology == Topology::Ring { 0 } else { n - 1 };
                assert!(took <= busiest + fill, "{topology:?} n {n}: {took}");
            }
        }
    }

    /// Chunks of different piece counts (a tensor whose pages do not split evenly; none at
    /// all when there are fewer pages than chips): every list still ends, in order.
    #[test]
    fn uneven_chunks_still_end() {
        for n in 1..=6 {
            for shift in 0..3 {
                let pieces: Vec<usize> = (0..n).map(|c| (c + shift) % 3).collect();
                for topology in [Topology::Linear, Topology::Ring] {
                    simulate_pieces(&pieces, |pos, p| fused_reduce_steps(topology, n, pos, 0, p));
                    simulate_pieces(&pieces, |pos, p| gather_steps(topology, n, pos, 0, p, true));
                }
            }
        }
    }
    /// A line's middle positions join their own chunk's two sides in one step
    /// (`join_middle_sums`): each `AddPartialOut` becomes a `JoinOut` of the same piece that
    /// reads the slot its `Reduce` (now a `Hold`, where it was) took from the left; nothing
    /// else changes, rings and line ends not at all, and every line still ends in order.
    #[test]
    fn middle_sums_join_when_both_sides_arrive() {
        for topology in [Topology::Linear, Topology::Ring] {
            for n in 1..=8 {
                for shift in 0..3 {
                    let pieces: Vec<usize> = (0..n).map(|c| (c + shift) % 3).collect();
                    let plain = |pos: usize| {
                        let mut s = fused_reduce_steps(topology, n, pos, 0, &pieces);
                        s.extend(gather_steps(topology, n, pos, 2 * n, &pieces, true));
                        encode_when_summed(s, pos, true)
                    };
                    let joined = |pos: usize| join_middle_sums(plain(pos), pos);
                    simulate_pieces(&pieces, |pos, _| joined(pos));
                    for (pos, &count) in pieces.iter().enumerate() {
                        let (before, after) = (plain(pos), joined(pos));
                        let middle = topology == Topology::Linear && pos > 0 && pos + 1 < n;
                        if !middle || count == 0 {
                            assert_eq!(before, after, "{topology:?} n {n} pos {pos}");
                            continue;
                        }
                        assert_eq!(before.len(), after.len());
                        let mut holds = Vec::new();
                        let mut joins = Vec::new();
                        for (&b, &a) in before.iter().zip(&after) {
                            match (b, a) {
                                (
                                    Step::Reduce {
                                        from: Some(l),
                                        chunk,
                                        piece,
                                        to: None,
                                    },
                                    Step::Hold { slot },
                                ) => {
                                    assert_eq!((chunk, l), (pos, slot));
                                    holds.push((piece, l));
                                }
                                (
                                    Step::AddPartialOut { slot, chunk, piece },
                                    Step::JoinOut {
                                        left,
                                        right,
                                        chunk: c,
                                        piece: q,
                                    },
                                ) => {
                                    assert_eq!((slot, chunk, piece), (right, c, q));
                                    joins.push((piece, left));
                                }
                                _ => assert_eq!(b, a, "n {n} pos {pos}: only the joins change"),
                            }
                        }
                        let all: Vec<(usize, usize)> = (0..count).map(|q| (q, pos)).collect();
                        assert_eq!(holds, all, "n {n} pos {pos}: one hold per piece");
                        assert_eq!(joins, all, "n {n} pos {pos}: one join per piece");
                    }
                }
            }
        }
    }

    /// Each bf16 chunk's last hop moves to its sender (`reduce_at_delivery`): every owner's
    /// `ReduceOut` from a slot becomes a wait answered by its neighbour's `ReduceInto` of the
    /// same piece, nothing else changes, and every line still ends with its steps in order.
    #[test]
    fn last_hops_added_at_delivery_pair_up() {
        for topology in [Topology::Linear, Topology::Ring] {
            for n in 2..=8 {
                for shift in 0..3 {
                    let pieces: Vec<usize> = (0..n).map(|c| 1 + (c + shift) % 3).collect();
                    let plain = |pos: usize| {
                        let mut s = fused_reduce_steps(topology, n, pos, 0, &pieces);
                        s.extend(gather_steps(topology, n, pos, 2 * n, &pieces, true));
                        encode_when_summed(s, pos, true)
                    };
                    let beside = |p, side| neighbour_pos(topology, n, p, side);
                    let moved = |pos: usize| reduce_at_delivery(pos, plain, beside);
                    simulate_pieces(&pieces, |pos, _| moved(pos));
                    let (mut into, mut awaited) = (Vec::new(), Vec::new());
                    for pos in 0..n {
                        let (before, after) = (plain(pos), moved(pos));
                        assert_eq!(before.len(), after.len());
                        for (&b, &a) in before.iter().zip(&after) {
                            match (b, a) {
                                (
                                    Step::ReduceOut {
                                        from: Some(slot), ..
                                    },
                                    Step::AwaitOutput { slot: s },
                                ) => {
                                    assert_eq!(slot, s);
                                    awaited.push((pos, slot, b));
                                }
                                (
                                    Step::Reduce {
                                        from,
                                        chunk,
                                        piece,
                                        to: Some((to, slot)),
                                    },
                                    Step::ReduceInto {
                                        from: f,
                                        chunk: c,
                                        piece: q,
                                        to: t,
                                        slot: s,
                                    },
                                ) => {
                                    assert_eq!((from, chunk, piece, to, slot), (f, c, q, t, s));
                                    let owner = beside(pos, to).unwrap();
                                    let last = Step::ReduceOut {
                                        from: Some(slot),
                                        chunk,
                                        piece,
                                    };
                                    into.push((owner, slot, last));
                                }
                                _ => assert_eq!(b, a, "{topology:?} n {n} pos {pos}"),
                            }
                        }
                        let end = topology == Topology::Ring || pos == 0 || pos + 1 == n;
                        let left = after
                            .iter()
                            .any(|s| matches!(s, Step::ReduceOut { from: Some(_), .. }));
                        assert!(!(end && left), "{topology:?} n {n} pos {pos}: {after:?}");
                    }
                    into.sort_by_key(|&(p, s, st)| (p, s, format!("{st:?}")));
                    awaited.sort_by_key(|&(p, s, st)| (p, s, format!("{st:?}")));
                    assert_eq!(into, awaited, "{topology:?} n {n}");
                    assert!(!into.is_empty(), "{topology:?} n {n}");
                }
            }
        }
    }
}
