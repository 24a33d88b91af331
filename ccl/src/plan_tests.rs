//! The three collectives' step plans checked together: every list ends, pipelines, and
//! takes and sends each slot's pieces in order.
use std::collections::HashMap;

use crate::all_gather::gather_steps;
use crate::kernels::execute::{Side, Step};
use crate::kernels::step::neighbour_pos;
use crate::reduce_scatter::fused_reduce_steps;
use crate::reduction::{encode_when_summed, join_middle_sums, reduce_at_delivery};
use crate::Topology;

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
fn simulate(n: usize, per: usize, list: impl Fn(usize, &[usize]) -> Vec<Step>) -> (usize, usize) {
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
