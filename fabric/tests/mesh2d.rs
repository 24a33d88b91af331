//! The 2D fabric: dimension-ordered routes (column first, then row, as tt-metal's 2D fabric
//! orders them) over a mesh and over torus wrap links, checked against paths worked out here
//! from grid coordinates, with every packet's arrival, link statistics and faults.

mod common;

use common::{open, pattern, LogMemory};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use ttmesh_fabric::*;

const T: Duration = Duration::from_secs(30);

fn grid(rows: u32, cols: u32, lpp: u32, wraps: (bool, bool), config: FabricConfig) -> FabricSpec {
    let mut s = FabricSpec::mesh(rows, cols, lpp, wraps, config);
    s.timeout = T;
    s
}

/// One step from `a` toward `b` on a line of `n` (a ring if `wrap`: the shorter way, ties
/// toward higher indices).
fn toward(n: u32, a: u32, b: u32, wrap: bool) -> u32 {
    let up = if wrap {
        let f = (b + n - a) % n;
        f <= n - f
    } else {
        b > a
    };
    if up {
        (a + 1) % n
    } else {
        (a + n - 1) % n
    }
}

/// The chips from `src` to `dst`: along the source's column to the destination's row, then
/// along that row (chips numbered row-major).
fn column_then_row(rows: u32, cols: u32, (wx, wy): (bool, bool), src: u32, dst: u32) -> Vec<u32> {
    let (mut r, mut c) = (src / cols, src % cols);
    let (r2, c2) = (dst / cols, dst % cols);
    let mut chips = vec![src];
    while r != r2 {
        r = toward(rows, r, r2, wy);
        chips.push(r * cols + c);
    }
    while c != c2 {
        c = toward(cols, c, c2, wx);
        chips.push(r * cols + c);
    }
    chips
}

/// Links crossed per (from, to), taking parallel link `k % links` between each pair.
fn expected_links(spec: &FabricSpec, chips: &[u32], k: usize) -> Vec<(usize, LinkDirection)> {
    chips
        .windows(2)
        .map(|w| {
            let joining: Vec<usize> = (0..spec.links.len())
                .filter(|&i| spec.links[i].joins(w[0], w[1]))
                .collect();
            let i = joining[k % joining.len()];
            let dir = if spec.links[i].a.0 == w[0] {
                LinkDirection::AToB
            } else {
                LinkDirection::BToA
            };
            (i, dir)
        })
        .collect()
}

fn packets_by_link(f: &Fabric) -> HashMap<(usize, LinkDirection), (u64, u64)> {
    f.link_stats()
        .into_iter()
        .map(|s| ((s.link_index, s.direction), (s.packets, s.payload_bytes)))
        .collect()
}

/// Every ordered pair of chips, one message at a time: the route is the column-then-row path
/// worked out above, the bytes and the increment land at the destination, and exactly the
/// links of that path count the message's packets and bytes.
fn every_pair_follows_the_rule_and_arrives(
    rows: u32,
    cols: u32,
    wraps: (bool, bool),
    config: FabricConfig,
) {
    let lpp = 2;
    let spec = grid(rows, cols, lpp, wraps, config);
    let (f, mems) = open(spec.clone());
    let n = rows * cols;
    let payload = spec.params.default_payload_bytes as u64;
    for src in 0..n {
        for dst in (0..n).filter(|&d| d != src) {
            let want = column_then_row(rows, cols, wraps, src, dst);
            let got = f.route_chips(src, dst).unwrap();
            assert_eq!(got, want, "{config} {rows}x{cols}: route {src} -> {dst}");
            assert_eq!(f.route(src, dst).unwrap().hops as usize, want.len() - 1);
            // 1 to 3 packets; the parallel link asked for varies too.
            let len = 1 + ((src * 131 + dst * 17) % 3) as usize * 4000 + (dst % 7) as usize;
            let k = ((src + dst) % 3) as usize;
            let data = pattern((src * n + dst) as u64, len);
            let before = packets_by_link(&f);
            let tx = f.sender(src).unwrap().with_link(k);
            tx.write_and_inc(dst, NocAddr::l1(src, 64), &data, 9, 1)
                .unwrap();
            tx.flush().unwrap();
            f.wait_semaphore(dst, 9, 1, T).unwrap();
            assert_eq!(mems[dst as usize].read(NocAddr::l1(src, 64), len), data);
            let after = packets_by_link(&f);
            let crossed = expected_links(&spec, &want, k);
            let packets = (len as u64).div_ceil(payload);
            for (key, now) in &after {
                let was = before[key];
                let diff = (now.0 - was.0, now.1 - was.1);
                let want = match crossed.contains(key) {
                    true => (packets, len as u64),
                    false => (0, 0),
                };
                assert_eq!(
                    diff, want,
                    "{config}: {src} -> {dst} over {:?}: link {} {:?}",
                    want, key.0, key.1
                );
            }
        }
    }
    // Nothing landed anywhere else: each chip holds exactly the n-1 messages sent to it.
    for (d, m) in mems.iter().enumerate() {
        // (messages of several packets may land packet by packet, past address 64)
        assert!(m
            .writes()
            .iter()
            .all(|w| w.0.addr >= 64 && w.0.bank != d as u32));
        let sources: std::collections::HashSet<u32> = m.writes().iter().map(|w| w.0.bank).collect();
        assert_eq!(sources.len() as u32, n - 1, "chip {d}");
    }
    for s in f.link_stats() {
        assert_eq!(s.dropped + s.corrupted, 0);
        assert_eq!(s.bytes, s.payload_bytes + s.packets * 32);
    }
    f.shutdown().unwrap();
}

