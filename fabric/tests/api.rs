//! Configs, routes, sends, semaphores and link statistics, with exact expected values.

mod common;

use common::{open, pattern};
use std::sync::Arc;
use std::time::Duration;
use ttmesh_fabric::*;

fn line(n: u32, config: FabricConfig) -> FabricSpec {
    let mut s = FabricSpec::line(n, 1, false, config);
    s.timeout = Duration::from_secs(20);
    s
}

#[test]
fn config_names() {
    use FabricConfig::*;
    for (name, want) in [
        ("disabled", Disabled),
        ("1d", Fabric1D),
        ("1d-ring", Fabric1DRing),
        ("1d-neighbor-exchange", Fabric1DNeighborExchange),
        ("2d", Fabric2D),
        ("2d-torus-x", Fabric2DTorusX),
        ("2d-torus-y", Fabric2DTorusY),
        ("2d-torus-xy", Fabric2DTorusXY),
        ("2D_TORUS_XY", Fabric2DTorusXY),
        ("FABRIC_1D", Fabric1D),
        ("FABRIC_1D_RING", Fabric1DRing),
        ("FABRIC_2D", Fabric2D),
        ("ttnn.FabricConfig.FABRIC_2D_TORUS_Y", Fabric2DTorusY),
        ("DISABLED", Disabled),
    ] {
        assert_eq!(FabricConfig::from_name(name), Ok(want), "{name}");
    }
    // tt-metal's values, written out here rather than derived from the enum.
    let values = [
        ("DISABLED", 0),
        ("FABRIC_1D_NEIGHBOR_EXCHANGE", 1),
        ("FABRIC_1D", 2),
        ("FABRIC_1D_RING", 3),
        ("FABRIC_2D", 4),
        ("FABRIC_2D_TORUS_X", 5),
        ("FABRIC_2D_TORUS_Y", 6),
        ("FABRIC_2D_TORUS_XY", 7),
    ];
    assert_eq!(FabricConfig::ALL.len(), values.len());
    for (c, (name, value)) in FabricConfig::ALL.into_iter().zip(values) {
        assert_eq!(c.tt_metal_name(), name);
        assert_eq!(c.value(), value, "{name}");
        assert_eq!(FabricConfig::from_name(name), Ok(c));
        assert_eq!(FabricConfig::from_name(c.short_name()), Ok(c));
        assert_eq!(c.to_string().parse::<FabricConfig>(), Ok(c));
    }
    let e = FabricConfig::from_name("3d").unwrap_err().to_string();
    assert!(
        e.starts_with("unknown fabric config '3d'; use one of disabled, 1d-neighbor-exchange")
            && e.contains("2d-torus-xy")
            && e.contains("FABRIC_2D_TORUS_XY"),
        "{e}"
    );
}

fn memories(n: u32) -> Vec<Arc<dyn ChipMemory>> {
    (0..n)
        .map(|_| Arc::new(testing::MapMemory::new()) as Arc<dyn ChipMemory>)
        .collect()
}

