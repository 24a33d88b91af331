//! Benchmarks of one chip, printed side by side with their goals. They measure
//! host wall time, so figures are noisy: nothing here asserts on speed. `quick` keeps each run
//! to a few seconds (the CI smoke test); the full run uses the goals' sizes.
//!
//! `chip_bench`: matmul on device tensors vs a bare `matrixmultiply::sgemm`, and allocator
//! allocate+free pairs with 1,000 live buffers.
//! `trace_bench`: untraced dispatch vs `execute_trace`, replay cost per command, the
//! sanitizer's cost, the trace digest's cost.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ttmesh_chip::allocator::{
    AllocationRequest, Allocator, AllocatorConfig, BufferType, MemSpace, Placement,
};
use ttmesh_chip::arch::ArchSpec;
use ttmesh_chip::device::{Chip, ChipConfig, CqId, TraceId, TraceInfo};
use ttmesh_chip::error::Result;
use ttmesh_chip::memory::chunk_size;
use ttmesh_chip::ops::{self, launch, Launch, LaunchSplit, MatmulConfig, OpOptions};
use ttmesh_chip::program::{program_key, Access, CoreSplit, Kernel, KernelContext};
use ttmesh_chip::tensor::{Blocking, DataType, HostTensor, Layout, MemoryConfig, Tensor};

/// Deterministic pseudo-random numbers (xorshift64*), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn goal(met: bool) -> &'static str {
    if met {
        "goal met"
    } else {
        "GOAL MISSED"
    }
}

pub fn open(trace_region_size: u64) -> Result<Arc<Chip>> {
    let mut cfg = ChipConfig::new(0, ArchSpec::wormhole_b0());
    cfg.trace_region_size = trace_region_size;
    Chip::open(cfg)
}

/// Chip matmul vs sgemm, and allocator throughput.
pub fn chip_bench(quick: bool) -> String {
    let mut out = String::new();
    if let Err(e) = chip_bench_into(quick, &mut out) {
        let _ = writeln!(out, "chip_bench failed: {e}");
    }
    out
}

fn quick_note(quick: bool, out: &mut String) {
    if quick {
        let _ = writeln!(
            out,
            "(quick mode: small sizes, few repetitions; figures are indicative only)"
        );
    }
}

fn chip_bench_into(quick: bool, out: &mut String) -> Result<()> {
    quick_note(quick, out);
    let chip = open(0)?;
    let sizes: &[(usize, usize)] = if quick {
        &[(256, 3), (512, 2)]
    } else {
        &[(512, 41), (2048, 5)]
    };
    let _ = writeln!(out, "matmul n x n x n, device tensors in DRAM (enqueue + finish) vs matrixmultiply::sgemm (goal >= 0.8x):");
    // Warm-up (thread pools, heap, clocks): whichever case ran first was measured slow.
    bench_matmul(
        &chip,
        sizes[0].0,
        if quick { 2 } else { 20 },
        DataType::Float32,
    )?;
    for &(n, reps) in sizes {
        for dtype in [DataType::BFloat16, DataType::Float32] {
            let (chip_gf, sgemm_gf) = bench_matmul(&chip, n, reps, dtype)?;
            let ratio = chip_gf / sgemm_gf;
            let _ = writeln!(
                out,
                "  n={n:<5} {:<9} chip {chip_gf:>7.1} GFLOP/s | sgemm f32 {sgemm_gf:>7.1} GFLOP/s | ratio {ratio:.2}x  {}",
                dtype.as_str(),
                goal(ratio >= 0.8)
            );
        }
    }
    let pairs = if quick { 200_000 } else { 2_000_000 };
    let (alloc_rate, chip_rate) = bench_alloc(&chip, pairs)?;
    let _ = writeln!(
        out,
        "allocate+free pairs with 1,000 live DRAM buffers (goal >= 1M/s):"
    );
    let _ = writeln!(
        out,
        "  allocator       {:>6.2} M pairs/s  {}",
        alloc_rate / 1e6,
        goal(alloc_rate >= 1e6)
    );
    let _ = writeln!(
        out,
        "  Chip (+events)  {:>6.2} M pairs/s  {}",
        chip_rate / 1e6,
        goal(chip_rate >= 1e6)
    );
    let with_data = bench_alloc_with_data(&chip, pairs / 4)?;
    let _ = writeln!(
        out,
        "  Chip, DRAM holding data {:>6.2} M pairs/s  (each free checks what host memory to return)",
        with_data / 1e6
    );
    Ok(())
}

