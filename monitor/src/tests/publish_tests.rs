//! Publishing and reading back: exact values, what the table and JSON show, names, modes,
//! limits, the on/off switch.

use std::os::unix::fs::PermissionsExt;

use super::{info, info_for, shm_path};
use crate::*;

#[test]
fn publish_then_read_back_exact_values() {
    // A name of its own: the tests run in parallel, and another test's publisher could take
    // the default name the moment this one drops it (the check below that it is gone).
    let me = std::process::id();
    let base = format!("ttmesh-{me}-exact");
    let own = crate::shm::own_start_time();
    let p = Publisher::create_as(&info_for(8), 8, 4, me, own, Some(&base)).unwrap();
    let name = p.name().to_string();
    assert!(name.starts_with(&format!("ttmesh-{me}")));
    let c5 = p.chip(5).unwrap();
    c5.set_identity(17, (1, 3));
    let dram = MemoryCounters {
        allocated: 3 << 30,
        capacity: 12_872_318_208,
        live_buffers: 7,
        peak: 4 << 30,
        largest_free: 1 << 30,
    };
    c5.set_memory(MemoryKind::Dram, &dram);
    c5.on_allocate(MemoryKind::L1, 2048);
    c5.on_allocate(MemoryKind::L1, 4096);
    c5.on_deallocate(MemoryKind::L1, 2048);
    c5.set_capacity(MemoryKind::L1, 89_171_968);
    c5.set_largest_free(MemoryKind::L1, 1000);
    c5.set_traces(2, 16_050_000);
    c5.add_replays(3);
    c5.add_replays(4);
    c5.update(|c| {
        c.trace.allocated = 16_252_928;
        c.weights_bytes = 2_000_000_000;
        c.kv_cache_bytes = 75_497_472;
        c.host_bytes = 123_456;
    });
    let l2 = p.link(2).unwrap();
    l2.set_endpoints(1, 8, 2, 9);
    l2.add_traffic(3, 3 * 4352);
    l2.add_stalls(2);
    l2.add_errors(1);
    l2.update(|l| l.packets += 1);

    let s = read_segment(&name).unwrap();
    assert_eq!(s.segment, name);
    assert_eq!(s.info.pid, std::process::id());
    assert_eq!(s.info.topology, "t3k");
    assert_eq!(s.info.mesh_shape, (2, 4));
    assert_eq!(s.info.arch, "wormhole_b0");
    assert_eq!(s.info.fabric, "FABRIC_1D");
    assert_eq!(s.stale, None);
    assert_eq!((s.chips.len(), s.links.len()), (8, 4));
    // Untouched chips keep their row-major default identity.
    assert_eq!((s.chips[6].id, s.chips[6].coord), (6, (1, 2)));
    assert_eq!(s.chips[6].dram, MemoryCounters::default());
    let expected = ChipSnapshot {
        id: 17,
        rank: 0,
        coord: (1, 3),
        dram,
        l1: MemoryCounters {
            allocated: 4096,
            capacity: 89_171_968,
            live_buffers: 1,
            peak: 6144,
            largest_free: 1000,
        },
        l1_small: MemoryCounters::default(),
        trace: MemoryCounters {
            allocated: 16_252_928,
            ..Default::default()
        },
        traces: 2,
        trace_bytes: 16_050_000,
        replays: 7,
        weights_bytes: 2_000_000_000,
        kv_cache_bytes: 75_497_472,
        host_bytes: 123_456,
    };
    assert_eq!(s.chips[5], expected);
    assert_eq!(c5.snapshot(), Some(expected));
    let link = LinkSnapshot {
        a_chip: 1,
        a_port: 8,
        b_chip: 2,
        b_port: 9,
        packets: 4,
        bytes: 3 * 4352,
        stalls: 2,
        errors: 1,
    };
    assert_eq!(s.links[2], link);
    assert_eq!(s.links[0], LinkSnapshot::default());

    // Dropping the publisher removes the segment; a handle outliving it is harmless.
    drop(p);
    c5.add_replays(1);
    assert!(!std::path::Path::new(&shm_path(&name)).exists());
    assert!(matches!(
        read_segment(&name),
        Err(MonitorError::Vanished { .. })
    ));
}

/// The table shows what the program labelled (weights, KV cache) only when it labelled
/// something, per chip and summed; JSON always carries both figures.
#[test]
fn labelled_memory_is_shown_when_present() {
    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    let render = |p: &Publisher| {
        let s = read_segment(p.name()).unwrap();
        (
            crate::render_table(std::slice::from_ref(&s), &[]),
            crate::render_json(std::slice::from_ref(&s), &[]),
        )
    };
    let (table, json) = render(&p);
    assert!(!table.contains("weights"), "{table}");
    assert_eq!(json["processes"][0]["chips"][1]["weights_bytes"], 0);
    for i in 0..2 {
        p.chip(i).unwrap().update(|c| {
            c.weights_bytes = 3 << 20;
            c.kv_cache_bytes = 512 << 10;
        });
    }
    let (table, json) = render(&p);
    let header = table.lines().find(|l| l.contains("chip")).unwrap();
    assert!(
        header.contains("weights") && header.contains("KV cache"),
        "{table}"
    );
    let all = table
        .lines()
        .find(|l| l.trim_start().starts_with("all"))
        .unwrap();
    assert!(
        all.contains("6.00 MiB") && all.contains("1.00 MiB"),
        "{table}"
    );
    assert_eq!(json["processes"][0]["chips"][1]["weights_bytes"], 3 << 20);
    assert_eq!(
        json["processes"][0]["chips"][1]["kv_cache_bytes"],
        512 << 10
    );
}