/// Each topology refuses what it cannot carry, with the reason and the configs that fit.
#[test]
fn configs_the_topology_cannot_carry_are_refused_with_what_fits() {
    use FabricConfig::*;
    let e = Fabric::new(line(4, Fabric2D), memories(4)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "fabric config FABRIC_2D cannot run on this topology: it is a line, not a 2D mesh (the \
         spec has no grid of rows and columns); use one of DISABLED, \
         FABRIC_1D_NEIGHBOR_EXCHANGE, FABRIC_1D"
    );
    // A 1x4 grid is a line too.
    let one_row = FabricSpec::mesh(1, 4, 1, (false, false), Fabric2D);
    let e = Fabric::new(one_row, memories(4)).unwrap_err().to_string();
    assert!(
        e.contains("the mesh is 1x4: 2D routing needs at least 2 rows"),
        "{e}"
    );
    let single = FabricSpec::mesh(1, 1, 1, (false, false), Fabric2DTorusXY);
    let e = Fabric::new(single, memories(1)).unwrap_err().to_string();
    assert!(e.contains("the mesh is 1x1"), "{e}");

    // A Galaxy-shaped mesh without wrap links: 2D fits, no torus does.
    let galaxy = FabricSpec::mesh(4, 8, 1, (false, false), Fabric2DTorusX);
    assert_eq!(
        galaxy.configs_carried(),
        vec![Disabled, Fabric1DNeighborExchange, Fabric1D, Fabric2D]
    );
    let e = Fabric::new(galaxy, memories(32)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "fabric config FABRIC_2D_TORUS_X cannot run on this topology: row 0 has no wrap link \
         from chip 7 back to chip 0 (a torus on X needs one on every row); use one of \
         DISABLED, FABRIC_1D_NEIGHBOR_EXCHANGE, FABRIC_1D, FABRIC_2D"
    );
    // Rows wrapped, columns not: X and plain 2D fit, Y and XY do not.
    let rows_wrap = FabricSpec::mesh(4, 8, 1, (true, false), Fabric2DTorusY);
    assert_eq!(
        rows_wrap.configs_carried(),
        vec![
            Disabled,
            Fabric1DNeighborExchange,
            Fabric1D,
            Fabric1DRing,
            Fabric2D,
            Fabric2DTorusX
        ]
    );
    let e = rows_wrap.check_config().unwrap_err().to_string();
    assert!(
        e.contains("column 0 has no wrap link from chip 24 back to chip 0"),
        "{e}"
    );
    // A 2-row mesh cannot wrap its columns: a ring needs 3 chips.
    let t3k = FabricSpec::mesh(2, 4, 1, (true, true), Fabric2DTorusXY);
    let e = t3k.check_config().unwrap_err().to_string();
    assert!(
        e.contains("column 0 has 2 chips: a Y wrap needs 3 or more"),
        "{e}"
    );
    assert!(e.ends_with("FABRIC_2D, FABRIC_2D_TORUS_X"), "{e}");
    let full = FabricSpec::mesh(4, 8, 1, (true, true), Fabric2DTorusXY);
    assert_eq!(full.configs_carried(), FabricConfig::ALL.to_vec());

    // A grid whose neighbours are not all linked cannot route 2D.
    let mut broken = FabricSpec::mesh(2, 2, 1, (false, false), Fabric2D);
    broken.links.retain(|l| !l.joins(1, 3));
    let e = broken.check_config().unwrap_err().to_string();
    assert!(
        e.contains("chips 1 and 3 are neighbours in column 1 but no ethernet link joins them"),
        "{e}"
    );

    // A ring config on a line: the spec says so (the mesh refuses it; the fabric alone runs
    // it as a line).
    let e = line(4, Fabric1DRing)
        .check_config()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no line of this topology closes into a ring"),
        "{e}"
    );
    assert!(FabricSpec::line(4, 1, true, Fabric1DRing)
        .check_config()
        .is_ok());
}