pub fn bench_matmul(
    chip: &Arc<Chip>,
    n: usize,
    reps: usize,
    dtype: DataType,
) -> Result<(f64, f64)> {
    let mut rng = Rng(0x1234_5678 ^ n as u64);
    let a: Vec<f32> = (0..n * n).map(|_| rng.unit()).collect();
    let b: Vec<f32> = (0..n * n).map(|_| rng.unit()).collect();
    let ha = HostTensor::from_f32(vec![n, n], dtype, a.clone())?;
    let hb = HostTensor::from_f32(vec![n, n], dtype, b.clone())?;
    let cq = CqId(0);
    let ta = Tensor::from_host(&ha, chip, Layout::Tile, MemoryConfig::DRAM, cq)?;
    let tb = Tensor::from_host(&hb, chip, Layout::Tile, MemoryConfig::DRAM, cq)?;
    let first = ops::matmul(&ta, &tb, &MatmulConfig::default())?; // compile
    let cfg = MatmulConfig {
        options: OpOptions::into_output(&first),
        ..Default::default()
    };
    chip.finish(cq)?;
    let mut c = vec![0f32; n * n];
    sgemm(&a, &b, n, &mut c);
    ops::matmul(&ta, &tb, &cfg)?;
    chip.finish(cq)?;
    // Each in its steady state (blocks of BLOCK reps, each after an untimed warm-up), the
    // two alternating block by block so drift in a shared host's load hits both alike (two
    // halves were not enough: one run's 512 ratio swung 0.58-0.94 on a busy host); medians
    // compared.
    const BLOCK: usize = 8;
    let (mut on_chip, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..reps.div_ceil(BLOCK).max(2) {
        ops::matmul(&ta, &tb, &cfg)?;
        chip.finish(cq)?;
        for _ in 0..BLOCK {
            let t = Instant::now();
            ops::matmul(&ta, &tb, &cfg)?;
            chip.finish(cq)?;
            on_chip.push(t.elapsed());
        }
        sgemm(&a, &b, n, &mut c);
        for _ in 0..BLOCK {
            let t = Instant::now();
            sgemm(&a, &b, n, &mut c);
            bare.push(t.elapsed());
        }
    }
    let flops = 2.0 * (n as f64).powi(3);
    Ok((
        flops / median(&mut on_chip).as_secs_f64() / 1e9,
        flops / median(&mut bare).as_secs_f64() / 1e9,
    ))
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2)
        .copied()
        .unwrap_or(Duration::from_nanos(1))
        .max(Duration::from_nanos(1))
}

/// The bare sgemm the chip's matmul kernel calls (through its one safe wrapper).
fn sgemm(a: &[f32], b: &[f32], n: usize, c: &mut [f32]) {
    ttmesh_chip::compute::matmul(a, b, 1, 1, n, n, n, c).expect("square operands of one size");
}

/// Pairs per second: the bare allocator, and the chip's allocate/deallocate (which also emit
/// the allocator events and queue the host-memory discard).
pub fn bench_alloc(chip: &Arc<Chip>, pairs: usize) -> Result<(f64, f64)> {
    let mut alloc = Allocator::new(0, AllocatorConfig::new(ArchSpec::wormhole_b0()))?;
    let mut rng = Rng(42);
    let mut live = Vec::with_capacity(1000);
    for _ in 0..1000 {
        live.push(alloc.allocate(&alloc_request(&mut rng))?);
    }
    let t = Instant::now();
    for _ in 0..pairs {
        let i = rng.below(live.len() as u64) as usize;
        alloc.deallocate(&live[i])?;
        live[i] = alloc.allocate(&alloc_request(&mut rng))?;
    }
    let bare = pairs as f64 / t.elapsed().as_secs_f64();

    let via_chip = chip_pairs_per_second(chip, pairs / 4)?;
    Ok((bare, via_chip))
}