/// Host bytes sit beside the devices' figures for every chip and summed, in the table and
/// the JSON.
#[test]
fn host_bytes_are_shown_per_chip_and_summed() {
    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    for i in 0..2 {
        p.chip(i)
            .unwrap()
            .update(|c| c.host_bytes = (i as u64 + 1) << 20);
    }
    let s = read_segment(p.name()).unwrap();
    let table = crate::render_table(std::slice::from_ref(&s), &[]);
    let header = table.lines().find(|l| l.contains("chip")).unwrap();
    assert!(header.contains("host"), "{table}");
    let all = table
        .lines()
        .find(|l| l.trim_start().starts_with("all"))
        .unwrap();
    assert!(all.contains("3.00 MiB"), "{table}");
    let json = crate::render_json(std::slice::from_ref(&s), &[]);
    assert_eq!(json["processes"][0]["chips"][1]["host_bytes"], 2 << 20);
}

#[test]
fn second_mesh_in_one_process_gets_a_suffix() {
    let a = Publisher::create(&info_for(1), 1, 0).unwrap();
    let b = Publisher::create(&info_for(1), 1, 0).unwrap();
    assert_ne!(a.name(), b.name());
    for n in [a.name(), b.name()] {
        assert_eq!(
            crate::reader::pid_from_name(n),
            Some(std::process::id()),
            "{n}"
        );
        assert!(read_segment(n).is_ok());
    }
}

#[test]
fn segment_is_owner_only() {
    let p = Publisher::create(&info_for(1), 1, 1).unwrap();
    let mode = std::fs::metadata(shm_path(p.name()))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn limits_and_indices_are_errors() {
    let e = Publisher::create(&info(), MAX_CHIPS + 1, 0).unwrap_err();
    assert_eq!(e.to_string(), "monitor: number of chips is 129, but a segment holds at most 128; publish fewer or raise the limit in ttmesh-monitor");
    assert!(matches!(
        Publisher::create(&info_for(1), 1, MAX_LINKS + 1),
        Err(MonitorError::TooMany {
            requested: 2049,
            ..
        })
    ));
    let p = Publisher::create(&info_for(2), 2, 1).unwrap();
    assert_eq!(
        p.chip(2).err().unwrap().to_string(),
        "monitor: chip index 2 is out of range (this segment has 2)"
    );
    assert!(p.link(1).is_err());
    let mut big = info();
    big.name = "x".repeat(2000);
    assert!(matches!(
        Publisher::create(&big, 1, 1),
        Err(MonitorError::InfoTooLarge { .. })
    ));
    // The largest layout (a four-Galaxy mesh, 16x8, in one process) fits and reads back.
    let mut four_galaxies = info();
    four_galaxies.mesh_shape = (16, 8);
    let max = Publisher::create(&four_galaxies, MAX_CHIPS, MAX_LINKS).unwrap();
    let s = read_segment(max.name()).unwrap();
    assert_eq!((s.chips.len(), s.links.len()), (128, 2048));
}

#[test]
fn env_switch() {
    for off in ["0", "off", "OFF", "false", " no "] {
        let s = ttmesh_settings::Settings::from_lookup(|k| {
            (k == "TTMESH_MONITOR").then(|| off.to_string())
        });
        assert!(!s.monitor, "{off}");
    }
    for on in [None, Some("1"), Some(""), Some("yes")] {
        let s = ttmesh_settings::Settings::from_lookup(|k| {
            on.filter(|_| k == "TTMESH_MONITOR").map(str::to_string)
        });
        assert!(s.monitor, "{on:?}");
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Counters a real allocator can have: allocated and the largest free block within the
    /// capacity (or any, while the capacity is 0: not published yet).
    fn mem() -> impl Strategy<Value = MemoryCounters> {
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(allocated, capacity, live_buffers, peak, largest_free)| {
                let within = |v: u64| {
                    if capacity == 0 {
                        v
                    } else {
                        v % (capacity + 1).max(1)
                    }
                };
                MemoryCounters {
                    allocated: within(allocated),
                    capacity,
                    live_buffers,
                    peak,
                    largest_free: within(largest_free),
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_counters_round_trip(
            dram in mem(), l1 in mem(), l1_small in mem(), trace in mem(),
            traces in any::<u64>(), trace_bytes in any::<u64>(), replays in any::<u64>(),
            weights_bytes in any::<u64>(), kv_cache_bytes in any::<u64>(), host_bytes in any::<u64>(),
            id in any::<u32>(), r in 0u32..8, c in 0u32..8,
        ) {
            // A reader refuses a coordinate outside the mesh shape: the shape holds (r, c),
            // with a chip slot for each of its places.
            let mut i = info();
            i.mesh_shape = (r + 1, c + 1);
            let slots = ((r + 1) * (c + 1)) as usize;
            let p = Publisher::create(&i, slots, 0).unwrap();
            let chip = p.chip(0).unwrap();
            let want = ChipCounters {
                dram, l1, l1_small, trace, traces, trace_bytes, replays, weights_bytes, kv_cache_bytes,
                host_bytes,
            };
            chip.update(|x| *x = want);
            chip.set_identity(id, (r, c));
            let s = read_segment(p.name()).unwrap();
            prop_assert_eq!(s.chips[0].counters(), want);
            prop_assert_eq!((s.chips[0].id, s.chips[0].coord), (id, (r, c)));
        }
    }
}
