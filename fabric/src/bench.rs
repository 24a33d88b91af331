//! `ttmesh bench fabric`: host bandwidth of the emulated fabric next to plain memcpy, in one
//! run so the ratio is fair on a noisy machine. Goal: 1 MiB between neighbours at least 0.5x
//! memcpy of 1 MiB buffers.

use crate::testing::MapMemory;
use crate::{ChipMemory, Fabric, FabricConfig, FabricSpec, NocAddr};
use std::fmt::Write;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// Best-of-`rounds` memcpy bandwidth of `MIB` buffers, `iters` copies per round.
fn memcpy_gbps(iters: usize, rounds: usize) -> f64 {
    let src: Vec<u8> = (0..MIB).map(|i| i as u8).collect();
    let mut dst = vec![0u8; MIB];
    dst.copy_from_slice(&src);
    let mut best = 0.0f64;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        }
        best = best.max(gbps(MIB * iters, t.elapsed()));
    }
    best
}

struct FabricRun {
    gbps: f64,
    modeled_gbps: f64,
    intact: bool,
}

/// Best-of-`rounds` bandwidth of `iters` 1 MiB writes from chip 0 to `dst` on a line of 8.
fn fabric_run(dst: u32, payload: usize, iters: usize, rounds: usize) -> Result<FabricRun, String> {
    let spec = FabricSpec::line(8, 1, false, FabricConfig::Fabric1D);
    let mems: Vec<Arc<MapMemory>> = (0..8).map(|_| Arc::new(MapMemory::new())).collect();
    let dyn_mems = mems
        .iter()
        .map(|m| m.clone() as Arc<dyn ChipMemory>)
        .collect();
    let fabric = Fabric::new(spec, dyn_mems).map_err(|e| e.to_string())?;
    let tx = fabric
        .sender(0)
        .and_then(|s| s.with_payload_size(payload))
        .map_err(|e| e.to_string())?;
    let data: Vec<u8> = (0..MIB).map(|i| (i * 7 + 3) as u8).collect();
    let at = NocAddr::dram(0, 0);
    let send = |n: usize| -> Result<Duration, String> {
        let t = Instant::now();
        for _ in 0..n {
            tx.unicast_write(dst, at, &data, 0)
                .map_err(|e| e.to_string())?;
        }
        tx.flush().map_err(|e| e.to_string())?;
        Ok(t.elapsed())
    };
    send(2)?; // warm-up: grows the destination bank once
    let mut best = 0.0f64;
    for _ in 0..rounds {
        best = best.max(gbps(MIB * iters, send(iters)?));
    }
    let intact = mems[dst as usize].read(at, MIB) == data;
    let modeled_ns = fabric
        .modeled_transfer_ns(0, dst, MIB)
        .map_err(|e| e.to_string())?;
    fabric.shutdown().map_err(|e| e.to_string())?;
    Ok(FabricRun {
        gbps: best,
        modeled_gbps: MIB as f64 / modeled_ns,
        intact,
    })
}

/// Runs the benchmark and returns a printable report. `quick` stays under a few seconds.
pub fn run(quick: bool) -> String {
    let (iters, rounds) = if quick { (8, 3) } else { (64, 5) };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fabric bench: 1 MiB messages, Wormhole link model, {} slots per channel, line of 8 chips",
        FabricSpec::DEFAULT_SLOTS
    );
    let mc = memcpy_gbps(iters * 4, rounds);
    let _ = writeln!(out, "  {:<34} {:>7.2} GB/s", "memcpy 1 MiB", mc);
    let mut cases = vec![(1u32, 4352usize), (7, 4352)];
    if !quick {
        cases.push((1, 7616));
        cases.push((7, 7616));
    }
    let mut neighbour_ratio = None;
    for (dst, payload) in cases {
        let label = format!(
            "fabric {dst} hop{} (0 -> {dst}), {payload} B",
            if dst == 1 { "" } else { "s" }
        );
        match fabric_run(dst, payload, iters, rounds) {
            Ok(r) => {
                let ratio = r.gbps / mc;
                if dst == 1 && payload == 4352 {
                    neighbour_ratio = Some(ratio);
                }
                let _ = writeln!(
                    out,
                    "  {label:<34} {:>7.2} GB/s  {ratio:.2}x memcpy  (modeled device {:.2} GB/s){}",
                    r.gbps,
                    r.modeled_gbps,
                    if r.intact { "" } else { "  DATA MISMATCH" }
                );
            }
            Err(e) => {
                let _ = writeln!(out, "  {label:<34} failed: {e}");
            }
        }
    }
    match neighbour_ratio {
        Some(r) => {
            let verdict = if r >= 0.5 { "met" } else { "NOT met" };
            let _ = writeln!(
                out,
                "  goal: neighbours >= 0.50x memcpy: {verdict} ({r:.2}x)"
            );
        }
        None => {
            let _ = writeln!(out, "  goal: neighbours >= 0.50x memcpy: not measured");
        }
    }
    out
}