/// Chip allocate+free pairs when DRAM holds data (each free then checks what host memory it
/// can return), with the buffers freed and allocated unwritten as in `bench_alloc`.
pub fn bench_alloc_with_data(chip: &Arc<Chip>, pairs: usize) -> Result<f64> {
    // One written chunk high in bank 0, away from the buffers.
    chip.memory()
        .write(MemSpace::Dram, 0, 512 << 20, &[1u8; 64])?;
    let rate = chip_pairs_per_second(chip, pairs);
    chip.memory()
        .discard(MemSpace::Dram, 0, 512 << 20, chunk_size(MemSpace::Dram));
    rate
}

/// The benchmark's requests: DRAM buffers of 1 to 256 pages of 2 KiB.
fn alloc_request(rng: &mut Rng) -> AllocationRequest {
    AllocationRequest {
        buffer_type: BufferType::Dram,
        page_size: 2048,
        num_pages: 1 + rng.below(256),
        placement: Placement::Interleaved,
    }
}

/// `pairs` chip deallocate+allocate pairs among 1,000 live buffers, per second; every
/// buffer is freed and the queue finished afterwards.
fn chip_pairs_per_second(chip: &Arc<Chip>, pairs: usize) -> Result<f64> {
    let mut rng = Rng(42);
    let mut live = Vec::with_capacity(1000);
    for _ in 0..1000 {
        live.push(chip.allocate(&alloc_request(&mut rng))?);
    }
    let t = Instant::now();
    for _ in 0..pairs {
        let i = rng.below(live.len() as u64) as usize;
        chip.deallocate(&live[i])?;
        live[i] = chip.allocate(&alloc_request(&mut rng))?;
    }
    let rate = pairs as f64 / t.elapsed().as_secs_f64();
    for a in &live {
        chip.deallocate(a)?;
    }
    chip.finish(CqId(0))?;
    Ok(rate)
}

/// A kernel that does nothing: replaying it measures the dispatcher alone.
struct NoopKernel;

impl Kernel for NoopKernel {
    fn name(&self) -> &str {
        "Noop"
    }
    fn execute(&self, _ctx: &KernelContext, _addresses: &[u32]) -> Result<()> {
        Ok(())
    }
}

/// Untraced dispatch vs execute_trace, replay cost per command, sanitizer cost.
pub fn trace_bench(quick: bool) -> String {
    let mut out = String::new();
    if let Err(e) = trace_bench_into(quick, &mut out) {
        let _ = writeln!(out, "trace_bench failed: {e}");
    }
    out
}

/// The benchmark's model: a chain of `n` small eltwise ops, each allocating its output and
/// freeing its input, as a model's layers do.
fn run_chain(x: &Tensor, n: usize) -> Result<Tensor> {
    let mut cur = ops::relu(x, &OpOptions::default())?;
    for i in 1..n {
        cur = if i % 2 == 0 {
            ops::relu(&cur, &OpOptions::default())?
        } else {
            ops::add(&cur, x, &OpOptions::default())?
        };
    }
    Ok(cur)
}