#[test]
fn neighbour_exchange_reaches_neighbours_only() {
    let (f, mems) = open(line(4, FabricConfig::Fabric1DNeighborExchange));
    let tx = f.sender(1).unwrap();
    tx.write_and_inc(2, NocAddr::dram(0, 0), &[7; 100], 3, 1)
        .unwrap();
    tx.write_and_inc(0, NocAddr::dram(0, 0), &[8; 100], 3, 1)
        .unwrap();
    tx.flush().unwrap();
    f.wait_semaphore(2, 3, 1, Duration::from_secs(5)).unwrap();
    f.wait_semaphore(0, 3, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(mems[2].read(NocAddr::dram(0, 0), 100), vec![7; 100]);
    assert_eq!(mems[0].read(NocAddr::dram(0, 0), 100), vec![8; 100]);
    let e = tx
        .unicast_write(3, NocAddr::dram(0, 0), &[1], 0)
        .unwrap_err();
    assert_eq!(
        e,
        FabricError::NotNeighbours {
            src: 1,
            dst: 3,
            hops: 2
        }
    );
    assert!(
        e.to_string().contains("open the fabric with FABRIC_1D"),
        "{e}"
    );
    let far = LineDir {
        axis: 0,
        dir: Dir::Forward,
    };
    let e = tx
        .multicast_write(far, 1, 2, NocAddr::dram(0, 0), &[1], None)
        .unwrap_err();
    assert!(e.to_string().contains("hops must lie in 1..=1"), "{e}");
}

#[test]
fn disabled_fabric_refuses_remote_sends_but_allows_local_ones() {
    let (f, mems) = open(line(2, FabricConfig::Disabled));
    assert_eq!(f.router_count(), 0);
    let tx = f.sender(0).unwrap();
    let e = tx
        .unicast_write(1, NocAddr::dram(0, 0), &[1, 2], 0)
        .unwrap_err();
    assert_eq!(e, FabricError::Disabled { chip: 0 });
    tx.unicast_write(0, NocAddr::dram(3, 8), &[1, 2], 0)
        .unwrap();
    assert_eq!(mems[0].read(NocAddr::dram(3, 8), 2), vec![1, 2]);
}

#[test]
fn spec_errors_name_the_problem() {
    let mut s = line(3, FabricConfig::Fabric1D);
    s.links.remove(1);
    let mems: Vec<Arc<dyn ChipMemory>> = (0..3)
        .map(|_| Arc::new(testing::MapMemory::new()) as Arc<dyn ChipMemory>)
        .collect();
    let e = Fabric::new(s, mems.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid fabric spec: axis 0: chips 1 and 2 are neighbours but no ethernet link joins them"
    );
    let e = Fabric::new(line(3, FabricConfig::Fabric1D), mems[..2].to_vec()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid fabric spec: 2 chip memories given for 3 chips; register exactly one per chip"
    );
}

/// A 2x2 mesh: rows {0,1}, {2,3} and columns {0,2}, {1,3}.
fn mesh2x2() -> FabricSpec {
    let links = vec![
        EthLink::new((0, 0), (1, 0)),
        EthLink::new((2, 0), (3, 0)),
        EthLink::new((0, 1), (2, 1)),
        EthLink::new((1, 1), (3, 1)),
    ];
    let axes = vec![
        AxisLine {
            chips: vec![0, 1],
            is_ring: false,
        },
        AxisLine {
            chips: vec![2, 3],
            is_ring: false,
        },
        AxisLine {
            chips: vec![0, 2],
            is_ring: false,
        },
        AxisLine {
            chips: vec![1, 3],
            is_ring: false,
        },
    ];
    FabricSpec::new(
        4,
        links,
        axes,
        LinkParams::wormhole(),
        FabricConfig::Fabric1D,
    )
}

#[test]
fn routes_follow_lines_and_rings() {
    let (f, _) = open(mesh2x2());
    assert_eq!(
        f.route(0, 2).unwrap(),
        RouteInfo {
            line: LineDir {
                axis: 2,
                dir: Dir::Forward
            },
            hops: 1
        }
    );
    assert_eq!(
        f.route(3, 1).unwrap(),
        RouteInfo {
            line: LineDir {
                axis: 3,
                dir: Dir::Backward
            },
            hops: 1
        }
    );
    let e = f.route(0, 3).unwrap_err();
    assert_eq!(e, FabricError::NoRoute { src: 0, dst: 3 });
    assert!(e
        .to_string()
        .starts_with("no route from chip 0 to chip 3: no axis line contains both"));
    let e = f.sender(1).unwrap().atomic_inc(2, 0, 1).unwrap_err();
    assert_eq!(e, FabricError::NoRoute { src: 1, dst: 2 });

    let (ring, _) = open(FabricSpec::line(6, 1, true, FabricConfig::Fabric1DRing));
    let r = |s, d| {
        let r = ring.route(s, d).unwrap();
        (r.line.dir, r.hops)
    };
    assert_eq!(r(0, 5), (Dir::Backward, 1));
    assert_eq!(r(5, 0), (Dir::Forward, 1));
    assert_eq!(r(1, 4), (Dir::Forward, 3)); // tie goes forward
    assert_eq!(r(4, 2), (Dir::Backward, 2));
    // The same ring under Fabric1D is a line: no wrap-around.
    let (as_line, _) = open(FabricSpec::line(6, 1, true, FabricConfig::Fabric1D));
    assert_eq!(as_line.route(0, 5).unwrap().hops, 5);
}

#[test]
fn writes_inline_writes_and_self_sends_land() {
    let (f, mems) = open(line(4, FabricConfig::Fabric1D));
    let tx = f.sender(1).unwrap();
    let big = pattern(1, 10_000);
    tx.unicast_write(3, NocAddr::l1(5, 0x1000), &big, 0)
        .unwrap();
    tx.unicast_write(0, NocAddr::dram(2, 64), &[9, 8, 7], 0)
        .unwrap();
    tx.inline_write(2, NocAddr::l1(1, 16), 0xA1B2_C3D4).unwrap();
    tx.unicast_write(1, NocAddr::dram(0, 0), &[4, 4], 0)
        .unwrap();
    tx.flush().unwrap();
    assert_eq!(mems[3].read(NocAddr::l1(5, 0x1000), big.len()), big);
    assert_eq!(mems[0].read(NocAddr::dram(2, 64), 3), vec![9, 8, 7]);
    assert_eq!(
        mems[2].read(NocAddr::l1(1, 16), 4),
        vec![0xD4, 0xC3, 0xB2, 0xA1]
    );
    assert_eq!(mems[1].read(NocAddr::dram(0, 0), 2), vec![4, 4]);
    // 10_000 B in 4352 B packets: 3 packets, written in order.
    let w: Vec<(u64, usize)> = mems[3]
        .writes()
        .iter()
        .map(|(a, d)| (a.addr, d.len()))
        .collect();
    assert_eq!(
        w,
        vec![(0x1000, 4352), (0x1000 + 4352, 4352), (0x1000 + 8704, 1296)]
    );
    assert_eq!(tx.outstanding(), 0);
}

#[test]
fn write_errors_reach_the_sender() {
    let (f, _) = open(line(2, FabricConfig::Fabric1D));
    let tx = f.sender(0).unwrap();
    tx.unicast_write(1, NocAddr::dram(0, 1 << 41), &[1], 0)
        .unwrap();
    let e = tx.flush().unwrap_err();
    assert_eq!(
        e.to_string(),
        "chip 1 rejected a fabric write from chip 0 to DRAM bank 0 address 0x20000000000: \
         address 0x20000000000 is past the end of the bank"
    );
    let e = tx
        .unicast_write(1, NocAddr::dram(70_000, 0), &[1], 0)
        .unwrap_err();
    assert!(matches!(e, FabricError::InvalidArgument(_)), "{e}");
    assert_eq!(
        f.sender(9).err(),
        Some(FabricError::NoSuchChip {
            chip: 9,
            num_chips: 2
        })
    );
}

/// A fused write that the receiving chip rejects: the waiter on its increment fails at once
/// (not at its timeout), the sender's flush names the write, and the link counts the packets
/// that crossed. One hop (delivered on the sender's thread when the router is idle) and two
/// hops (through the routers' slots) must agree.
#[test]
fn a_rejected_write_fails_its_waiter_at_once_and_counts_its_packets() {
    for (dst, size) in [(1u32, 100usize), (1, 6000), (2, 100), (2, 6000)] {
        let (f, _) = open(line(3, FabricConfig::Fabric1D));
        let tx = f.sender(0).unwrap();
        tx.write_and_inc(dst, NocAddr::dram(0, 1 << 41), &pattern(1, size), 3, 1)
            .unwrap();
        let started = std::time::Instant::now();
        let e = f
            .wait_semaphore(dst, 3, 1, Duration::from_secs(20))
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "{e}");
        let packets = size.div_ceil(4352);
        let (head, e) = (
            format!("semaphore 3 on chip {dst} waited for 1, saw 0 after "),
            e.to_string(),
        );
        assert!(e.starts_with(&head), "{e}");
        // Each packet's loss names its own address.
        let lost = (0..packets).map(|i| {
            let at = (1u64 << 41) + 4352 * i as u64;
            format!("; 1 fabric write on chip {dst} failed: address {at:#x} is past the end of the bank")
        });
        assert!(e.ends_with(&lost.collect::<String>()), "{dst} {size}: {e}");
        let e = tx.flush().unwrap_err();
        assert!(e.to_string().contains("past the end of the bank"), "{e}");
        let stats = f.link_stats();
        let into = stats
            .iter()
            .find(|s| (s.from_chip, s.to_chip) == (dst - 1, dst));
        let into = into.unwrap();
        assert_eq!(
            (into.packets, into.payload_bytes),
            (packets as u64, size as u64)
        );
        assert_eq!(tx.outstanding(), 0);
    }
}

