//! The allocator against FACTS.md's Wormhole numbers and against a naive model of tt-metal's
//! rules (first fit: lowest block bottom-up for DRAM/TRACE, highest block top-down for
//! L1/L1_SMALL; per-bank shares rounded as FACTS.md says).

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use ttmesh_chip::allocator::{
    AllocationRequest, Allocator, AllocatorConfig, AllocatorEvent, AllocatorEventKind, Placement,
    UsageCounters,
};
use ttmesh_chip::observe::ChipObserver;
use ttmesh_chip::tensor::{CoreRange, ShardSpec, TensorMemoryLayout};
use ttmesh_chip::{
    ArchSpec, BufferType, Chip, ChipConfig, ChipError, DataType, Layout, MemoryConfig, Tensor,
    TensorSpec,
};

const DRAM_BASE: u64 = 0x100040;
const DRAM_TOP: u64 = 1 << 30;
const L1_BASE: u64 = 105_824;
const L1_TOP: u64 = 0x16E000;

/// Proptest cases: `n` for CI speed, or PROPTEST_CASES when set (for a deeper run).
fn cases(n: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(n)
}

fn wh() -> ArchSpec {
    ArchSpec::wormhole_b0()
}

fn allocator(trace: u64, l1_small: u64) -> Allocator {
    let mut cfg = AllocatorConfig::new(wh());
    cfg.trace_region_size = trace;
    cfg.l1_small_size = l1_small;
    Allocator::new(0, cfg).unwrap()
}

fn interleaved(t: BufferType, page_size: u64, num_pages: u64) -> AllocationRequest {
    AllocationRequest {
        buffer_type: t,
        page_size,
        num_pages,
        placement: Placement::Interleaved,
    }
}

