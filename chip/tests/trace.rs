//! Metal Trace on one chip: sizes exactly as FACTS.md, the bytes really in DRAM, replays that
//! compute the right thing, and every rule's error with tt-metal's wording.

mod common;

use common::{chip_with, read, upload, values};
use proptest::prelude::*;
use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::command::{record_size, Record, RecordIter};
use ttmesh_chip::compute::reference;
use ttmesh_chip::device::{trace_page_size, ACTIVE_TRACE_ALLOCATION_WARNING};
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::Blocking;
use ttmesh_chip::{
    BufferType, Chip, ChipError, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor, TraceId,
};

const CQ0: CqId = CqId(0);

/// A relu launch on one tile: config image 192 B, 1 core x 5 runtime args, go signal.
const RELU_LAUNCH_BYTES: u64 = 208 + 48 + 16;

fn relu_chain(x: &Tensor, n: usize) -> Tensor {
    let mut y = ops::relu(x, &OpOptions::default()).unwrap();
    for _ in 1..n {
        y = ops::relu(&y, &OpOptions::default()).unwrap();
    }
    y
}

fn one_tile(chip: &std::sync::Arc<Chip>) -> Tensor {
    upload(
        chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(1, 1024, -1.0, 1.0),
    )
    .0
}

/// Naive page choice: least padding to a multiple of 12 * page, ties to the larger page.
fn naive_page(size: u64) -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for page in [1024u64, 2048, 4096] {
        let padded = size.div_ceil(12 * page) * 12 * page;
        if padded - size <= best.2 {
            best = (page, padded, padded - size);
        }
    }
    (best.0, best.1)
}

#[test]
fn trace_page_size_examples() {
    assert_eq!(
        trace_page_size(12 * 4096, 12),
        (4096, 12 * 4096),
        "no waste anywhere: ties go to 4096"
    );
    assert_eq!(trace_page_size(1, 12), (1024, 12 * 1024));
    assert_eq!(
        trace_page_size(12 * 3072, 12),
        (1024, 12 * 3072),
        "only 1 KiB pages fit exactly"
    );
    assert_eq!(trace_page_size(12 * 2048 + 1, 12), (1024, 12 * 3072));
    assert_eq!(trace_page_size(24 * 2048, 12), (4096, 24 * 2048));
    assert_eq!(
        trace_page_size(100, 8),
        (1024, 8192),
        "Blackhole has 8 banks"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(1000), ..ProptestConfig::default() })]
    #[test]
    fn trace_page_size_matches_the_rule(size in 1u64..10_000_000) {
        prop_assert_eq!(trace_page_size(size, 12), naive_page(size));
    }
}

#[test]
fn trace_size_is_command_bytes_plus_exec_buf_end_padded_to_pages() {
    let chip = chip_with(|c| c.trace_region_size = 4 << 20);
    let x = one_tile(&chip);
    let _ = relu_chain(&x, 1); // compile
    for n in [1usize, 7, 100, 1000] {
        let tid = chip.begin_trace_capture(CQ0).unwrap();
        let _y = relu_chain(&x, n);
        chip.end_trace_capture(tid, CQ0).unwrap();
        let info = chip.trace_info(tid).unwrap();
        // Launch record (16 + 192), runtime args (16 + 5 x 4 padded to 32), go signal (16).
        assert_eq!(
            RELU_LAUNCH_BYTES as usize,
            record_size(192) + record_size(20) + record_size(0)
        );
        let size = n as u64 * RELU_LAUNCH_BYTES + 16;
        assert_eq!(info.command_bytes, size, "{n} launches + EXEC_BUF_END");
        let (page, padded) = naive_page(size);
        assert_eq!(
            (info.page_size, info.buffer_size, info.num_pages),
            (page, padded, padded / page)
        );
        assert_eq!(info.commands, n as u64);
        assert_eq!(chip.trace_stats().trace_buffers_size, padded);
        let st = chip.statistics(BufferType::Trace);
        assert_eq!(
            st.total_allocated_bytes,
            padded / 12,
            "interleaved over the 12 banks"
        );
        assert_eq!(
            info.address,
            (1 << 30) - st.total_allocatable_size_bytes,
            "first trace at the region's bottom"
        );

        // The bytes are in DRAM, interleaved: read them back and decode them.
        let mut bytes = vec![0u8; padded as usize];
        for (p, chunk) in bytes.chunks_mut(page as usize).enumerate() {
            let (bank, addr) = ((p % 12) as u32, info.address + (p / 12) as u64 * page);
            chip.memory()
                .read(MemSpace::Dram, bank, addr, chunk)
                .unwrap();
        }
        let recs: Vec<Record> = RecordIter::new(&bytes[..size as usize])
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(recs.len(), 3 * n + 1);
        assert_eq!(recs.last(), Some(&Record::ExecBufEnd));
        assert!(matches!(recs[0], Record::LaunchProgram { cores: 1, .. }));
        chip.release_trace(tid).unwrap();
    }
}