#[test]
fn semaphores_count_and_consume() {
    let (f, mems) = open(line(3, FabricConfig::Fabric1D));
    let tx = f.sender(0).unwrap();
    tx.atomic_inc(2, 5, 3).unwrap();
    tx.atomic_inc(2, 5, 3).unwrap();
    tx.write_and_inc(1, NocAddr::dram(0, 0), &pattern(2, 9000), 6, 1)
        .unwrap();
    tx.flush().unwrap();
    assert_eq!(f.semaphore_value(2, 5).unwrap(), 6);
    f.wait_semaphore(2, 5, 4, Duration::from_secs(5)).unwrap();
    assert_eq!(f.semaphore_value(2, 5).unwrap(), 2);
    f.wait_semaphore(2, 5, 2, Duration::from_secs(5)).unwrap();
    assert_eq!(f.semaphore_value(2, 5).unwrap(), 0);
    let e = f
        .wait_semaphore(2, 5, 1, Duration::from_millis(20))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "semaphore 5 on chip 2 waited for 1, saw 0 after 20ms"
    );
    // The increment of a fused write lands after all of its data.
    f.wait_semaphore(1, 6, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(mems[1].read(NocAddr::dram(0, 0), 9000), pattern(2, 9000));
    // Replays: the same semaphore again, and reset.
    for _ in 0..3 {
        tx.atomic_inc(1, 6, 2).unwrap();
        f.wait_semaphore(1, 6, 2, Duration::from_secs(5)).unwrap();
    }
    tx.atomic_inc(1, 6, 2).unwrap();
    tx.flush().unwrap();
    f.reset_semaphores(1).unwrap();
    assert_eq!(f.semaphore_value(1, 6).unwrap(), 0);
}