fn trace_bench_into(quick: bool, out: &mut String) -> Result<()> {
    quick_note(quick, out);
    let chip = open(64 << 20)?;
    let cq = CqId(0);
    let host = HostTensor::from_f32(
        vec![32, 32],
        DataType::BFloat16,
        (0..1024).map(|i| (i % 7) as f32 - 3.0).collect(),
    )?;
    let x = Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::L1, cq)?;
    let _ = run_chain(&x, 2)?; // compile both programs
    chip.finish(cq)?;
    let _ = writeln!(out, "host times are measured with CQ 0 held by a blocking host callback, so the dispatcher's work does not share the cores with what is timed");

    // (a) + (c): untraced host dispatch of a 1,000-op program vs one execute_trace.
    let n_ops = 1000;
    let untraced = bench_dispatch(&chip, &x, n_ops, if quick { 3 } else { 10 })?;
    let (tid, keep) = capture(&chip, &x, n_ops)?;
    let exec_1000 = exec_host_time(&chip, tid, if quick { 20 } else { 200 })?;
    let idle = exec_from_idle(&chip, tid, if quick { 5 } else { 50 })?;
    let ratio = untraced.as_secs_f64() / exec_1000.as_secs_f64();
    let per_op = untraced.as_secs_f64() * 1e9 / n_ops as f64;
    let _ = writeln!(out, "(a) host time, 1,000-op program: untraced dispatch {:.1} us | execute_trace {:.2} us | {ratio:.0}x less (goal >= 1000x)  {}",
        untraced.as_secs_f64() * 1e6, exec_1000.as_secs_f64() * 1e6, goal(ratio >= 1000.0));
    let _ = writeln!(out, "    execute_trace to an idle (parked) dispatcher, waking it included: {:.2} us ({:.0}x less than untraced)",
        idle.as_secs_f64() * 1e6, untraced.as_secs_f64() / idle.as_secs_f64());
    chip.release_trace(tid)?;
    drop(keep);

    let (small, large) = if quick { (100, 2000) } else { (100, 10_000) };
    let mut times = Vec::new();
    for n in [small, large] {
        let (tid, keep) = capture(&chip, &x, n)?;
        times.push(exec_host_time(&chip, tid, if quick { 20 } else { 200 })?);
        chip.release_trace(tid)?;
        drop(keep);
    }
    let growth = times[1].as_secs_f64() / times[0].as_secs_f64();
    let _ = writeln!(out, "    execute_trace host time: {small} ops {:.2} us | {large} ops {:.2} us | ratio {growth:.2} (goal: does not grow)  {}",
        times[0].as_secs_f64() * 1e6, times[1].as_secs_f64() * 1e6, goal(growth < 1.5));

    // (b): replay cost per command with a kernel that does nothing.
    let (ns_per_record, ns_per_op) = bench_replay(&chip, &x, if quick { 2000 } else { 10_000 }, 5)?;
    let _ = writeln!(out, "(b) replay from the trace buffer, kernels excluded: {ns_per_record:.1} ns per command (record), {ns_per_op:.1} ns per launch (3 records; goal <= 50 ns per command)  {}",
        goal(ns_per_record <= 50.0));
    let _ = writeln!(out, "(c) untraced host dispatch: {per_op:.0} ns per op (goal <= 1000 ns per op per chip; tt-metal C++ 13-19 us)  {}", goal(per_op <= 1000.0));

    // Sanitizer cost per execute_trace.
    let (tid, keep) = capture(&chip, &x, n_ops)?;
    let reps = if quick { 20 } else { 200 };
    chip.set_replay_sanitizer(false);
    let off = exec_host_time(&chip, tid, reps)?;
    chip.set_replay_sanitizer(true);
    let cached = exec_host_time(&chip, tid, reps)?;
    // Force a full check each time: an unrelated allocation moves the allocator's generation.
    let full = held(&chip, || {
        let mut full = Duration::ZERO;
        for _ in 0..reps {
            drop(Tensor::allocate(&chip, x.spec().clone())?);
            let s = Instant::now();
            chip.execute_trace(tid, cq, Blocking::No)?;
            full += s.elapsed();
        }
        Ok(full / reps as u32)
    })?;
    let _ = writeln!(out, "sanitizer per execute_trace (1,000-op trace): off {:.2} us | on, nothing moved {:.2} us | on, full check {:.2} us",
        off.as_secs_f64() * 1e6, cached.as_secs_f64() * 1e6, full.as_secs_f64() * 1e6);
    chip.release_trace(tid)?;
    drop(keep);

    // A trace that guards 1,000 distinct live buffers (every op writes its own output).
    let mut in_dram = x.spec().clone();
    in_dram.memory_config = MemoryConfig::DRAM;
    let outs: Vec<Tensor> = (0..n_ops)
        .map(|_| Tensor::allocate(&chip, in_dram.clone()))
        .collect::<Result<_>>()?;
    ops::relu(&x, &OpOptions::into_output(&outs[0]))?; // compile
    let tid = chip.begin_trace_capture(cq)?;
    for o in &outs {
        ops::relu(&x, &OpOptions::into_output(o))?;
    }
    chip.end_trace_capture(tid, cq)?;
    let full = held(&chip, || {
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            drop(Tensor::allocate(&chip, x.spec().clone())?);
            let s = Instant::now();
            chip.execute_trace(tid, cq, Blocking::No)?;
            times.push(s.elapsed());
        }
        Ok(median(&mut times))
    })?;
    chip.set_replay_sanitizer(false);
    let off = exec_host_time(&chip, tid, reps)?;
    chip.set_replay_sanitizer(true);
    let _ = writeln!(out, "sanitizer with 1,001 guarded buffers: off {:.2} us | on, full check {:.2} us per execute_trace",
        off.as_secs_f64() * 1e6, full.as_secs_f64() * 1e6);
    chip.release_trace(tid)?;
    drop(outs);

    digest_report(&chip, &x, quick, out)
}

