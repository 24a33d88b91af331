//! Publishes a made-up T3K (8 chips, 16 links) with churning counters for a few seconds, so
//! the monitor can be tried from another terminal:
//! `cargo run -p ttmesh-monitor --release --example fake_t3k -- 30` (seconds)
use std::time::{Duration, Instant};

use ttmesh_monitor::{MemoryCounters, MemoryKind, ProcessInfo, Publisher};

fn main() -> Result<(), ttmesh_monitor::MonitorError> {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let info = ProcessInfo::for_current_process("t3k", (2, 4), "wormhole_b0", "FABRIC_1D");
    let Some(p) = Publisher::create_from_env(&info, 8, 16)? else {
        println!("TTMESH_MONITOR=0: publishing is off");
        return Ok(());
    };
    println!("publishing {} for {secs} s", p.name());
    let mut chips: Vec<_> = (0..8).map(|i| p.chip_writer(i)).collect::<Result<_, _>>()?;
    let links: Vec<_> = (0..16).map(|j| p.link(j)).collect::<Result<_, _>>()?;
    for (j, l) in links.iter().enumerate() {
        let a = (j / 2) as u32 % 8;
        l.set_endpoints(a, 8 + (j % 2) as u32, (a + 1) % 8, 10 + (j % 2) as u32);
    }
    let dram_cap = 12 * 1_072_693_184u64 - 12 * 8 * 1024 * 1024;
    for c in chips.iter_mut() {
        c.set_capacity(MemoryKind::Dram, dram_cap);
        c.set_capacity(MemoryKind::L1, 64 * 1_393_312);
        c.set_capacity(MemoryKind::L1Small, 64 * 32 * 1024);
        c.set_capacity(MemoryKind::Trace, 96 * 1024 * 1024);
        c.set_memory(
            MemoryKind::Trace,
            &MemoryCounters {
                allocated: 16_252_928,
                capacity: 96 * 1024 * 1024,
                live_buffers: 1,
                peak: 16_252_928,
                largest_free: 96 * 1024 * 1024 - 16_252_928,
            },
        );
        c.set_traces(1, 16_050_000);
    }
    let start = Instant::now();
    let mut step = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        for (i, c) in chips.iter_mut().enumerate() {
            c.on_allocate(MemoryKind::Dram, (i as u64 + 1) << 24);
            c.on_allocate(MemoryKind::L1, 1 << 20);
            if step % 3 == 0 {
                c.on_deallocate(MemoryKind::L1, 1 << 20);
            }
            c.add_replays(1);
        }
        for l in links.iter().take(6) {
            l.add_traffic(64, 64 * 4352);
        }
        step += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
