//! Properties: random unicast and multicast traffic on random lines and rings arrives exactly
//! once, intact, in order per (source, destination, path); semaphores and link statistics
//! add up exactly; a ring under full load with 2-slot channels finishes (no deadlock).

mod common;

use common::{open, pattern, LogMemory};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use ttmesh_fabric::*;

const SLOT_STRIDE: u64 = 2048;
const SEM_BASE: u32 = 1000;

#[derive(Debug, Clone)]
enum Kind {
    Uni { dst: u32, link: usize },
    Multi { dir: Dir, start: u32, range: u32 },
}

#[derive(Debug, Clone)]
struct Op {
    src: u32,
    kind: Kind,
    len: usize,
    sem: bool,
}

/// Turns raw random numbers into a valid op on a line/ring of `n` chips.
fn make_op(n: u32, wraps: bool, raw: (u32, u32, u32, bool, bool, usize)) -> Op {
    let (a, b, c, multi, sem, len) = raw;
    let src = a % n;
    let kind = if multi {
        let max = |fwd: bool| {
            if wraps {
                n - 1
            } else if fwd {
                n - 1 - src
            } else {
                src
            }
        };
        let mut fwd = b % 2 == 0;
        if max(fwd) == 0 {
            fwd = !fwd;
        }
        let m = max(fwd);
        let start = 1 + (b / 2) % m;
        let range = 1 + c % (m - start + 1);
        Kind::Multi {
            dir: if fwd { Dir::Forward } else { Dir::Backward },
            start,
            range,
        }
    } else {
        let mut dst = b % n;
        if dst == src {
            dst = (src + 1) % n;
        }
        Kind::Uni {
            dst,
            link: (c % 3) as usize,
        }
    };
    Op {
        src,
        kind,
        len,
        sem,
    }
}

/// Chips an op writes to, nearest first.
fn recipients(op: &Op, n: u32) -> Vec<u32> {
    match op.kind {
        Kind::Uni { dst, .. } => vec![dst],
        Kind::Multi { dir, start, range } => (start..start + range)
            .map(|d| match dir {
                Dir::Forward => (op.src + d) % n,
                Dir::Backward => (op.src + n - d % n) % n,
            })
            .collect(),
    }
}