/// Replay times with the trace digest off and on, side by side, as [kept, re-read][off, on]:
/// each the median of `rounds` alternated blocks (their order swapped every round) of `per_round` replays (after one unmeasured
/// replay, as switching the digest on makes the next replay read and check the bytes).
/// Kept: nothing wrote to the TRACE region between replays, so the dispatcher runs the bytes
/// it read (and checked) before: every replay of a `run`. Re-read: `force` writes into the
/// TRACE region beside the trace before each replay, so every replay reads the bytes from
/// DRAM again and, with the digest on, hashes them: its whole cost.
pub fn digest_side_by_side(
    set_digest: &dyn Fn(bool),
    force: &dyn Fn() -> Result<(), String>,
    replay: &mut dyn FnMut() -> Result<Duration, String>,
    (rounds, per_round): (usize, usize),
) -> Result<[[Duration; 2]; 2], String> {
    let mut samples: [[Vec<Duration>; 2]; 2] = Default::default();
    for round in 0..rounds {
        for reread in [false, true] {
            // Off first in even rounds, on first in odd ones: neither gets the other's wake.
            for on in [round % 2 == 1, round % 2 == 0] {
                set_digest(on);
                replay()?;
                let mut block = Vec::with_capacity(per_round);
                for _ in 0..per_round {
                    if reread {
                        force()?;
                    }
                    block.push(replay()?);
                }
                samples[usize::from(reread)][usize::from(on)].push(median(&mut block));
            }
        }
    }
    set_digest(true);
    Ok(samples.map(|row| row.map(|mut v| median(&mut v))))
}

/// A write of 64 B into `chip`'s TRACE region next to the trace at `info` (not into it),
/// which makes the next replay read the trace's bytes from DRAM again; an error if the
/// region has no room beside the trace or the write did not count as one into the region.
pub fn force_trace_reread(chip: &Chip, info: &TraceInfo) -> Result<(), String> {
    let per_bank = info.buffer_size / chip.arch().num_dram_banks as u64;
    let top = chip.memory().bank_size(MemSpace::Dram);
    let at = if info.address + per_bank + 64 <= top {
        info.address + per_bank
    } else {
        info.address - 64
    };
    let before = chip.memory().watched_epoch();
    chip.memory()
        .write(MemSpace::Dram, 0, at, &[0; 64])
        .map_err(|e| e.to_string())?;
    if chip.memory().watched_epoch() == before {
        return Err(format!(
            "a write at {at:#x} beside trace {} did not reach the TRACE region; give it more room",
            info.id
        ));
    }
    Ok(())
}

/// One line of the digest's cost: replay times off and on, kept and re-read.
pub fn digest_line(what: &str, t: &[[Duration; 2]; 2]) -> String {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let pct = |row: &[Duration; 2]| (us(row[1]) / us(row[0]) - 1.0) * 100.0;
    format!(
        "{what}: kept bytes (every replay of a run): off {:.1} us | on {:.1} us ({:+.1}%); re-read every replay: off {:.1} us | on {:.1} us ({:+.1}%)",
        us(t[0][0]),
        us(t[0][1]),
        pct(&t[0]),
        us(t[1][0]),
        us(t[1][1]),
        pct(&t[1])
    )
}

