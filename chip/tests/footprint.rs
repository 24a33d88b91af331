//! A Galaxy-sized set of chips (32 Wormholes, 384 GiB of DRAM, 100 MB trace regions) opens,
//! works and closes on an ordinary host: only live data costs host memory, and idle
//! dispatchers sleep. Its own test binary, so the process's memory is this test's alone.

mod common;

use std::sync::Arc;
use std::time::Duration;
use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::memory::chunk_size;
use ttmesh_chip::Blocking;

use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::{
    ArchSpec, BufferType, Chip, ChipConfig, CqId, DataType, HostTensor, Layout, MemoryConfig,
    Tensor, TensorSpec,
};

/// A field of /proc/self/status in KiB (VmRSS, VmHWM).
fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// CPU time of this process (user + system) from /proc/self/stat, in clock ticks.
fn cpu_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn thirty_two_chips_open_work_and_close_without_touching_gigabytes() {
    let chips: Vec<Arc<Chip>> = (0..32)
        .map(|id| {
            let mut cfg = ChipConfig::new(id, ArchSpec::wormhole_b0());
            cfg.trace_region_size = 100_000_000;
            cfg.num_command_queues = 2;
            Chip::open(cfg).unwrap()
        })
        .collect();
    let dram_total: u64 = chips
        .iter()
        .map(|c| c.statistics(BufferType::Dram).total_allocatable_size_bytes * 12)
        .sum();
    assert!(dram_total > 380 << 30, "384 GiB of DRAM emulated");

    // A few buffers per chip, written and computed on, and a trace.
    let data = common::values(1, 512 * 512, -1.0, 1.0);
    let host = HostTensor::from_f32(vec![512, 512], DataType::BFloat16, data).unwrap();
    let l1 = OpOptions {
        memory_config: Some(MemoryConfig::L1),
        ..Default::default()
    };
    let mut keep = Vec::new();
    for chip in &chips {
        let x = Tensor::from_host(&host, chip, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap();
        let y = ops::relu(&x, &l1).unwrap();
        let _ = ops::relu(&y, &OpOptions::default()).unwrap(); // compile before capture
        let tid = chip.begin_trace_capture(CqId(0)).unwrap();
        let z = ops::relu(&y, &OpOptions::default()).unwrap();
        chip.end_trace_capture(tid, CqId(0)).unwrap();
        chip.execute_trace(tid, CqId(0), Blocking::No).unwrap();
        // A large buffer allocated but never written costs nothing.
        let spec = TensorSpec::new(
            vec![16384, 16384],
            DataType::Float32,
            Layout::Tile,
            MemoryConfig::DRAM,
        );
        let big = Tensor::allocate(chip, spec).unwrap();
        keep.push((x, y, z, big));
    }
    for chip in &chips {
        chip.synchronize().unwrap();
    }
    let resident: u64 = chips.iter().map(|c| c.memory().resident_bytes()).sum();
    let rss = status_kib("VmRSS:");
    println!("32 chips: backing memory {resident} B, VmRSS {rss} KiB");
    // Per chip: 512 KiB input in 64 KiB DRAM chunks, 512 KiB L1 twice in 16 KiB ones, and the
    // trace.
    assert!(
        resident < 128 << 20,
        "backing memory {resident} B for 32 chips"
    );
    assert!(rss < 500 << 10, "VmRSS {rss} KiB with 32 chips open");
    let out = ops::relu(&keep[31].2, &OpOptions::default()).unwrap();
    let first = out.to_host(CqId(0)).unwrap().to_f32_vec()[0];
    assert_eq!(first, host.as_f32().unwrap()[0].max(0.0));
    drop(out);

    // 64 idle dispatchers park: the process burns (almost) no CPU while nothing is queued.
    let before = cpu_ticks();
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu_ticks() - before;
    assert!(
        used < 25,
        "idle dispatchers used {used} ticks in 0.5 s: they should sleep"
    );

    // Freed buffers give their host memory back (the traces stay: their buffers are live).
    drop(keep);
    for chip in &chips {
        chip.synchronize().unwrap();
    }
    let after: u64 = chips.iter().map(|c| c.memory().resident_bytes()).sum();
    println!("after freeing: backing memory {after} B");
    // What stays is each trace's bytes: at most a DRAM chunk per bank per chip.
    let traces: u64 = chips
        .iter()
        .map(|c| c.memory().num_banks(MemSpace::Dram) as u64 * chunk_size(MemSpace::Dram))
        .sum();
    assert!(
        after <= traces && after < resident / 4,
        "after freeing: {after} B (was {resident} B; the traces' chunks are {traces} B)"
    );
    for chip in &chips {
        chip.close().unwrap();
    }
    drop(chips);
    assert!(
        status_kib("VmHWM:") < 500 << 10,
        "peak RSS stayed under 500 MiB"
    );
}