#[test]
fn galaxy_mesh_routes_column_then_row() {
    every_pair_follows_the_rule_and_arrives(4, 8, (false, false), FabricConfig::Fabric2D);
}

#[test]
fn galaxy_torus_routes_column_then_row_the_short_way_round() {
    every_pair_follows_the_rule_and_arrives(4, 8, (true, true), FabricConfig::Fabric2DTorusXY);
}

#[test]
fn galaxy_torus_on_one_axis_wraps_only_that_axis() {
    // The grid has wrap links on both axes; each config uses only its own.
    every_pair_follows_the_rule_and_arrives(4, 8, (true, false), FabricConfig::Fabric2DTorusX);
    every_pair_follows_the_rule_and_arrives(4, 8, (false, true), FabricConfig::Fabric2DTorusY);
    let spec = grid(4, 8, 1, (true, true), FabricConfig::Fabric2DTorusY);
    let (f, _) = open(spec);
    // Row 0, column 0 to column 7: a torus on Y only goes the long way along the row.
    assert_eq!(f.route_chips(0, 7).unwrap(), (0..8).collect::<Vec<_>>());
    // Column 0, row 0 to row 3: one hop over the column's wrap link.
    assert_eq!(f.route_chips(0, 24).unwrap(), vec![0, 24]);
}

#[test]
fn t3k_mesh_routes_column_then_row() {
    every_pair_follows_the_rule_and_arrives(2, 4, (false, false), FabricConfig::Fabric2D);
}

/// Every chip sends to every other chip at once through 2-slot channels, on a mesh and on a
/// torus: without dimension order (mesh) and the datelines (torus) the full channels could
/// wait on each other in a cycle and the sends would time out.
#[test]
fn all_to_all_under_full_load_does_not_deadlock() {
    for (wraps, config) in [
        ((false, false), FabricConfig::Fabric2D),
        ((true, true), FabricConfig::Fabric2DTorusXY),
    ] {
        let (rows, cols) = (4, 8);
        let mut spec = grid(rows, cols, 1, wraps, config);
        spec.channel_slots = 2;
        let (f, mems) = open(spec);
        let f = Arc::new(f);
        let n = rows * cols;
        let len = 3 * 1024;
        let threads: Vec<_> = (0..n)
            .map(|src| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let tx = f.sender(src).unwrap().with_payload_size(512).unwrap();
                    for i in 1..n {
                        let dst = (src + i) % n;
                        let data = pattern((src * n + dst) as u64, len);
                        tx.write_and_inc(dst, NocAddr::dram(src, 0), &data, 3, 1)
                            .unwrap();
                    }
                    tx.flush().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().expect("sender");
        }
        for dst in 0..n {
            f.wait_semaphore(dst, 3, (n - 1) as u64, T).unwrap();
            for src in (0..n).filter(|&s| s != dst) {
                let want = pattern((src * n + dst) as u64, len);
                assert_eq!(mems[dst as usize].read(NocAddr::dram(src, 0), len), want);
            }
        }
        f.shutdown().unwrap();
    }
}

fn link_between(spec: &FabricSpec, a: u32, b: u32) -> usize {
    spec.links.iter().position(|l| l.joins(a, b)).unwrap()
}