/// (d): the trace digest's cost per replay, on one chip and for the `run` block on a T3K.
fn digest_report(chip: &Arc<Chip>, x: &Tensor, quick: bool, out: &mut String) -> Result<()> {
    let cq = CqId(0);
    let shape = if quick { (3, 10) } else { (9, 20) };
    let _ = writeln!(out, "(d) trace digest (xxh3-64 of the trace's bytes, checked when a replay reads them from DRAM), off vs on, medians of {} alternated rounds of {} replays:", shape.0, shape.1);
    let chain_replay = |tid: TraceId| {
        move || -> Result<Duration, String> {
            chip.execute_trace(tid, cq, Blocking::Yes)
                .map_err(|e| e.to_string())?;
            Ok(chip.last_replay(tid).map_or(Duration::ZERO, |(_, d)| d))
        }
    };
    let mut measure = |what: String, tid: TraceId| -> Result<()> {
        let info = chip
            .trace_info(tid)
            .ok_or_else(|| ttmesh_chip::ChipError::Trace("trace vanished".into()))?;
        let line = digest_side_by_side(
            &|on| chip.set_trace_digest(on),
            &|| force_trace_reread(chip, &info),
            &mut chain_replay(tid),
            shape,
        )
        .map(|t| {
            digest_line(
                &format!(
                    "{what}, {} KiB trace, replay wall",
                    info.command_bytes / 1024
                ),
                &t,
            )
        })
        .unwrap_or_else(|e| format!("{what}: failed: {e}"));
        let _ = writeln!(out, "    {line}");
        Ok(())
    };
    let n_ops = 1000;
    let (tid, keep) = capture(chip, x, n_ops)?;
    measure(format!("{n_ops}-op eltwise chain (one chip)"), tid)?;
    chip.release_trace(tid)?;
    drop(keep);
    let n = if quick { 2000 } else { 10_000 };
    let tid = capture_noops(chip, x, n)?;
    measure(
        format!("{n} no-op launches (one chip, dispatcher only)"),
        tid,
    )?;
    // The hash alone over those bytes, for a figure the shared host's noise does not swamp.
    if let Some(info) = chip.trace_info(tid) {
        let bytes = chip.read_trace_commands(&info)?;
        let mut times: Vec<Duration> = (0..shape.0 * shape.1)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(ttmesh_chip::device::trace_digest(std::hint::black_box(
                    &bytes,
                )));
                t.elapsed()
            })
            .collect();
        let t = median(&mut times);
        let _ = writeln!(
            out,
            "    the digest alone over that trace's {} KiB: {:.1} us ({:.1} GB/s)",
            bytes.len() / 1024,
            t.as_secs_f64() * 1e6,
            bytes.len() as f64 / t.as_secs_f64() / 1e9
        );
    }
    chip.release_trace(tid)?;
    let block = crate::replay::digest_cost("t3k", (32, 512, 2048), shape);
    let line = block
        .map(|c| {
            let what = format!(
                "run block (t3k, 32x512x2048, ttmesh run's defaults; {} B trace per chip at most, kept between replays: {}), replay + finish",
                c.largest_trace_bytes,
                if c.kept { "yes" } else { "NO" }
            );
            // The side-by-side walls differ by the host's noise; the hashes alone are the cost.
            let share = c.hashes_alone.as_secs_f64() / c.times[1][0].as_secs_f64() * 100.0;
            format!(
                "{}\n    run block: the digest alone, all 8 chips' traces one after another: {:.2} us = {share:.3}% of a re-read replay, and 0 on a replay that keeps its bytes (goal: < 5% of a run replay)  {}",
                digest_line(&what, &c.times),
                c.hashes_alone.as_secs_f64() * 1e6,
                goal(share < 5.0)
            )
        })
        .unwrap_or_else(|e| format!("run block: failed: {e}"));
    let _ = writeln!(out, "    {line}");
    Ok(())
}

/// Host time of enqueueing the chain of `n_ops` ops untraced, with the queue held so its
/// dispatcher does not share the cores: the best of `runs`.
pub fn bench_dispatch(chip: &Arc<Chip>, x: &Tensor, n_ops: usize, runs: usize) -> Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let (e, y) = held(chip, || {
            let t = Instant::now();
            let y = run_chain(x, n_ops)?;
            Ok((t.elapsed(), y))
        })?;
        drop(y);
        best = best.min(e);
    }
    Ok(best)
}