/// Opens a chip with `region`, captures `ops_per_trace` traces in turn; returns the too-small
/// error's size, if any.
fn capture_all(region: u64, ops_per_trace: &[usize]) -> Result<Vec<TraceId>, u64> {
    let chip = chip_with(|c| c.trace_region_size = region);
    let x = one_tile(&chip);
    let _ = relu_chain(&x, 1);
    let mut tids = Vec::new();
    for &n in ops_per_trace {
        let tid = chip.begin_trace_capture(CQ0).unwrap();
        let _y = relu_chain(&x, n);
        match chip.end_trace_capture(tid, CQ0) {
            Ok(()) => tids.push(tid),
            Err(e) => {
                let msg = e.to_string();
                let n: u64 = msg
                    .strip_prefix("Creating trace buffers of size ")
                    .and_then(|r| r.split('B').next())
                    .unwrap()
                    .parse()
                    .unwrap();
                let exact = format!("Creating trace buffers of size {n}B on device 0, but only {region}B is allocated for trace region.");
                assert!(msg.starts_with(&exact), "{msg}");
                assert!(
                    msg.contains(&format!("trace_region_size of at least {n}")),
                    "the hint names the size: {msg}"
                );
                assert!(
                    !chip.is_capturing(CQ0),
                    "a failed end still ends the capture"
                );
                return Err(n);
            }
        }
    }
    Ok(tids)
}

#[test]
fn too_small_region_names_a_size_that_then_suffices() {
    // 100 relu launches: 27,216 B -> 12 pages of 4 KiB = 49,152 B... whatever the rule picks.
    let need = capture_all(0, &[100]).unwrap_err();
    let size = 100 * RELU_LAUNCH_BYTES + 16;
    assert_eq!(need, naive_page(size).1);
    assert_eq!(capture_all(need, &[100]).unwrap().len(), 1);
    assert!(capture_all(need - 1, &[100]).is_err());
    // Two traces: the second names the running total.
    let need2 = capture_all(need, &[100, 30]).unwrap_err();
    assert_eq!(need2, need + naive_page(30 * RELU_LAUNCH_BYTES + 16).1);
    assert_eq!(capture_all(need2, &[100, 30]).unwrap().len(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(6), ..ProptestConfig::default() })]
    /// FACTS.md's rule: passing the named size back as trace_region_size always suffices.
    #[test]
    fn the_named_size_always_suffices(traces in proptest::collection::vec(1usize..400, 1..4)) {
        let mut region = 0;
        loop {
            match capture_all(region, &traces) {
                Ok(t) => { prop_assert_eq!(t.len(), traces.len()); break; }
                Err(n) => { prop_assert!(n > region); region = n; }
            }
        }
    }
}

