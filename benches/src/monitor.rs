//! What publishing costs next to what it accompanies. Prints; asserts nothing.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::Instant;

use ttmesh_monitor::read_segment;
use ttmesh_monitor::Publisher;
use ttmesh_monitor::{MemoryCounters, MemoryKind, ProcessInfo};

fn ns_per(iters: u64, f: impl FnMut(u64)) -> f64 {
    let mut f = f;
    // Warm up caches and branch predictors, then take the best of three runs (least noise).
    for i in 0..iters / 10 {
        f(i);
    }
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        for i in 0..iters {
            f(i);
        }
        best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    best
}

/// Cost of one chip-counter update (an allocate+free pair calls two) beside a Mutex-protected
/// HashMap insert+remove standing in for the allocate+free pair itself.
pub fn publish_cost(quick: bool) -> String {
    let iters: u64 = if quick { 200_000 } else { 5_000_000 };
    let info = ProcessInfo::for_current_process("bench", (1, 8), "wormhole_b0", "FABRIC_1D");
    let publisher = match Publisher::create(&info, 8, 16) {
        Ok(p) => p,
        Err(e) => return format!("publish_cost: cannot create a segment: {e}\n"),
    };
    let (chip, mut writer, link) = match (
        publisher.chip(3),
        publisher.chip_writer(4),
        publisher.link(5),
    ) {
        (Ok(c), Ok(w), Ok(l)) => (c, w, l),
        _ => return "publish_cost: segment has no chip 3, 4 or link 5\n".to_string(),
    };

    let alloc_free = ns_per(iters, |i| {
        chip.on_allocate(MemoryKind::Dram, black_box(4096 + (i & 7)));
        chip.on_deallocate(MemoryKind::Dram, black_box(4096 + (i & 7)));
    }) / 2.0;
    let exclusive = ns_per(iters, |i| {
        writer.on_allocate(MemoryKind::Dram, black_box(4096 + (i & 7)));
        writer.on_deallocate(MemoryKind::Dram, black_box(4096 + (i & 7)));
    }) / 2.0;
    let set_memory = ns_per(iters, |i| {
        let m = MemoryCounters {
            allocated: i,
            capacity: 1 << 30,
            live_buffers: i & 255,
            peak: i,
            largest_free: (1 << 30) - i,
        };
        chip.set_memory(MemoryKind::L1, black_box(&m));
    });
    let link_traffic = ns_per(iters, |i| link.add_traffic(1, black_box(4352 + (i & 1))));

    let map: Mutex<HashMap<u64, u64>> = Mutex::new(HashMap::with_capacity(1024));
    // Keep some live entries so the map is not trivially empty, as an allocator is not.
    for k in 0..256u64 {
        map.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k << 32, k);
    }
    let baseline = ns_per(iters, |i| {
        let key = black_box(0x1000_0000 + (i & 63));
        map.lock().unwrap_or_else(|e| e.into_inner()).insert(key, i);
        map.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    });

    let read_iters = if quick { 2_000 } else { 20_000 };
    let name = publisher.name().to_string();
    let mut read_ok = true;
    let read = ns_per(read_iters, |_| read_ok &= read_segment(&name).is_ok());

    let ratio = 2.0 * alloc_free / baseline * 100.0;
    let ratio_excl = 2.0 * exclusive / baseline * 100.0;
    let mut s = String::new();
    s.push_str(&format!("publish_cost ({iters} iterations, best of 3)\n"));
    s.push_str(&format!(
        "  ChipPublisher on_allocate / on_deallocate       {alloc_free:8.1} ns per update\n"
    ));
    s.push_str(&format!(
        "  ChipWriter (exclusive) on_allocate / on_deallocate {exclusive:4.1} ns per update\n"
    ));
    s.push_str(&format!(
        "  chip update set_memory (5 counters)            {set_memory:8.1} ns per update\n"
    ));
    s.push_str(&format!(
        "  link update add_traffic                        {link_traffic:8.1} ns per update\n"
    ));
    s.push_str(&format!(
        "  baseline Mutex<HashMap> insert+remove (pair)   {baseline:8.1} ns per pair\n"
    ));
    s.push_str(&format!(
        "  ratio: 2 updates per pair = {ratio:.1}% (ChipPublisher), {ratio_excl:.1}% (ChipWriter) of the baseline pair (goal: <= 10% of a 100-500 ns pair)\n"
    ));
    let vs = |ns: f64, pair: f64| 2.0 * ns / pair * 100.0;
    s.push_str(&format!(
        "  against the brief's 100 / 500 ns allocate+free pair: ChipPublisher {:.1}% / {:.1}%, ChipWriter {:.1}% / {:.1}%\n",
        vs(alloc_free, 100.0), vs(alloc_free, 500.0), vs(exclusive, 100.0), vs(exclusive, 500.0)
    ));
    s.push_str(&format!(
        "  reader: read_segment of 8 chips + 16 links     {:8.0} ns{}\n",
        read,
        if read_ok { "" } else { " (some reads failed)" }
    ));
    s
}