#[test]
fn a_waiting_chip_wakes_when_the_increment_arrives() {
    let (f, _) = open(line(4, FabricConfig::Fabric1D));
    let f = Arc::new(f);
    let g = f.clone();
    let waiter = std::thread::spawn(move || g.wait_semaphore(3, 1, 2, Duration::from_secs(20)));
    let tx = f.sender(0).unwrap();
    tx.atomic_inc(3, 1, 1).unwrap();
    tx.atomic_inc(3, 1, 1).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(f.semaphore_value(3, 1).unwrap(), 0);
}

#[test]
fn stats_count_packets_bytes_and_modeled_time_exactly() {
    let (f, _) = open(line(3, FabricConfig::Fabric1D));
    let tx = f.sender(0).unwrap();
    tx.unicast_write(2, NocAddr::dram(0, 0), &pattern(3, 10_000), 0)
        .unwrap();
    tx.atomic_inc(1, 0, 1).unwrap();
    tx.flush().unwrap();
    let p = LinkParams::wormhole();
    let st = f.link_stats();
    assert_eq!(st.len(), 4);
    let l0 = &st[0];
    assert_eq!(
        (l0.link_index, l0.direction, l0.from_chip, l0.to_chip),
        (0, LinkDirection::AToB, 0, 1)
    );
    assert_eq!(
        (l0.packets, l0.payload_bytes, l0.bytes),
        (4, 10_000, 10_000 + 4 * 32)
    );
    // 10_128 wire bytes at 12 GB/s = 844 ns, plus 4 x 711 ns of hop latency.
    assert_eq!(l0.busy_ns, 844 + 4 * 711);
    let l1 = &st[2];
    assert_eq!((l1.link_index, l1.from_chip, l1.to_chip), (1, 1, 2));
    assert_eq!(
        (l1.packets, l1.payload_bytes, l1.bytes),
        (3, 10_000, 10_000 + 3 * 32)
    );
    // 10_096 B = 841.33 ns, plus 3 x 711 ns.
    assert_eq!(l1.busy_ns, 2974);
    for back in [&st[1], &st[3]] {
        assert_eq!(
            (back.packets, back.bytes, back.dropped, back.corrupted),
            (0, 0, 0, 0)
        );
    }
    // One 4384-byte packet at 12 GB/s is 365.33 ns, plus 711 ns for the hop.
    assert_eq!(p.packet_ps(4352, 1.0), 1_076_333);
}

#[test]
fn parallel_links_carry_link_index_modulo_count() {
    let mut spec = FabricSpec::line(3, 2, false, FabricConfig::Fabric1D);
    spec.timeout = Duration::from_secs(20);
    let (f, mems) = open(spec);
    let tx = f.sender(0).unwrap();
    for link in 0..5 {
        tx.unicast_write(2, NocAddr::dram(link as u32, 0), &[link as u8; 100], link)
            .unwrap();
    }
    tx.flush().unwrap();
    for link in 0..5u32 {
        assert_eq!(
            mems[2].read(NocAddr::dram(link, 0), 100),
            vec![link as u8; 100]
        );
    }
    let packets: Vec<u64> = f
        .link_stats()
        .iter()
        .filter(|s| s.direction == LinkDirection::AToB)
        .map(|s| s.packets)
        .collect();
    // Links 0,1 join chips 0-1; links 2,3 join 1-2. Indices 0,2,4 use the first of each pair.
    assert_eq!(packets, vec![3, 2, 3, 2]);
}