fn sharded(
    t: BufferType,
    page_size: u64,
    banks: Vec<u32>,
    pages_per_shard: u64,
) -> AllocationRequest {
    let num_pages = banks.len() as u64 * pages_per_shard;
    AllocationRequest {
        buffer_type: t,
        page_size,
        num_pages,
        placement: Placement::Sharded {
            banks,
            pages_per_shard,
        },
    }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

#[test]
fn wormhole_default_geometry_matches_ttnn() {
    let mut a = allocator(0, 0);
    let dram = a.statistics(BufferType::Dram);
    assert_eq!(dram.total_allocatable_size_bytes, 1_072_693_184);
    assert_eq!(dram.largest_free_block_addrs, vec![DRAM_BASE]);
    assert_eq!(
        a.statistics(BufferType::L1).total_allocatable_size_bytes,
        1_393_312
    );
    assert_eq!(
        a.statistics(BufferType::L1).largest_free_block_addrs,
        vec![L1_BASE]
    );
    assert_eq!(
        a.statistics(BufferType::Trace).total_allocatable_size_bytes,
        0
    );
    assert_eq!(
        a.statistics(BufferType::L1Small)
            .total_allocatable_size_bytes,
        0
    );

    // First DRAM buffer at 0x100040 = 1,048,640; the next right above it (bottom-up).
    let d1 = a
        .allocate(&interleaved(BufferType::Dram, 2048, 25))
        .unwrap();
    assert_eq!(d1.address, 1_048_640);
    assert_eq!(d1.per_bank_size, 3 * 2048); // ceil(25 / 12) pages per bank
    let d2 = a.allocate(&interleaved(BufferType::Dram, 2048, 1)).unwrap();
    assert_eq!(d2.address, 1_048_640 + 6144);

    // First L1 buffer right below 0x16E000 (top-down), the next below it.
    let l1 = a.allocate(&interleaved(BufferType::L1, 2048, 64)).unwrap();
    assert_eq!(l1.per_bank_size, 2048);
    assert_eq!(l1.address, L1_TOP - 2048);
    let l2 = a.allocate(&interleaved(BufferType::L1, 4096, 65)).unwrap();
    assert_eq!(l2.per_bank_size, 2 * 4096);
    assert_eq!(l2.address, L1_TOP - 2048 - 8192);

    // Freeing in any order merges back to one block.
    for x in [&d1, &l2, &d2, &l1] {
        a.deallocate(x).unwrap();
    }
    assert_eq!(
        a.statistics(BufferType::Dram).largest_free_block_bytes,
        1_072_693_184
    );
    assert_eq!(
        a.statistics(BufferType::L1).largest_free_block_bytes,
        1_393_312
    );
    a.check_invariants().unwrap();
}

#[test]
fn trace_region_comes_off_the_top_of_every_dram_bank() {
    for (size, per_bank) in [
        (800_768u64, 73_728u64),
        (100_000_000, 8_339_456),
        (1, 8192),
        (12 * 8192, 8192),
        (12 * 8192 + 1, 16_384),
    ] {
        assert_eq!(round_up(size.div_ceil(12), 8192), per_bank);
        let mut a = allocator(size, 0);
        let trace = a.statistics(BufferType::Trace);
        assert_eq!(
            trace.total_allocatable_size_bytes, per_bank,
            "trace_region_size {size}"
        );
        assert_eq!(trace.largest_free_block_addrs, vec![DRAM_TOP - per_bank]);
        assert_eq!(
            a.statistics(BufferType::Dram).total_allocatable_size_bytes,
            1_072_693_184 - per_bank
        );
        // The DRAM base does not move; the first trace buffer sits at the region's bottom.
        assert_eq!(
            a.allocate(&interleaved(BufferType::Dram, 32, 1))
                .unwrap()
                .address,
            DRAM_BASE
        );
        let t = a
            .allocate(&interleaved(BufferType::Trace, 1024, 12))
            .unwrap();
        assert_eq!(t.address, DRAM_TOP - per_bank);
    }
}

#[test]
fn l1_small_and_worker_l1_move_the_l1_ranges() {
    let mut a = allocator(0, 24_576);
    assert_eq!(
        a.statistics(BufferType::L1).total_allocatable_size_bytes,
        1_393_312 - 24_576
    );
    assert_eq!(
        a.statistics(BufferType::L1Small)
            .total_allocatable_size_bytes,
        24_576
    );
    let s = a
        .allocate(&sharded(BufferType::L1Small, 2048, vec![0, 1], 2))
        .unwrap();
    assert_eq!(
        s.address,
        L1_TOP - 4096,
        "L1_SMALL allocates top-down from 0x16E000"
    );
    let l = a.allocate(&interleaved(BufferType::L1, 2048, 64)).unwrap();
    assert_eq!(
        l.address,
        L1_TOP - 24_576 - 2048,
        "L1 now ends where L1_SMALL begins"
    );

    // l1_small_size rounds up to 1 KiB.
    let a = allocator(0, 1000);
    assert_eq!(
        a.statistics(BufferType::L1Small)
            .total_allocatable_size_bytes,
        1024
    );
    assert_eq!(
        a.statistics(BufferType::L1).total_allocatable_size_bytes,
        1_393_312 - 1024
    );

    let mut cfg = AllocatorConfig::new(wh());
    cfg.worker_l1_size = Some(1 << 20);
    let a = Allocator::new(0, cfg).unwrap();
    assert_eq!(
        a.statistics(BufferType::L1).largest_free_block_addrs,
        vec![L1_TOP - (1 << 20)]
    );
    let mut cfg = AllocatorConfig::new(wh());
    cfg.worker_l1_size = Some(2 << 20);
    assert!(matches!(
        Allocator::new(0, cfg),
        Err(ChipError::InvalidConfig(_))
    ));
    let mut cfg = AllocatorConfig::new(wh());
    cfg.trace_region_size = 13 << 30;
    let err = Allocator::new(0, cfg)
        .err()
        .expect("a 13 GiB trace region cannot fit");
    assert!(err.to_string().contains("trace_region_size"), "{err}");
}

#[test]
fn per_bank_shares_follow_the_rounding_rules() {
    let mut a = allocator(0, 0);
    // DRAM: ceil(pages / 12) * round_up(page, 32), then rounded to 32.
    for (page, pages, want) in [
        (2048u64, 12u64, 2048u64),
        (2048, 13, 4096),
        (100, 13, 256),
        (1088, 25, 3 * 1088),
        (14, 1, 32),
    ] {
        let x = a
            .allocate(&interleaved(BufferType::Dram, page, pages))
            .unwrap();
        assert_eq!(x.per_bank_size, want, "DRAM page {page} x {pages}");
        assert_eq!(x.page_stride, round_up(page, 32));
        a.deallocate(&x).unwrap();
    }
    // L1: pages step by round_up(page, 16), the share rounds to 32 although L1 aligns to 16.
    for (page, pages, want) in [
        (2048u64, 64u64, 2048u64),
        (40, 192, 160),
        (16, 64, 32),
        (48, 128, 96),
    ] {
        let x = a
            .allocate(&interleaved(BufferType::L1, page, pages))
            .unwrap();
        assert_eq!(x.per_bank_size, want, "L1 page {page} x {pages}");
        assert_eq!(x.page_stride, round_up(page, 16));
        a.deallocate(&x).unwrap();
    }
    // Sharded: the shard size, on the banks used only.
    let x = a
        .allocate(&sharded(BufferType::L1, 2048, vec![0, 1, 2, 3], 4))
        .unwrap();
    assert_eq!((x.per_bank_size, x.address), (8192, L1_TOP - 8192));
    let y = a
        .allocate(&sharded(BufferType::Dram, 1088, vec![5, 7], 3))
        .unwrap();
    assert_eq!(
        (y.per_bank_size, y.address),
        (round_up(3 * 1088, 32), DRAM_BASE)
    );
}

#[test]
fn per_bank_sizes_of_tensors() {
    let chip = Chip::open(ChipConfig::new(0, wh())).unwrap();
    let spec = |shape: Vec<usize>, dt, layout, mc| TensorSpec::new(shape, dt, layout, mc);
    // 3 x 64 x 96 bf16 tiles: 3 * 2 * 3 = 18 pages over 12 banks -> 2 per bank.
    let t = Tensor::allocate(
        &chip,
        spec(
            vec![3, 64, 96],
            DataType::BFloat16,
            Layout::Tile,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap();
    assert_eq!(t.allocation("test").unwrap().per_bank_size, 4096);
    // Row-major 100 rows of 7 f32: page 28 B, stride 32, 9 pages per bank.
    let t = Tensor::allocate(
        &chip,
        spec(
            vec![100, 7],
            DataType::Float32,
            Layout::RowMajor,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap();
    assert_eq!(t.allocation("test").unwrap().per_bank_size, 9 * 32);
    // Height sharded over 4 cores, shard 64 x 128 bfloat8_b = 8 tiles of 1088 B.
    let hs = MemoryConfig::sharded(
        TensorMemoryLayout::HeightSharded,
        BufferType::L1,
        ShardSpec::new(CoreRange::grid(4, 1), [64, 128]),
    );
    let t = Tensor::allocate(
        &chip,
        spec(vec![256, 128], DataType::BFloat8B, Layout::Tile, hs),
    )
    .unwrap();
    assert_eq!(t.allocation("test").unwrap().per_bank_size, 8 * 1088);
    // Block sharded 2 x 2 with a partial last shard: every bank reserves a full shard.
    let bs = MemoryConfig::sharded(
        TensorMemoryLayout::BlockSharded,
        BufferType::L1,
        ShardSpec::new(CoreRange::grid(2, 2), [64, 64]),
    );
    let t = Tensor::allocate(
        &chip,
        spec(vec![96, 100], DataType::Float32, Layout::Tile, bs),
    )
    .unwrap();
    assert_eq!(t.allocation("test").unwrap().per_bank_size, 4 * 4096);
}

#[test]
fn out_of_memory_text_is_tt_metals() {
    let mut a = allocator(0, 0);
    let err = a
        .allocate(&interleaved(BufferType::Dram, 2048, 12 * 600_000))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Out of Memory: Not enough space to allocate 14745600000 B DRAM buffer across 12 banks, where each bank needs to store 1228800000 B, but bank size is 1072693184 B (allocated: 0 B, free: 1072693184 B, largest free block: 1072693184 B)."
    );
    let x = a
        .allocate(&interleaved(BufferType::L1, 2048, 64 * 600))
        .unwrap();
    let err = a
        .allocate(&sharded(BufferType::L1, 2048, vec![3, 4], 100))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Out of Memory: Not enough space to allocate 409600 B L1 buffer across 2 banks, where each bank needs to store 204800 B, but bank size is 1393312 B (allocated: {a} B, free: {f} B, largest free block: {f} B).",
            a = x.per_bank_size,
            f = 1_393_312 - x.per_bank_size
        )
    );
    // A trace region of 0 has no room at all.
    let err = a
        .allocate(&interleaved(BufferType::Trace, 1024, 12))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Out of Memory: Not enough space to allocate 12288 B TRACE buffer across 12 banks, where each bank needs to store 1024 B, but bank size is 0 B (allocated: 0 B, free: 0 B, largest free block: 0 B)."
    );
}

#[test]
fn l1_small_is_sharded_only_and_double_free_is_an_error() {
    let mut a = allocator(0, 8192);
    assert_eq!(
        a.allocate(&interleaved(BufferType::L1Small, 2048, 64))
            .unwrap_err()
            .to_string(),
        "L1_SMALL only supports sharded allocations"
    );
    let x = a
        .allocate(&sharded(BufferType::L1Small, 2048, vec![0], 1))
        .unwrap();
    a.deallocate(&x).unwrap();
    let err = a.deallocate(&x).unwrap_err();
    assert_eq!(
        err,
        ChipError::DoubleFree {
            chip: 0,
            buffer_type: BufferType::L1Small,
            address: x.address
        }
    );
    assert!(
        err.to_string()
            .contains("L1_SMALL buffer at address 0x16d800 on chip 0 is not allocated"),
        "{err}"
    );
    // A stale handle whose address now holds another buffer is refused too (the id differs).
    let y = a
        .allocate(&sharded(BufferType::L1Small, 2048, vec![0], 1))
        .unwrap();
    assert_eq!(y.address, x.address);
    assert!(matches!(
        a.deallocate(&x),
        Err(ChipError::DoubleFree { .. })
    ));
    a.deallocate(&y).unwrap();

    let chip = Chip::open(ChipConfig {
        l1_small_size: 8192,
        ..ChipConfig::new(0, wh())
    })
    .unwrap();
    let spec = TensorSpec::new(
        vec![32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig {
            buffer_type: BufferType::L1Small,
            ..MemoryConfig::L1
        },
    );
    assert_eq!(
        Tensor::allocate(&chip, spec).unwrap_err().to_string(),
        "L1_SMALL only supports sharded allocations"
    );
    let req = interleaved(BufferType::Dram, 2048, 1);
    let x = chip.allocate(&req).unwrap();
    chip.deallocate(&x).unwrap();
    assert!(chip
        .deallocate(&x)
        .unwrap_err()
        .to_string()
        .contains("double free: DRAM buffer at address 0x100040 on chip 0"));
}

/// Records every event, to rebuild the statistics from the stream alone.
#[derive(Default)]
struct Recorder(Mutex<Vec<AllocatorEvent>>);

impl ChipObserver for Recorder {
    fn allocator_event(&self, e: &AllocatorEvent) {
        self.0.lock().unwrap().push(e.clone());
    }
}

/// The naive model of one bank manager: live blocks, and first fit computed from the gaps.
struct Model {
    base: u64,
    top: u64,
    top_down: bool,
    live: Vec<(u64, u64)>,
}

impl Model {
    fn gaps(&self) -> Vec<(u64, u64)> {
        let mut live = self.live.clone();
        live.sort();
        let mut gaps = Vec::new();
        let mut cursor = self.base;
        for (a, s) in live {
            if a > cursor {
                gaps.push((cursor, a - cursor));
            }
            cursor = a + s;
        }
        if self.top > cursor {
            gaps.push((cursor, self.top - cursor));
        }
        gaps
    }
    fn first_fit(&self, size: u64) -> Option<u64> {
        let gaps = self.gaps();
        if self.top_down {
            gaps.iter()
                .rev()
                .find(|g| g.1 >= size)
                .map(|g| g.0 + g.1 - size)
        } else {
            gaps.iter().find(|g| g.1 >= size).map(|g| g.0)
        }
    }
    fn largest(&self) -> u64 {
        self.gaps().iter().map(|g| g.1).max().unwrap_or(0)
    }
}

#[derive(Clone, Debug)]
enum Step {
    Alloc {
        t: BufferType,
        page: u64,
        pages: u64,
        shard_banks: Option<u32>,
    },
    Free(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let t = prop_oneof![
        Just(BufferType::Dram),
        Just(BufferType::L1),
        Just(BufferType::L1Small),
        Just(BufferType::Trace),
        Just(BufferType::SystemMemory)
    ];
    prop_oneof![
        3 => (t, prop_oneof![1u64..5000, Just(2048u64), Just(1088u64)], 1u64..3000, proptest::option::of(1u32..12))
            .prop_map(|(t, page, pages, shard_banks)| Step::Alloc { t, page, pages, shard_banks }),
        2 => any::<usize>().prop_map(Step::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]

    /// Random allocate/free over every buffer type: addresses equal the naive first-fit model,
    /// never overlap, stay aligned and inside their region; statistics equal the live sum and
    /// the event stream; freeing everything restores each region's single free block.
    #[test]
    fn random_sequences_match_the_model(trace in prop_oneof![Just(0u64), 1u64..50_000_000], l1_small in prop_oneof![Just(0u64), 1u64..200_000],
                                        steps in proptest::collection::vec(step(), 1..120)) {
        let mut a = allocator(trace, l1_small);
        let counters = Arc::new(UsageCounters::default());
        let recorder = Arc::new(Recorder::default());
        a.add_observer(counters.clone());
        a.add_observer(recorder.clone());
        let trace_bank = if trace == 0 { 0 } else { round_up(trace.div_ceil(12), 8192) };
        let small = round_up(l1_small, 1024);
        let ranges = |t: BufferType| match t {
            BufferType::Dram => (DRAM_BASE, DRAM_TOP - trace_bank, 32, false, 12u32),
            BufferType::Trace => (DRAM_TOP - trace_bank, DRAM_TOP, 32, false, 12),
            BufferType::L1 => (L1_BASE, L1_TOP - small, 16, true, 64),
            BufferType::L1Small => (L1_TOP - small, L1_TOP, 16, true, 64),
            BufferType::SystemMemory => (0, 1 << 30, 32, false, 1),
        };
        let mut models: Vec<Model> = BufferType::ALL.iter().map(|&t| {
            let (base, top, _, top_down, _) = ranges(t);
            Model { base, top, top_down, live: Vec::new() }
        }).collect();
        let mut live = Vec::new();
        for s in steps {
            match s {
                Step::Alloc { t, page, pages, shard_banks } => {
                    let (_, _, align, _, banks) = ranges(t);
                    let req = match shard_banks {
                        Some(n) => sharded(t, page, (0..n.min(banks)).collect(), pages.div_ceil(n.min(banks) as u64)),
                        None => interleaved(t, page, pages),
                    };
                    let stride = round_up(page, align);
                    let per_bank_pages = match &req.placement {
                        Placement::Interleaved => pages.div_ceil(banks as u64),
                        Placement::Sharded { pages_per_shard, .. } => *pages_per_shard,
                    };
                    let need = round_up(round_up(per_bank_pages * stride, 32), align);
                    let m = &mut models[t as usize];
                    match a.allocate(&req) {
                        Ok(x) => {
                            prop_assert!(t != BufferType::L1Small || shard_banks.is_some());
                            prop_assert_eq!(x.per_bank_size, need);
                            prop_assert_eq!(Some(x.address), m.first_fit(need), "{:?} first fit", t);
                            prop_assert_eq!(x.address % align, 0);
                            prop_assert!(x.address >= m.base && x.address + need <= m.top);
                            m.live.push((x.address, need));
                            live.push(x);
                        }
                        Err(ChipError::L1SmallInterleaved) => prop_assert!(t == BufferType::L1Small && shard_banks.is_none()),
                        Err(ChipError::OutOfMemory { per_bank, largest_free, .. }) => {
                            prop_assert_eq!(per_bank, need);
                            prop_assert_eq!(largest_free, m.largest());
                            prop_assert!(m.first_fit(need).is_none(), "refused although a block fits");
                        }
                        Err(e) => prop_assert!(false, "unexpected error {}", e),
                    }
                }
                Step::Free(i) => {
                    if live.is_empty() { continue; }
                    let x = live.swap_remove(i % live.len());
                    a.deallocate(&x).unwrap();
                    let m = &mut models[x.buffer_type as usize];
                    m.live.retain(|b| b.0 != x.address);
                }
            }
            for t in BufferType::ALL {
                let st = a.statistics(t);
                let sum: u64 = live.iter().filter(|x| x.buffer_type == t).map(|x| x.per_bank_size).sum();
                prop_assert_eq!(st.total_allocated_bytes, sum);
                prop_assert_eq!(st.total_free_bytes, st.total_allocatable_size_bytes - sum);
                prop_assert_eq!(st.largest_free_block_bytes, models[t as usize].largest());
                prop_assert_eq!(counters.snapshot(t).allocated_per_bank, sum);
                prop_assert_eq!(counters.snapshot(t).live_buffers, live.iter().filter(|x| x.buffer_type == t).count() as u64);
            }
            // No two live buffers of one memory (DRAM+TRACE, L1+L1_SMALL) overlap.
            let mut spans: Vec<_> = live.iter().map(|x| (x.buffer_type.space() as u8, x.address, x.address + x.per_bank_size)).collect();
            spans.sort();
            for w in spans.windows(2) {
                prop_assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "overlap {:?}", w);
            }
            a.check_invariants().map_err(TestCaseError::fail)?;
        }
        // The event stream alone rebuilds the statistics.
        let mut from_events = [0u64; 5];
        for e in recorder.0.lock().unwrap().iter() {
            match e.kind {
                AllocatorEventKind::Allocate => from_events[e.buffer_type as usize] += e.per_bank_size,
                AllocatorEventKind::Deallocate => from_events[e.buffer_type as usize] -= e.per_bank_size,
            }
        }
        for t in BufferType::ALL {
            prop_assert_eq!(from_events[t as usize], a.statistics(t).total_allocated_bytes);
        }
        for x in live.drain(..) {
            a.deallocate(&x).unwrap();
        }
        for t in BufferType::ALL {
            let st = a.statistics(t);
            let (base, top, ..) = ranges(t);
            prop_assert_eq!(st.total_allocated_bytes, 0);
            prop_assert_eq!(st.largest_free_block_bytes, top - base);
            if top > base {
                prop_assert_eq!(st.largest_free_block_addrs, vec![base]);
            }
        }
    }

    /// Through the chip and tensors: the usage counters fed by the event stream always equal
    /// the allocator's statistics.
    #[test]
    fn chip_usage_counters_equal_statistics(ops in proptest::collection::vec((0u8..4, 1usize..200, 1usize..200, any::<bool>()), 1..40)) {
        let chip = Chip::open(ChipConfig { l1_small_size: 64 << 10, ..ChipConfig::new(0, wh()) }).unwrap();
        let mut live: Vec<Tensor> = Vec::new();
        for (kind, h, w, free) in ops {
            if free && !live.is_empty() {
                let t = live.remove(h % live.len());
                t.deallocate(true).unwrap();
            } else {
                let mc = match kind {
                    0 => MemoryConfig::DRAM,
                    1 => MemoryConfig::L1,
                    2 => MemoryConfig::sharded(TensorMemoryLayout::HeightSharded, BufferType::L1Small,
                        ShardSpec::new(CoreRange::grid(8, 8), [h.div_ceil(32).div_ceil(64) * 32, w.div_ceil(32) * 32])),
                    _ => MemoryConfig::sharded(TensorMemoryLayout::WidthSharded, BufferType::Dram,
                        ShardSpec::new(CoreRange::grid(12, 1), [h.div_ceil(32) * 32, w.div_ceil(32).div_ceil(12) * 32])),
                };
                match Tensor::allocate(&chip, TensorSpec::new(vec![h, w], DataType::BFloat16, Layout::Tile, mc)) {
                    Ok(t) => live.push(t),
                    Err(ChipError::OutOfMemory { .. }) => {}
                    Err(e) => prop_assert!(false, "{}", e),
                }
            }
            for t in BufferType::ALL {
                prop_assert_eq!(chip.usage().snapshot(t).allocated_per_bank, chip.statistics(t).total_allocated_bytes);
            }
        }
        drop(live);
        for t in BufferType::ALL {
            prop_assert_eq!(chip.statistics(t).total_allocated_bytes, 0);
            prop_assert_eq!(chip.usage().snapshot(t).live_buffers, 0);
        }
    }
}