#[test]
fn io_and_events_during_capture_are_refused_with_tt_metals_words() {
    let chip = chip_with(|c| {
        c.trace_region_size = 1 << 20;
        c.num_command_queues = 2;
    });
    let x = one_tile(&chip);
    let _ = relu_chain(&x, 1);
    let ev = chip.create_event();
    chip.record_event(CqId(1), &ev).unwrap();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let host = HostTensor::zeros(vec![32, 32], DataType::BFloat16);
    let starts = |r: Result<(), ChipError>, text: &str| {
        let msg = r.unwrap_err().to_string();
        assert!(msg.starts_with(text), "{msg}");
    };
    starts(
        x.copy_from_host(&host, CQ0),
        "Writes are not supported during trace capture.",
    );
    starts(
        x.to_host(CQ0).map(|_| ()),
        "Reads are not supported during trace capture.",
    );
    starts(
        chip.event_synchronize(&ev),
        "Event Synchronization is not supported during trace capture.",
    );
    starts(
        chip.finish(CQ0),
        "Event Synchronization is not supported during trace capture.",
    );
    starts(
        chip.record_event(CQ0, &ev),
        "Events are not supported during trace capture.",
    );
    starts(
        chip.wait_for_event(CQ0, &ev),
        "Events are not supported during trace capture.",
    );
    starts(
        chip.enqueue_host_callback(CQ0, || Ok(())),
        "Events are not supported during trace capture.",
    );
    // The other queue still does I/O; the capture goes on and ends normally.
    x.copy_from_host(
        &HostTensor::from_f32(vec![32, 32], DataType::BFloat16, vec![-3.0; 1024]).unwrap(),
        CqId(1),
    )
    .unwrap();
    let y = relu_chain(&x, 2);
    chip.end_trace_capture(tid, CQ0).unwrap();
    chip.synchronize().unwrap();
    x.copy_from_host(
        &HostTensor::from_f32(vec![32, 32], DataType::BFloat16, vec![5.0; 1024]).unwrap(),
        CQ0,
    )
    .unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    assert_eq!(read(&y), vec![5.0; 1024]);
}

#[test]
fn capture_state_errors() {
    let chip = chip_with(|c| {
        c.trace_region_size = 1 << 20;
        c.num_command_queues = 2;
    });
    let x = one_tile(&chip);
    let _ = relu_chain(&x, 1);
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    assert_eq!(tid, TraceId(0));
    let msg = chip.begin_trace_capture(CQ0).unwrap_err().to_string();
    assert!(
        msg.starts_with("CQ 0 is already being used for tracing tid 0"),
        "{msg}"
    );
    let msg = chip
        .end_trace_capture(TraceId(7), CQ0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("CQ 0 is not being used for tracing tid 7"),
        "{msg}"
    );
    let msg = chip
        .end_trace_capture(tid, CqId(1))
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("CQ 1 is not being used for tracing tid 0"),
        "{msg}"
    );
    let msg = chip
        .execute_trace(tid, CQ0, Blocking::No)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("while CQ 0 is capturing"), "{msg}");
    // An op never compiled cannot be captured; the cache is not touched.
    let before = chip.program_cache().counters();
    let e = ops::exp(&x, &OpOptions::default()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("Program cache miss during trace capture for Unary"),
        "{e}"
    );
    assert_eq!(chip.program_cache().counters().misses, before.misses);
    let _y = relu_chain(&x, 3);
    assert_eq!(chip.program_cache().counters().hits, before.hits + 3);
    chip.end_trace_capture(tid, CQ0).unwrap();
    let msg = chip.end_trace_capture(tid, CQ0).unwrap_err().to_string();
    assert!(
        msg.starts_with("CQ 0 is not being used for tracing tid 0"),
        "{msg}"
    );
    assert_eq!(chip.trace_info(tid).unwrap().commands, 3);
}

#[test]
fn unknown_traces_release_and_the_running_total() {
    let chip = chip_with(|c| c.trace_region_size = 1 << 20);
    let x = one_tile(&chip);
    let _ = relu_chain(&x, 1);
    let msg = chip
        .execute_trace(TraceId(42), CQ0, Blocking::No)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("cannot execute trace tid 42 on device 0: no such trace"),
        "{msg}"
    );
    assert!(chip
        .release_trace(TraceId(42))
        .unwrap_err()
        .to_string()
        .starts_with("cannot release trace tid 42 on device 0"));
    let mut tids = Vec::new();
    let mut sizes = Vec::new();
    let mut keep = Vec::new();
    for n in [10, 200, 50] {
        let tid = chip.begin_trace_capture(CQ0).unwrap();
        keep.push(relu_chain(&x, n));
        chip.end_trace_capture(tid, CQ0).unwrap();
        tids.push(tid);
        sizes.push(chip.trace_info(tid).unwrap().buffer_size);
    }
    assert_eq!(
        chip.trace_stats().trace_buffers_size,
        sizes.iter().sum::<u64>()
    );
    assert_eq!(chip.trace_stats().live_traces, 3);
    chip.release_trace(tids[1]).unwrap();
    assert_eq!(chip.trace_stats().trace_buffers_size, sizes[0] + sizes[2]);
    let msg = chip
        .execute_trace(tids[1], CQ0, Blocking::No)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("live traces: [0, 2]"), "{msg}");
    assert!(chip.release_trace(tids[1]).is_err(), "released twice");
    chip.release_trace(tids[0]).unwrap();
    chip.release_trace(tids[2]).unwrap();
    assert_eq!(chip.trace_stats().trace_buffers_size, 0);
    assert_eq!(chip.statistics(BufferType::Trace).total_allocated_bytes, 0);
    assert_eq!(
        ACTIVE_TRACE_ALLOCATION_WARNING,
        "Allocating device buffers is unsafe due to the existence of an active trace. These buffers may be corrupted once a trace is executed."
    );
}