/// A link down on either leg (the column, then the row after the turn) ends the send with
/// the error naming that link, as in 1D; a dropped packet on the row leg fails the flush and
/// the destination's wait naming it; corruption on a column link is caught by the checksum.
#[test]
fn a_fault_on_either_dimension_names_the_link() {
    let spec = grid(4, 8, 1, (false, false), FabricConfig::Fabric2D);
    let (f, mems) = open(spec.clone());
    // Chip 1 (row 0, col 1) to chip 29 (row 3, col 5): 1 -> 9 -> 17 -> 25, then 26 .. 29.
    assert_eq!(
        f.route_chips(1, 29).unwrap(),
        vec![1, 9, 17, 25, 26, 27, 28, 29]
    );
    let tx = f.sender(1).unwrap();
    let data = pattern(5, 10_000);
    let at = NocAddr::dram(0, 0);
    for (a, b) in [(9, 17), (27, 28)] {
        let l = link_between(&spec, a, b);
        f.inject(l, Fault::Down).unwrap();
        let e = tx.write_and_inc(29, at, &data, 4, 1).unwrap_err();
        assert_eq!(
            e,
            FabricError::LinkDown {
                link: spec.links[l].to_string(),
                src: 1,
                dst: 29
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "link {} is down: packet from chip 1 to chip 29 not delivered",
                spec.links[l]
            )
        );
        let w = f.wait_semaphore(29, 4, 1, T).unwrap_err().to_string();
        assert!(
            w.contains(&format!("link {} is down", spec.links[l])),
            "{w}"
        );
        f.clear_fault(l).unwrap();
        f.reset_semaphores(29).unwrap();
    }
    // Dropped on the row leg, after the turn.
    let l = link_between(&spec, 26, 27);
    f.inject(l, Fault::Drop { every_nth: 1 }).unwrap();
    tx.write_and_inc(29, at, &data, 4, 1).unwrap();
    let e = tx.flush().unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("link {} dropped packet", spec.links[l]))
            && e.contains("from chip 1 to chip 29"),
        "{e}"
    );
    let w = f.wait_semaphore(29, 4, 1, T).unwrap_err().to_string();
    assert!(
        w.contains(&format!("link {} dropped", spec.links[l])),
        "{w}"
    );
    let dropped: u64 = f
        .link_stats()
        .iter()
        .filter(|s| s.link_index == l)
        .map(|s| s.dropped)
        .sum();
    assert_eq!(dropped, 3);
    f.clear_fault(l).unwrap();
    f.reset_semaphores(29).unwrap();
    // Corrupted on the column leg: caught at the far end of that link.
    let l = link_between(&spec, 9, 17);
    f.inject(l, Fault::Corrupt { every_nth: 1 }).unwrap();
    tx.write_and_inc(29, at, &data, 4, 1).unwrap();
    let e = tx.flush().unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("link {} corrupted packet", spec.links[l]))
            && e.contains("detected at chip 17"),
        "{e}"
    );
    f.clear_fault(l).unwrap();
    f.reset_semaphores(29).unwrap();
    // Healthy again: the message arrives whole.
    tx.write_and_inc(29, at, &data, 4, 1).unwrap();
    tx.flush().unwrap();
    f.wait_semaphore(29, 4, 1, T).unwrap();
    assert_eq!(mems[29].read(at, data.len()), data);
    f.shutdown().unwrap();
}

/// Line multicasts along a row or a column need no turn: they work on a 2D fabric as in 1D.
#[test]
fn line_multicast_along_a_row_and_a_column() {
    let spec = grid(4, 8, 1, (false, false), FabricConfig::Fabric2D);
    let (f, mems) = open(spec.clone());
    let row0 = spec
        .axes
        .iter()
        .position(|a| a.chips == (0..8).collect::<Vec<_>>())
        .unwrap();
    let col0 = spec
        .axes
        .iter()
        .position(|a| a.chips == vec![0, 8, 16, 24])
        .unwrap();
    let tx = f.sender(0).unwrap();
    let data = pattern(11, 5000);
    let at = NocAddr::l1(2, 0);
    for (axis, start, range) in [(row0, 2, 4), (col0, 1, 3)] {
        let line = LineDir {
            axis,
            dir: Dir::Forward,
        };
        tx.multicast_write(line, start, range, at, &data, Some((6, 1)))
            .unwrap();
    }
    tx.flush().unwrap();
    let written: Vec<u32> = (2..6).chain([8, 16, 24]).collect();
    for c in 0..32u32 {
        let m: &Arc<LogMemory> = &mems[c as usize];
        if written.contains(&c) {
            f.wait_semaphore(c, 6, 1, T).unwrap();
            assert_eq!(m.read(at, data.len()), data, "chip {c}");
        } else {
            assert!(m.writes().is_empty(), "chip {c} was written");
        }
    }
    f.shutdown().unwrap();
}

