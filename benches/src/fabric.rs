//! `ttmesh bench fabric`: host bandwidth of the emulated fabric next to plain memcpy, in one
//! run. Rounds interleave memcpy and every fabric case and each keeps its best round, so a
//! noisy machine skews both sides alike. Goal: 1 MiB between neighbours at least 0.5x memcpy
//! of 1 MiB buffers.

use std::fmt::Write;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use ttmesh_fabric::testing::MapMemory;
use ttmesh_fabric::{ChipMemory, Fabric, FabricConfig, FabricSender, FabricSpec, NocAddr};

const MIB: usize = 1 << 20;

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

struct Memcpy {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl Memcpy {
    fn new() -> Self {
        let src: Vec<u8> = (0..MIB).map(|i| i as u8).collect();
        let dst = src.clone();
        Self { src, dst }
    }
    fn round(&mut self, iters: usize) -> f64 {
        let t = Instant::now();
        for _ in 0..iters {
            self.dst.copy_from_slice(black_box(&self.src));
            black_box(&mut self.dst);
        }
        gbps(MIB * iters, t.elapsed())
    }
}

/// 1 MiB writes from chip 0 to `dst` on a line of 8 Wormhole chips.
struct Case {
    dst: u32,
    payload: usize,
    fabric: Fabric,
    tx: FabricSender,
    mem: Arc<MapMemory>,
    data: Vec<u8>,
    best: f64,
}

const AT: NocAddr = NocAddr {
    space: ttmesh_fabric::MemSpace::Dram,
    bank: 0,
    addr: 0,
};

impl Case {
    fn new(dst: u32, payload: usize) -> Result<Self, String> {
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
        let data = (0..MIB).map(|i| (i * 7 + 3) as u8).collect();
        let mut case = Self {
            dst,
            payload,
            fabric,
            tx,
            mem: mems[dst as usize].clone(),
            data,
            best: 0.0,
        };
        case.send(2)?; // warm-up: grows the destination bank once
        Ok(case)
    }

    fn send(&mut self, n: usize) -> Result<Duration, String> {
        let t = Instant::now();
        for _ in 0..n {
            self.tx
                .unicast_write(self.dst, AT, &self.data, 0)
                .map_err(|e| e.to_string())?;
        }
        self.tx.flush().map_err(|e| e.to_string())?;
        Ok(t.elapsed())
    }

    fn round(&mut self, iters: usize) -> Result<(), String> {
        let t = self.send(iters)?;
        self.best = self.best.max(gbps(MIB * iters, t));
        Ok(())
    }

    fn label(&self) -> String {
        let s = if self.dst == 1 { "" } else { "s" };
        format!(
            "fabric {} hop{s} (0 -> {}), {} B",
            self.dst, self.dst, self.payload
        )
    }
}

/// Runs the benchmark and returns a printable report. `quick` stays under a few seconds.
pub fn run(quick: bool) -> String {
    let (iters, rounds) = if quick { (16, 5) } else { (32, 9) };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fabric bench: 1 MiB messages, Wormhole link model, {} slots per channel, line of 8 \
         chips, best of {rounds} interleaved rounds",
        FabricSpec::DEFAULT_SLOTS
    );
    let mut specs = vec![(1u32, 4352usize), (7, 4352)];
    if !quick {
        specs.extend([(1, 7616), (7, 7616)]);
    }
    let mut cases = Vec::new();
    for (dst, payload) in specs {
        match Case::new(dst, payload) {
            Ok(c) => cases.push(c),
            Err(e) => {
                let _ = writeln!(out, "  fabric 0 -> {dst}, {payload} B: setup failed: {e}");
            }
        }
    }
    let mut mc = Memcpy::new();
    let mut mc_best = 0.0f64;
    let mut failed: Vec<Option<String>> = vec![None; cases.len()];
    for _ in 0..rounds {
        mc_best = mc_best.max(mc.round(iters * 4));
        for (c, f) in cases.iter_mut().zip(failed.iter_mut()) {
            if f.is_none() {
                if let Err(e) = c.round(iters) {
                    *f = Some(e);
                }
            }
        }
    }
    let _ = writeln!(out, "  {:<34} {:>7.2} GB/s", "memcpy 1 MiB", mc_best);
    let mut neighbour_ratio = None;
    for (c, f) in cases.iter().zip(&failed) {
        if let Some(e) = f {
            let _ = writeln!(out, "  {:<34} failed: {e}", c.label());
            continue;
        }
        let ratio = c.best / mc_best;
        if c.dst == 1 && c.payload == 4352 {
            neighbour_ratio = Some(ratio);
        }
        let modeled = c
            .fabric
            .modeled_transfer_ns(0, c.dst, MIB)
            .map(|ns| MIB as f64 / ns)
            .unwrap_or(0.0);
        let intact = c.mem.read(AT, MIB) == c.data;
        let _ = writeln!(
            out,
            "  {:<34} {:>7.2} GB/s  {ratio:.2}x memcpy  (modeled device {modeled:.2} GB/s){}",
            c.label(),
            c.best,
            if intact { "" } else { "  DATA MISMATCH" }
        );
    }
    let verdict = match neighbour_ratio {
        Some(r) if r >= 0.5 => format!("met ({r:.2}x)"),
        Some(r) => format!("NOT met ({r:.2}x)"),
        None => "not measured".to_string(),
    };
    let _ = writeln!(out, "  goal: neighbours >= 0.50x memcpy: {verdict}");
    for c in &cases {
        let _ = c.fabric.shutdown();
    }
    out
}