#[test]
fn multicast_reaches_exactly_the_range() {
    let (f, mems) = open(line(6, FabricConfig::Fabric1D));
    let tx = f.sender(1).unwrap();
    let data = pattern(4, 5000);
    let fwd = LineDir {
        axis: 0,
        dir: Dir::Forward,
    };
    tx.multicast_write(fwd, 2, 2, NocAddr::l1(0, 0), &data, Some((9, 1)))
        .unwrap();
    tx.flush().unwrap();
    for (chip, mem) in mems.iter().enumerate() {
        let want = if chip == 3 || chip == 4 {
            data.clone()
        } else {
            vec![0; 5000]
        };
        assert_eq!(mem.read(NocAddr::l1(0, 0), 5000), want, "chip {chip}");
        assert_eq!(
            f.semaphore_value(chip as u32, 9).unwrap(),
            u64::from(chip == 3 || chip == 4)
        );
    }
    let e = tx
        .multicast_write(fwd, 2, 4, NocAddr::l1(0, 0), &data, None)
        .unwrap_err();
    assert!(e.to_string().contains("hops must lie in 1..=4"), "{e}");
    let back = LineDir {
        axis: 0,
        dir: Dir::Backward,
    };
    tx.multicast_write(back, 1, 1, NocAddr::l1(0, 0), &[1], None)
        .unwrap();
    tx.flush().unwrap();
    assert_eq!(mems[0].read(NocAddr::l1(0, 0), 1), vec![1]);
}

#[test]
fn shutdown_is_clean_and_final() {
    let (f, _) = open(line(8, FabricConfig::Fabric1D));
    assert_eq!(f.router_count(), 14);
    let tx = f.sender(0).unwrap();
    tx.unicast_write(7, NocAddr::dram(0, 0), &pattern(5, 100_000), 0)
        .unwrap();
    f.shutdown().unwrap();
    f.shutdown().unwrap();
    assert_eq!(
        tx.unicast_write(7, NocAddr::dram(0, 0), &[1], 0),
        Err(FabricError::ShutDown)
    );
    assert_eq!(f.router_count(), 0);
}

#[test]
fn lent_payloads_are_taken_before_the_send_returns() {
    let mut spec = FabricSpec::line(4, 1, false, FabricConfig::Fabric1D);
    spec.channel_slots = 2;
    spec.timeout = Duration::from_secs(20);
    let (f, mems) = open(spec);
    let tx = f.sender(0).unwrap().with_payload_size(1000).unwrap();
    for dst in [1u32, 3] {
        let want = pattern(dst as u64, 200_000);
        let mut data = want.clone();
        tx.unicast_write(dst, NocAddr::dram(1, 0), &data, 0)
            .unwrap();
        // The caller owns its buffer again: scribbling on it must not reach the chip.
        data.iter_mut().for_each(|b| *b = 0xEE);
        drop(data);
        tx.flush().unwrap();
        assert_eq!(
            mems[dst as usize].read(NocAddr::dram(1, 0), 200_000),
            want,
            "chip {dst}"
        );
    }
}

#[test]
fn many_producers_share_a_link_without_loss() {
    let mut spec = FabricSpec::line(4, 1, false, FabricConfig::Fabric1D);
    spec.channel_slots = 2;
    spec.timeout = Duration::from_secs(20);
    let (f, mems) = open(spec);
    let f = Arc::new(f);
    // Four kernels on chip 0 and two on chip 1 all cross link 1 -> 2 toward chip 3.
    let jobs: Vec<(u32, u32)> = vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 4), (1, 5)];
    let threads: Vec<_> = jobs
        .into_iter()
        .map(|(src, bank)| {
            let f = f.clone();
            std::thread::spawn(move || {
                let tx = f.sender(src).unwrap().with_payload_size(512).unwrap();
                for i in 0..20u64 {
                    let data = pattern(bank as u64 * 100 + i, 3000);
                    tx.write_and_inc(3, NocAddr::l1(bank, i * 4096), &data, 9, 1)
                        .unwrap();
                }
                tx.flush().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for bank in 0..6u32 {
        for i in 0..20u64 {
            let got = mems[3].read(NocAddr::l1(bank, i * 4096), 3000);
            assert_eq!(
                got,
                pattern(bank as u64 * 100 + i, 3000),
                "bank {bank} message {i}"
            );
        }
    }
    assert_eq!(f.semaphore_value(3, 9).unwrap(), 120);
    let l1 = &f.link_stats()[2];
    assert_eq!((l1.from_chip, l1.to_chip), (1, 2));
    assert_eq!((l1.packets, l1.payload_bytes), (120 * 6, 120 * 3000));
}