/// Runs `f` while CQ 0 is held by a host callback that blocks until `f` returns, then lets
/// the queue run everything `f` enqueued and waits for it.
fn held<R>(chip: &Arc<Chip>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    chip.enqueue_host_callback(CqId(0), move || {
        let _ = started_tx.send(());
        let _ = wait.recv_timeout(Duration::from_secs(60));
        Ok(())
    })?;
    // Wait until the dispatcher sits in the callback (it is then neither parked nor busy).
    let _ = started.recv_timeout(Duration::from_secs(60));
    let r = f();
    let _ = release.send(());
    chip.finish(CqId(0))?;
    r
}

/// Captures the chain of `n` ops; returns the trace and its output (kept alive).
fn capture(chip: &Arc<Chip>, x: &Tensor, n: usize) -> Result<(TraceId, Tensor)> {
    let tid = chip.begin_trace_capture(CqId(0))?;
    let y = run_chain(x, n)?;
    chip.end_trace_capture(tid, CqId(0))?;
    chip.execute_trace(tid, CqId(0), Blocking::Yes)?;
    Ok((tid, y))
}

/// Median host time of one non-blocking execute_trace, over `reps` back-to-back calls made
/// while the queue is held (the first calls after a big replay pay its cache misses).
fn exec_host_time(chip: &Arc<Chip>, tid: TraceId, reps: usize) -> Result<Duration> {
    held(chip, || {
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            chip.execute_trace(tid, CqId(0), Blocking::No)?;
            times.push(t.elapsed());
        }
        Ok(median(&mut times))
    })
}

/// Median host time of one non-blocking execute_trace to a parked dispatcher.
fn exec_from_idle(chip: &Arc<Chip>, tid: TraceId, reps: usize) -> Result<Duration> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        chip.finish(CqId(0))?;
        std::thread::sleep(Duration::from_millis(1));
        let t = Instant::now();
        chip.execute_trace(tid, CqId(0), Blocking::No)?;
        times.push(t.elapsed());
    }
    chip.finish(CqId(0))?;
    Ok(median(&mut times))
}

/// Captures `n` launches of a kernel that does nothing, over 64 cores.
fn capture_noops(chip: &Arc<Chip>, x: &Tensor, n: usize) -> Result<TraceId> {
    let cq = CqId(0);
    let operands = [(x, Access::Read), (x, Access::Write)];
    let noop = Launch {
        name: "Noop",
        key: program_key(&"bench-noop"),
        operands: &operands,
        split: LaunchSplit::Cores(CoreSplit {
            cores: 64,
            units_per_core: 1,
            args_per_core: 6,
        }),
        cq,
    };
    let run = || launch(&noop, || "noop".into(), || Ok(Arc::new(NoopKernel)));
    run()?; // compiles: a capture may only hit the program cache
    chip.finish(cq)?;
    let tid = chip.begin_trace_capture(cq)?;
    for _ in 0..n {
        run()?;
    }
    chip.end_trace_capture(tid, cq)?;
    Ok(tid)
}

/// Replay cost per record of a trace of `n` no-op launches, kernels excluded: the best of
/// `reps` replays (ns per record, ns per launch).
pub fn bench_replay(chip: &Arc<Chip>, x: &Tensor, n: usize, reps: usize) -> Result<(f64, f64)> {
    let cq = CqId(0);
    let tid = capture_noops(chip, x, n)?;
    chip.execute_trace(tid, cq, Blocking::Yes)?; // warm
    let mut best = f64::MAX;
    for _ in 0..reps {
        let before = chip.dispatch_stats();
        chip.execute_trace(tid, cq, Blocking::Yes)?;
        let after = chip.dispatch_stats();
        let (records, wall) = chip.last_replay(tid).unwrap_or((1, Duration::ZERO));
        let kernels = after.kernel_ns - before.kernel_ns;
        let ns = (wall.as_nanos() as f64 - kernels as f64).max(0.0) / records.max(1) as f64;
        best = best.min(ns);
    }
    chip.release_trace(tid)?;
    Ok((best, best * 3.0))
}