/// A captured model replays with new inputs and gives what running it untraced gives.
#[test]
fn replays_compute_with_each_new_input() {
    let chip = chip_with(|c| c.trace_region_size = 1 << 20);
    let shape = [2usize, 64, 96];
    let n = 2 * 64 * 96;
    let x = Tensor::allocate(
        &chip,
        ttmesh_chip::TensorSpec::new(
            shape.to_vec(),
            DataType::Float32,
            Layout::Tile,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap();
    let (w, wv) = upload(
        &chip,
        &[96, 32],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(2, 96 * 32, -1.0, 1.0),
    );
    let model = |x: &Tensor| {
        let l1 = ops::to_memory_config(x, &MemoryConfig::L1, &OpOptions::default()).unwrap();
        let h = ops::matmul(&l1, &w, &Default::default()).unwrap();
        ops::softmax(
            &ops::gelu(&h, &OpOptions::default()).unwrap(),
            &OpOptions::default(),
        )
        .unwrap()
    };
    let want = |xv: &[f32]| {
        let h = reference::matmul(xv, &wv, 2, 1, 64, 96, 32).unwrap();
        let g = reference::unary(
            ttmesh_chip::compute::Activation::Gelu { approximate: false },
            &h,
        );
        reference::softmax_last_dim(&g, 32).unwrap()
    };
    let input = |i: u64| {
        HostTensor::from_f32(
            shape.to_vec(),
            DataType::Float32,
            values(100 + i, n, -1.0, 1.0),
        )
        .unwrap()
    };
    x.copy_from_host(&input(0), CQ0).unwrap();
    let _ = model(&x);
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let out = model(&x);
    chip.end_trace_capture(tid, CQ0).unwrap();
    for i in 1..=10 {
        let h = input(i);
        x.copy_from_host(&h, CQ0).unwrap();
        chip.execute_trace(tid, CQ0, i % 2 == 0).unwrap();
        let got = out.to_host(CQ0).unwrap().to_f32_vec();
        reference::check_close(&got, &want(h.as_f32().unwrap()), 1e-5, 1e-6).unwrap();
    }
    assert_eq!(chip.trace_info(tid).unwrap().replays, 10);
}

/// Bytes in the trace region are what replays run: garbage there is an error, not a panic.
/// (The digest is off: these are the dispatcher's own checks of each record.)
#[test]
fn a_corrupted_trace_is_an_error() {
    let chip = chip_with(|c| {
        c.trace_region_size = 1 << 20;
        c.trace_digest = false;
    });
    let x = one_tile(&chip);
    let y = relu_chain(&x, 1);
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let y2 = ops::relu(&x, &OpOptions::into_output(&y)).unwrap();
    chip.end_trace_capture(tid, CQ0).unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    let info = chip.trace_info(tid).unwrap();
    let original = chip.read_trace_commands(&info).unwrap();
    let mut bytes = original.clone();
    bytes[..16].fill(0xEE);
    chip.write_trace_commands(&info, &bytes).unwrap();
    let msg = chip
        .execute_trace(tid, CQ0, Blocking::Yes)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with(
            "chip 0 CQ 0, trace 0, record at byte 0: corrupt record: unknown opcode 0xee"
        ),
        "{msg}"
    );
    // A plausible but wrong record: a go signal with no launch before it.
    let mut e = ttmesh_chip::command::Encoder::new();
    e.simple(ttmesh_chip::command::Opcode::GoSignal, 0, 0);
    let mut bytes = original.clone();
    bytes[..e.bytes.len()].copy_from_slice(&e.bytes);
    chip.write_trace_commands(&info, &bytes).unwrap();
    assert!(chip
        .execute_trace(tid, CQ0, Blocking::Yes)
        .unwrap_err()
        .to_string()
        .contains("go signal for program 0 without its launch"));
    drop(y2);
}

/// A trace whose bytes changed after capture (by a write the emulator did not see) is refused
/// before any record runs, naming the chip, the trace and the first changed byte; once the
/// bytes are put back it replays again.
#[test]
fn a_damaged_trace_is_refused_by_its_digest_before_anything_runs() {
    let chip = chip_with(|c| c.trace_region_size = 1 << 20);
    let x = one_tile(&chip);
    let y = relu_chain(&x, 1);
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let y2 = ops::relu(&x, &OpOptions::into_output(&y)).unwrap();
    chip.end_trace_capture(tid, CQ0).unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    let before = y.to_host(CQ0).unwrap().to_f32_vec();
    let info = chip.trace_info(tid).unwrap();
    let original = chip.read_trace_commands(&info).unwrap();
    // New input: a replay that ran anything would change y.
    let negated: Vec<f32> = x
        .to_host(CQ0)
        .unwrap()
        .to_f32_vec()
        .iter()
        .map(|v| -v)
        .collect();
    x.copy_from_host(
        &HostTensor::from_f32(vec![32, 32], DataType::BFloat16, negated.clone()).unwrap(),
        CQ0,
    )
    .unwrap();
    for offset in [0, 9, 100, original.len() - 1] {
        let mut bytes = original.clone();
        bytes[offset] ^= 0x10;
        chip.write_trace_commands(&info, &bytes).unwrap();
        let e = chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap_err();
        match &e {
            ChipError::BadRecord {
                site,
                fault: ttmesh_chip::error::RecordFault::Damaged { offset: at, .. },
            } => {
                assert_eq!(
                    (site.chip, site.trace, *at),
                    (0, Some(tid.0), offset),
                    "{e}"
                );
                assert!(site.offset <= offset, "{e}");
            }
            other => panic!("expected a damaged-trace error at byte {offset}, got: {other}"),
        }
        assert!(
            e.to_string().contains(&format!("first at byte {offset} ")),
            "{e}"
        );
        assert_eq!(
            y.to_host(CQ0).unwrap().to_f32_vec(),
            before,
            "something ran"
        );
    }
    chip.write_trace_commands(&info, &original).unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    let want: Vec<f32> = negated.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(y.to_host(CQ0).unwrap().to_f32_vec(), want);
    // Off, the damaged bytes run (and here fail on their own).
    chip.set_trace_digest(false);
    let mut bytes = original.clone();
    bytes[0] = 0xEE;
    chip.write_trace_commands(&info, &bytes).unwrap();
    let e = chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap_err();
    assert!(e.to_string().contains("unknown opcode 0xee"), "{e}");
    drop(y2);
}

/// The dispatcher adds its launches to the chip's counters in batches: every launch, untraced
/// or replayed, must be counted by the time the host's wait returns (finish, a blocking
/// replay, a read).
#[test]
fn dispatch_stats_count_every_launch_when_the_host_waits() {
    let chip = chip_with(|c| c.trace_region_size = 1 << 20);
    let x = one_tile(&chip);
    chip.finish(CQ0).unwrap();
    let start = chip.dispatch_stats();
    let y = relu_chain(&x, 5);
    chip.finish(CQ0).unwrap();
    let untraced = chip.dispatch_stats();
    assert_eq!(untraced.launches - start.launches, 5);
    assert!(untraced.kernel_ns > start.kernel_ns);
    drop(y);

    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let y = relu_chain(&x, 7);
    chip.end_trace_capture(tid, CQ0).unwrap();
    let before = chip.dispatch_stats().launches;
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    assert_eq!(
        chip.dispatch_stats().launches - before,
        7,
        "a blocking replay"
    );
    chip.execute_trace(tid, CQ0, Blocking::No).unwrap();
    let _ = y.to_host(CQ0).unwrap();
    assert_eq!(
        chip.dispatch_stats().launches - before,
        14,
        "a read after a replay"
    );
    chip.execute_trace(tid, CQ0, Blocking::No).unwrap();
    chip.finish(CQ0).unwrap();
    assert_eq!(
        chip.dispatch_stats().launches - before,
        21,
        "finish after a replay"
    );
}