#[test]
fn a_route_longer_than_the_header_is_refused() {
    // 9 rows and 9 columns: corner to corner is 8 + 8 hops and a turn: 17 codes.
    let spec = grid(9, 9, 1, (false, false), FabricConfig::Fabric2D);
    let (f, _) = open(spec);
    let e = f.sender(0).unwrap().atomic_inc(80, 1, 1).unwrap_err();
    assert_eq!(
        e,
        FabricError::RouteTooLong {
            src: 0,
            dst: 80,
            hops: 16
        }
    );
    // 15 codes fit.
    assert_eq!(f.route(0, 79).unwrap().hops, 15);
    f.sender(0).unwrap().atomic_inc(79, 1, 1).unwrap();
    f.wait_semaphore(79, 1, 1, T).unwrap();
}

/// On a torus the wrap links carry routes too: a fault there is named like any other.
#[test]
fn a_fault_on_a_torus_wrap_link_names_it() {
    let spec = grid(4, 8, 1, (true, true), FabricConfig::Fabric2DTorusXY);
    let (f, _) = open(spec.clone());
    let data = pattern(3, 9000);
    let at = NocAddr::dram(0, 0);
    // Chip 0 to chip 31: one hop up the column's wrap (0 -> 24), then one along the row's
    // wrap (24 -> 31).
    assert_eq!(f.route_chips(0, 31).unwrap(), vec![0, 24, 31]);
    let tx = f.sender(0).unwrap();
    let col_wrap = link_between(&spec, 0, 24);
    f.inject(col_wrap, Fault::Down).unwrap();
    let e = tx.write_and_inc(31, at, &data, 2, 1).unwrap_err();
    assert_eq!(
        e,
        FabricError::LinkDown {
            link: spec.links[col_wrap].to_string(),
            src: 0,
            dst: 31
        }
    );
    f.clear_fault(col_wrap).unwrap();
    f.reset_semaphores(31).unwrap();
    let row_wrap = link_between(&spec, 24, 31);
    f.inject(row_wrap, Fault::Drop { every_nth: 2 }).unwrap();
    tx.write_and_inc(31, at, &data, 2, 1).unwrap();
    let e = tx.flush().unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("link {} dropped packet", spec.links[row_wrap])),
        "{e}"
    );
    f.shutdown().unwrap();
}

/// Abort, recover and shutdown with 2D traffic in flight: recover drains every channel (both
/// virtual channels of the torus rings included) and the fabric works again; shutdown ends
/// while senders still send.
#[test]
fn recover_and_shutdown_with_2d_traffic_in_flight() {
    let mut spec = grid(4, 8, 1, (true, true), FabricConfig::Fabric2DTorusXY);
    spec.channel_slots = 2;
    let (f, mems) = open(spec);
    let f = Arc::new(f);
    let n = 32u32;
    let send_all = |f: &Arc<Fabric>| -> Vec<std::thread::JoinHandle<()>> {
        (0..n)
            .map(|src| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let Ok(tx) = f.sender(src) else { return };
                    for i in 1..n {
                        let dst = (src + i) % n;
                        let data = pattern((src * n + dst) as u64, 6000);
                        // Errors are expected once the fabric aborts or shuts down.
                        if tx
                            .write_and_inc(dst, NocAddr::dram(src, 0), &data, 8, 1)
                            .is_err()
                        {
                            return;
                        }
                    }
                    let _ = tx.flush();
                })
            })
            .collect()
    };
    let senders = send_all(&f);
    f.abort(
        0,
        FabricError::KernelFailed {
            chip: 0,
            reason: "test".into(),
        },
    );
    for t in senders {
        t.join().expect("sender");
    }
    let e = f.sender(3).unwrap().atomic_inc(4, 8, 1).unwrap_err();
    assert!(matches!(e, FabricError::Aborted { chip: 0, .. }), "{e}");
    f.recover(T).unwrap();
    for c in 0..n {
        assert_eq!(f.semaphore_value(c, 8).unwrap(), 0);
    }
    // Working again: one full round, checked.
    for t in send_all(&f) {
        t.join().expect("sender");
    }
    for dst in 0..n {
        f.wait_semaphore(dst, 8, (n - 1) as u64, T).unwrap();
        for src in (0..n).filter(|&s| s != dst) {
            let want = pattern((src * n + dst) as u64, 6000);
            assert_eq!(mems[dst as usize].read(NocAddr::dram(src, 0), 6000), want);
        }
    }
    // Shut down mid-traffic: it ends, and the senders end with it.
    let senders = send_all(&f);
    let t0 = std::time::Instant::now();
    f.shutdown().unwrap();
    for t in senders {
        t.join().expect("sender");
    }
    assert!(t0.elapsed() < Duration::from_secs(15));
}