fn run_traffic(f: &Arc<Fabric>, ops: &[Op], payload: usize) {
    let mut by_src: BTreeMap<u32, Vec<(usize, Op)>> = BTreeMap::new();
    for (m, op) in ops.iter().enumerate() {
        by_src.entry(op.src).or_default().push((m, op.clone()));
    }
    let threads: Vec<_> = by_src
        .into_iter()
        .map(|(src, list)| {
            let f = f.clone();
            std::thread::spawn(move || {
                let mut senders: HashMap<usize, FabricSender> = HashMap::new();
                for (m, op) in list {
                    let link = match op.kind {
                        Kind::Uni { link, .. } => link,
                        Kind::Multi { .. } => 0,
                    };
                    let tx = senders.entry(link).or_insert_with(|| {
                        f.sender(src)
                            .unwrap()
                            .with_link(link)
                            .with_payload_size(payload)
                            .unwrap()
                    });
                    let at = NocAddr::l1(src, m as u64 * SLOT_STRIDE);
                    let data = pattern(m as u64, op.len);
                    let sem = op.sem.then_some((SEM_BASE + src, 1));
                    match op.kind {
                        Kind::Uni { dst, link } => match sem {
                            Some((s, by)) => tx.write_and_inc(dst, at, &data, s, by).unwrap(),
                            None => tx.unicast_write(dst, at, &data, link).unwrap(),
                        },
                        Kind::Multi { dir, start, range } => {
                            let line = LineDir { axis: 0, dir };
                            tx.multicast_write(line, start, range, at, &data, sem)
                                .unwrap()
                        }
                    }
                }
                for tx in senders.values() {
                    tx.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("sender thread");
    }
}

fn check(f: &Fabric, mems: &[Arc<LogMemory>], ops: &[Op], n: u32, lpp: usize, payload: usize) {
    let mut want_sem: HashMap<(u32, u32), u64> = HashMap::new();
    let mut want_links = (0u64, 0u64);
    for op in ops {
        let packets = op.len.div_ceil(payload) as u64;
        let far = match op.kind {
            Kind::Uni { dst, .. } => f.route(op.src, dst).unwrap().hops as u64,
            Kind::Multi { start, range, .. } => (start + range - 1) as u64,
        };
        want_links.0 += packets * far;
        want_links.1 += (op.len as u64 + packets * 32) * far;
        for d in recipients(op, n) {
            if op.sem {
                *want_sem.entry((d, SEM_BASE + op.src)).or_default() += 1;
            }
        }
    }
    for (d, mem) in mems.iter().enumerate() {
        let d = d as u32;
        // (message, offset) of every write, per ordering key (source, direction, link).
        let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
        let mut last: HashMap<(u32, Dir, usize), (usize, usize)> = HashMap::new();
        for (at, data) in mem.writes() {
            let (src, m, off) = (
                at.bank,
                (at.addr / SLOT_STRIDE) as usize,
                (at.addr % SLOT_STRIDE) as usize,
            );
            let op = &ops[m];
            assert_eq!(op.src, src, "write on chip {d} from an unknown source");
            assert!(
                recipients(op, n).contains(&d),
                "message {m} landed on chip {d}, not a recipient"
            );
            let want = pattern(m as u64, op.len);
            assert_eq!(
                &want[off..off + data.len()],
                &data[..],
                "message {m} damaged on chip {d}"
            );
            // One write may cover several packets of a message (the router combines lent
            // packets that land back to back); count each packet it covers.
            assert_eq!(
                off % payload,
                0,
                "chip {d}: write at {off} is not on a packet boundary"
            );
            for o in (off..off + data.len()).step_by(payload) {
                *seen.entry((m, o)).or_default() += 1;
            }
            let (dir, link) = match op.kind {
                Kind::Uni { dst, link } => (f.route(src, dst).unwrap().line.dir, link % lpp),
                Kind::Multi { dir, .. } => (dir, 0),
            };
            if let Some(prev) = last.insert((src, dir, link), (m, off)) {
                assert!(
                    prev < (m, off),
                    "chip {d}: {prev:?} from chip {src} arrived before ({m}, {off})"
                );
            }
        }
        for (m, op) in ops.iter().enumerate() {
            if !recipients(op, n).contains(&d) {
                continue;
            }
            for off in (0..op.len).step_by(payload) {
                assert_eq!(
                    seen.get(&(m, off)),
                    Some(&1),
                    "chip {d}: message {m} packet at {off}"
                );
            }
        }
        let total: usize = seen.values().sum();
        let expected: usize = ops
            .iter()
            .filter(|op| recipients(op, n).contains(&d))
            .map(|op| op.len.div_ceil(payload))
            .sum();
        assert_eq!(total, expected, "chip {d}: number of writes");
        for src in 0..n {
            let want = want_sem.get(&(d, SEM_BASE + src)).copied().unwrap_or(0);
            assert_eq!(
                f.semaphore_value(d, SEM_BASE + src).unwrap(),
                want,
                "semaphore of {src} on {d}"
            );
        }
    }
    let stats = f.link_stats();
    let got = (
        stats.iter().map(|s| s.packets).sum::<u64>(),
        stats.iter().map(|s| s.bytes).sum::<u64>(),
    );
    assert_eq!(got, want_links, "link packets and bytes");
    assert!(stats.iter().all(|s| s.dropped == 0 && s.corrupted == 0));
}

proptest! {
    // 40 cases by default; PROPTEST_CASES raises it for a longer soak.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(40),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_traffic_arrives_once_intact_in_order(
        n in 2u32..=16,
        ring in any::<bool>(),
        ring_config in any::<bool>(),
        lpp in 1u32..=2,
        slots in 1usize..=4,
        payload in 24usize..=300,
        raw in prop::collection::vec(
            (any::<u32>(), any::<u32>(), any::<u32>(), any::<bool>(), any::<bool>(), 1usize..1500),
            1..40,
        ),
    ) {
        let config = if ring_config { FabricConfig::Fabric1DRing } else { FabricConfig::Fabric1D };
        let wraps = ring && n >= 3 && config == FabricConfig::Fabric1DRing;
        let mut spec = FabricSpec::line(n, lpp, ring, config);
        spec.channel_slots = slots;
        spec.timeout = Duration::from_secs(30);
        let (f, mems) = open(spec);
        let f = Arc::new(f);
        let ops: Vec<Op> = raw.into_iter().map(|r| make_op(n, wraps, r)).collect();
        run_traffic(&f, &ops, payload);
        check(&f, &mems, &ops, n, lpp as usize, payload);
        f.shutdown().unwrap();
    }
}

/// Every chip sends n-1 hops forward and n-1 hops backward at once, through 2-slot channels:
/// every channel of the ring is full at the same time. Without the dateline's second virtual
/// channel this cycle of full channels would never drain (the sends would time out).
#[test]
fn ring_under_full_load_does_not_deadlock() {
    for n in [3u32, 5, 8, 16] {
        let mut spec = FabricSpec::line(n, 1, true, FabricConfig::Fabric1DRing);
        spec.channel_slots = 2;
        spec.timeout = Duration::from_secs(30);
        let (f, mems) = open(spec);
        let f = Arc::new(f);
        let len = 64 * 1024;
        let threads: Vec<_> = (0..n)
            .flat_map(|src| [Dir::Forward, Dir::Backward].map(|dir| (src, dir)))
            .map(|(src, dir)| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let tx = f.sender(src).unwrap().with_payload_size(256).unwrap();
                    let bank = src * 2 + (dir == Dir::Backward) as u32;
                    let data = pattern(bank as u64, len);
                    let line = LineDir { axis: 0, dir };
                    tx.multicast_write(line, n - 1, 1, NocAddr::dram(bank, 0), &data, Some((1, 1)))
                        .unwrap();
                    tx.flush().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().expect("sender");
        }
        for d in 0..n {
            f.wait_semaphore(d, 1, 2, Duration::from_secs(30)).unwrap();
            // Chip d hears from its neighbours: d-1 going forward n-1 hops is d+... on a ring
            // the chip n-1 hops forward of s is s-1, and backward is s+1.
            let from_fwd = (d + 1) % n;
            let from_bwd = (d + n - 1) % n;
            for bank in [from_fwd * 2, from_bwd * 2 + 1] {
                assert_eq!(
                    mems[d as usize].read(NocAddr::dram(bank, 0), len),
                    pattern(bank as u64, len),
                    "n {n} chip {d} bank {bank}"
                );
            }
        }
        f.shutdown().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    /// With a random fault on a random link, every send and flush ends (in an error or not),
    /// nothing damaged is ever written, and shutdown is clean.
    #[test]
    fn faults_never_hang_or_land_damaged_bytes(
        n in 3u32..=8,
        ring in any::<bool>(),
        slots in 1usize..=4,
        fault_link in any::<u32>(),
        fault_kind in 0u8..4,
        nth in 1u64..=4,
        raw in prop::collection::vec(
            (any::<u32>(), any::<u32>(), any::<u32>(), any::<bool>(), any::<bool>(), 1usize..1500),
            1..24,
        ),
    ) {
        let config = if ring { FabricConfig::Fabric1DRing } else { FabricConfig::Fabric1D };
        let mut spec = FabricSpec::line(n, 1, ring, config);
        spec.channel_slots = slots;
        spec.timeout = Duration::from_secs(3);
        let links = spec.links.len() as u32;
        let (f, mems) = open(spec);
        let f = Arc::new(f);
        let fault = match fault_kind {
            0 => Fault::Down,
            1 => Fault::Drop { every_nth: nth },
            2 => Fault::Corrupt { every_nth: nth },
            _ => Fault::Slow { factor: 2.0 },
        };
        f.inject((fault_link % links) as usize, fault).unwrap();
        let ops: Vec<Op> = raw.into_iter().map(|r| make_op(n, ring, r)).collect();
        let threads: Vec<_> = ops
            .iter()
            .cloned()
            .enumerate()
            .map(|(m, op)| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let tx = f.sender(op.src).unwrap().with_payload_size(128).unwrap();
                    let at = NocAddr::l1(op.src, m as u64 * SLOT_STRIDE);
                    let data = pattern(m as u64, op.len);
                    let sent = match op.kind {
                        Kind::Uni { dst, link } => tx.unicast_write(dst, at, &data, link),
                        Kind::Multi { dir, start, range } => tx.multicast_write(
                            LineDir { axis: 0, dir }, start, range, at, &data, Some((1, 1))),
                    };
                    (sent, tx.flush())
                })
            })
            .collect();
        for t in threads {
            let (_sent, _flushed) = t.join().expect("sender thread");
        }
        // Reaching this point is the property: every wait above has a 3 s timeout.
        for (d, mem) in mems.iter().enumerate() {
            for (at, data) in mem.writes() {
                let m = (at.addr / SLOT_STRIDE) as usize;
                let off = (at.addr % SLOT_STRIDE) as usize;
                let want = pattern(m as u64, ops[m].len);
                prop_assert_eq!(&want[off..off + data.len()], &data[..], "chip {} message {}", d, m);
            }
        }
        f.shutdown().unwrap();
    }
}
