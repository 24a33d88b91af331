//! TT-NN's memory inspection calls on one chip, against FACTS.md's Wormhole B0 numbers: a fresh
//! chip with default sizes, with l1_small_size=24576 + trace_region_size=800768, and with
//! worker_l1_size=1048576; the report files against `statistics`; bad input.

use std::path::PathBuf;
use std::sync::Arc;

use ttmesh_chip::allocator::{AllocationRequest, Placement};
use ttmesh_chip::error::L1_SMALL_EMPTY_HINT;
use ttmesh_chip::tensor::{
    create_sharded_memory_config, CoreGrid, CoreRange, ShardCores, ShardOrientation, ShardStrategy,
    TensorMemoryLayout,
};
use ttmesh_chip::{
    compute_with_storage_grid_size, dram_grid_size, dump_device_memory_state,
    get_allocator_base_address, get_dram_alignment, get_l1_alignment,
    get_max_worker_l1_unreserved_size, get_memory_view, get_region_base_address, ArchSpec,
    BufferType, Chip, ChipConfig, ChipError, CoreCoord, DataType, Layout, MemoryBlock, Tensor,
    TensorSpec,
};

const DRAM_BASE: u64 = 0x100040;
const DRAM_TOP: u64 = 1 << 30;
const DRAM_PER_BANK: u64 = 1_072_693_184;
const L1_BASE: u64 = 105_824;
const L1_TOP: u64 = 0x16E000;
const L1_PER_BANK: u64 = 1_393_312;

fn open(l1_small: u64, trace: u64, worker_l1: Option<u64>) -> Arc<Chip> {
    Chip::open(ChipConfig {
        l1_small_size: l1_small,
        trace_region_size: trace,
        worker_l1_size: worker_l1,
        ..ChipConfig::new(0, ArchSpec::wormhole_b0())
    })
    .unwrap()
}

fn empty_block() -> Vec<MemoryBlock> {
    vec![MemoryBlock {
        block_id: 0,
        address: 0,
        size: 0,
        prev_id: None,
        next_id: None,
        allocated: false,
    }]
}

/// (num_banks, total per bank, region base) of every device type.
fn geometry(chip: &Arc<Chip>) -> Vec<(u64, u64, u64)> {
    [
        BufferType::Dram,
        BufferType::L1,
        BufferType::L1Small,
        BufferType::Trace,
    ]
    .into_iter()
    .map(|t| {
        let v = get_memory_view(chip, t).unwrap();
        (
            v.num_banks,
            v.total_bytes_per_bank,
            get_region_base_address(chip, t).unwrap(),
        )
    })
    .collect()
}

#[test]
fn a_fresh_chip_with_default_sizes() {
    let chip = open(0, 0, None);
    assert_eq!(
        geometry(&chip),
        vec![
            (12, DRAM_PER_BANK, DRAM_BASE),
            (64, L1_PER_BANK, L1_BASE),
            (0, 0, L1_TOP),
            (12, 0, DRAM_TOP),
        ]
    );
    // TT-NN answers with the L1 base for L1_SMALL and TRACE.
    let bases: Vec<u64> = [
        BufferType::Dram,
        BufferType::L1,
        BufferType::L1Small,
        BufferType::Trace,
    ]
    .into_iter()
    .map(|t| get_allocator_base_address(&chip, t).unwrap())
    .collect();
    assert_eq!(bases, vec![DRAM_BASE, L1_BASE, L1_BASE, L1_BASE]);

    let dram = get_memory_view(&chip, BufferType::Dram).unwrap();
    assert_eq!(dram.total_bytes_allocated_per_bank, 0);
    assert_eq!(dram.total_bytes_free_per_bank, DRAM_PER_BANK);
    assert_eq!(dram.largest_contiguous_bytes_free_per_bank, DRAM_PER_BANK);
    assert_eq!(dram.block_table.len(), 1);
    assert_eq!(
        (dram.block_table[0].address, dram.block_table[0].size),
        (0, DRAM_PER_BANK)
    );
    // Regions of 0 B: one free block of 0 B at offset 0.
    for t in [BufferType::L1Small, BufferType::Trace] {
        let v = get_memory_view(&chip, t).unwrap();
        assert_eq!(v.block_table, empty_block(), "{t}");
        assert_eq!(
            (
                v.total_bytes_allocated_per_bank,
                v.total_bytes_free_per_bank,
                v.largest_contiguous_bytes_free_per_bank
            ),
            (0, 0, 0)
        );
    }
    assert_eq!(
        empty_block()[0].to_ttnn_entry(),
        vec![
            ("blockID", "0".to_string()),
            ("address", "0".to_string()),
            ("size", "0".to_string()),
            ("prevID", "18446744073709551615".to_string()),
            ("nextID", "18446744073709551615".to_string()),
            ("allocated", "no".to_string()),
        ]
    );

    assert_eq!(get_max_worker_l1_unreserved_size(&chip), 1_463_968);
    assert_eq!(
        compute_with_storage_grid_size(&chip),
        CoreCoord { x: 8, y: 8 }
    );
    assert_eq!(dram_grid_size(&chip), CoreCoord { x: 12, y: 1 });
    assert_eq!(
        (get_dram_alignment(&chip), get_l1_alignment(&chip)),
        (32, 16)
    );
}

#[test]
fn l1_small_and_trace_regions_move_the_bases_tt_nn_does_not_report() {
    let chip = open(24_576, 800_768, None);
    // TRACE per bank: round_up(ceil(800768 / 12), 8192) = 73,728.
    let trace_per_bank = 73_728;
    assert_eq!(
        geometry(&chip),
        vec![
            (12, DRAM_PER_BANK - trace_per_bank, DRAM_BASE),
            (64, L1_PER_BANK - 24_576, L1_BASE),
            (64, 24_576, L1_TOP - 24_576),
            (12, trace_per_bank, DRAM_TOP - trace_per_bank),
        ]
    );
    assert_eq!(
        get_allocator_base_address(&chip, BufferType::L1Small).unwrap(),
        L1_BASE
    );
    assert_eq!(
        get_allocator_base_address(&chip, BufferType::Trace).unwrap(),
        L1_BASE
    );
    assert_eq!(
        get_allocator_base_address(&chip, BufferType::Dram).unwrap(),
        DRAM_BASE
    );
}

#[test]
fn worker_l1_size_moves_the_l1_base() {
    let chip = open(0, 0, Some(1_048_576));
    let base = L1_TOP - 1_048_576;
    assert_eq!(
        get_allocator_base_address(&chip, BufferType::L1).unwrap(),
        base
    );
    assert_eq!(
        get_region_base_address(&chip, BufferType::L1).unwrap(),
        base
    );
    let v = get_memory_view(&chip, BufferType::L1).unwrap();
    assert_eq!((v.num_banks, v.total_bytes_per_bank), (64, 1_048_576));
    // The unreserved size is the architecture's, not the chosen worker size.
    assert_eq!(get_max_worker_l1_unreserved_size(&chip), 1_463_968);
}

#[test]
fn the_view_follows_allocations_as_the_allocator_places_them() {
    let chip = open(8192, 0, None);
    let l1 = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::L1,
            page_size: 2048,
            num_pages: 64,
            placement: Placement::Interleaved,
        })
        .unwrap();
    let small = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::L1Small,
            page_size: 1024,
            num_pages: 1,
            placement: Placement::Sharded {
                banks: vec![3],
                pages_per_shard: 1,
            },
        })
        .unwrap();
    let v = get_memory_view(&chip, BufferType::L1).unwrap();
    let l1_per_bank = L1_PER_BANK - 8192;
    // L1 allocates top-down: the buffer takes the top 2048 B of the region.
    assert_eq!(l1.address, L1_BASE + l1_per_bank - 2048);
    assert_eq!(
        v.block_table,
        vec![
            MemoryBlock {
                block_id: 0,
                address: 0,
                size: l1_per_bank - 2048,
                prev_id: None,
                next_id: Some(1),
                allocated: false,
            },
            MemoryBlock {
                block_id: 1,
                address: l1_per_bank - 2048,
                size: 2048,
                prev_id: Some(0),
                next_id: None,
                allocated: true,
            },
        ]
    );
    assert_eq!(v.total_bytes_allocated_per_bank, 2048);
    assert_eq!(v.total_bytes_free_per_bank, l1_per_bank - 2048);
    let s = get_memory_view(&chip, BufferType::L1Small).unwrap();
    assert_eq!(s.total_bytes_allocated_per_bank, 1024);
    assert_eq!(s.largest_contiguous_bytes_free_per_bank, 8192 - 1024);
    assert_eq!(
        get_region_base_address(&chip, BufferType::L1Small).unwrap() + s.block_table[1].address,
        small.address
    );
    for t in [BufferType::L1, BufferType::L1Small] {
        let st = chip.statistics(t);
        let v = get_memory_view(&chip, t).unwrap();
        assert_eq!(
            (
                v.total_bytes_per_bank,
                v.total_bytes_allocated_per_bank,
                v.total_bytes_free_per_bank,
                v.largest_contiguous_bytes_free_per_bank
            ),
            (
                st.total_allocatable_size_bytes,
                st.total_allocated_bytes,
                st.total_free_bytes,
                st.largest_free_block_bytes
            )
        );
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttmesh-inspect-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The numbers of every line of a CSV report that starts with `,` and holds only numbers.
fn number_rows(text: &str) -> Vec<Vec<u64>> {
    text.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(',').skip(1).collect();
            let nums: Option<Vec<u64>> = cells.iter().map(|c| c.trim().parse().ok()).collect();
            nums.filter(|n| !n.is_empty())
        })
        .collect()
}

#[test]
fn the_report_files_total_what_statistics_say() {
    let chip = open(24_576, 800_768, None);
    let _dram = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::Dram,
            page_size: 2048,
            num_pages: 100,
            placement: Placement::Interleaved,
        })
        .unwrap();
    let _l1 = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::L1,
            page_size: 4096,
            num_pages: 130,
            placement: Placement::Interleaved,
        })
        .unwrap();
    let dir = scratch_dir("totals");
    let prefix = format!("{}/before_op_", dir.display());
    let files = dump_device_memory_state(&chip, &prefix).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "before_op_memory_usage_summary.csv",
            "before_op_l1_usage_summary.csv",
            "before_op_detailed_memory_usage.csv"
        ]
    );
    let read = |i: usize| std::fs::read_to_string(&files[i]).unwrap();
    let types = [
        BufferType::Dram,
        BufferType::L1,
        BufferType::L1Small,
        BufferType::Trace,
    ];

    let summary = read(0);
    assert!(summary.starts_with(", Total Allocatable Size (B), Total Allocated (B),"));
    let expected: Vec<Vec<u64>> = types
        .iter()
        .map(|t| {
            let s = chip.statistics(*t);
            vec![
                s.total_allocatable_size_bytes,
                s.total_allocated_bytes,
                s.total_free_bytes,
                s.largest_free_block_bytes,
            ]
        })
        .collect();
    assert_eq!(number_rows(&summary), expected);

    let l1 = read(1);
    let st = chip.statistics(BufferType::L1);
    assert_eq!(
        number_rows(&l1),
        vec![vec![
            st.largest_free_block_bytes,
            st.largest_free_block_bytes * 64
        ]]
    );

    let detailed = read(2);
    let mut totals = Vec::new();
    for t in types {
        let s = chip.statistics(t);
        let banks = get_memory_view(&chip, t).unwrap().num_banks;
        assert!(
            detailed.contains(&format!(",{t}\n,Total allocatable (B):,")),
            "{t}"
        );
        totals.push(vec![s.total_allocatable_size_bytes * banks]);
        totals.push(vec![s.total_allocated_bytes * banks]);
        totals.push(vec![s.total_free_bytes * banks]);
    }
    let parsed: Vec<Vec<u64>> = detailed
        .lines()
        .filter(|l| l.starts_with(",Total "))
        .map(|l| vec![l.rsplit(',').next().unwrap().parse().unwrap()])
        .collect();
    assert_eq!(parsed, totals);
    // Every type's block table is there, one line per block.
    let rows = detailed
        .lines()
        .filter(|l| l.trim_end().ends_with("yes") || l.trim_end().ends_with(" no"))
        .count();
    let blocks: usize = types
        .iter()
        .map(|t| get_memory_view(&chip, *t).unwrap().block_table.len())
        .sum();
    assert_eq!(rows, blocks);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_gets_clear_errors() {
    let chip = open(0, 0, None);
    let err = get_memory_view(&chip, BufferType::SystemMemory).unwrap_err();
    assert_eq!(
        err,
        ChipError::NotDeviceMemory {
            chip: 0,
            buffer_type: BufferType::SystemMemory
        }
    );
    assert!(err
        .to_string()
        .contains("ask about DRAM, L1, L1_SMALL or TRACE"));
    assert!(get_allocator_base_address(&chip, BufferType::SystemMemory).is_err());
    assert!(get_region_base_address(&chip, BufferType::SystemMemory).is_err());

    // A prefix below a regular file cannot be written, whoever runs the test.
    let dir = scratch_dir("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a_file");
    std::fs::write(&file, b"x").unwrap();
    let prefix = format!("{}/sub/report_", file.display());
    let err = dump_device_memory_state(&chip, &prefix).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ChipError::ReportWrite { .. }), "{err:?}");
    assert!(
        text.contains("cannot write the memory report of chip 0"),
        "{text}"
    );
    assert!(text.contains("a_file/sub"), "{text}");
    assert!(std::error::Error::source(&err).is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_empty_l1_small_region_explains_itself() {
    let chip = open(0, 0, None);
    let err = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::L1Small,
            page_size: 2048,
            num_pages: 1,
            placement: Placement::Sharded {
                banks: vec![0],
                pages_per_shard: 1,
            },
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Out of Memory: Not enough space to allocate 2048 B L1_SMALL buffer across 1 banks, where each bank needs to store 2048 B, but bank size is 0 B (allocated: 0 B, free: 0 B, largest free block: 0 B). {L1_SMALL_EMPTY_HINT}"
        )
    );
    assert!(err.to_string().ends_with("The L1_SMALL region is 0 B because it is reserved at device open; set l1_small_size large enough for this allocation when opening the device."));
    // Interleaved L1_SMALL is refused before any size is looked at.
    let err = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::L1Small,
            page_size: 2048,
            num_pages: 1,
            placement: Placement::Interleaved,
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "L1_SMALL only supports sharded allocations"
    );
    // A non-empty L1_SMALL out of memory carries no hint.
    let chip = open(1024, 0, None);
    let err = chip
        .allocate(&AllocationRequest {
            buffer_type: BufferType::L1Small,
            page_size: 2048,
            num_pages: 1,
            placement: Placement::Sharded {
                banks: vec![0],
                pages_per_shard: 1,
            },
        })
        .unwrap_err();
    assert!(
        err.to_string().ends_with("largest free block: 1024 B)."),
        "{err}"
    );
}

#[test]
fn sharded_memory_configs_are_the_ones_tt_nn_builds() {
    let shard = |shape: &[usize], grid: ShardCores, strategy, orientation, hw| {
        let mc = create_sharded_memory_config(shape, grid, strategy, orientation, hw).unwrap();
        assert_eq!(mc.buffer_type, BufferType::L1);
        let spec = mc.shard_spec.unwrap();
        (mc.memory_layout, spec.shape, spec.grid, spec.orientation)
    };
    let g = CoreGrid::new(2, 4);
    let grid = vec![CoreRange::new((0, 0), (1, 3))];
    assert_eq!(
        shard(
            &[1, 2, 128, 64],
            g.into(),
            ShardStrategy::Height,
            None,
            false
        ),
        (
            TensorMemoryLayout::HeightSharded,
            [32, 64],
            grid.clone(),
            ShardOrientation::RowMajor
        )
    );
    assert_eq!(
        shard(&[256, 512], g.into(), ShardStrategy::Width, None, false).1,
        [256, 64]
    );
    assert_eq!(
        shard(&[256, 64], g.into(), ShardStrategy::Block, None, false).1,
        [64, 32]
    );
    assert_eq!(
        shard(
            &[256, 64],
            g.into(),
            ShardStrategy::Block,
            Some(ShardOrientation::ColMajor),
            false
        )
        .1,
        [128, 16]
    );
    assert_eq!(
        shard(&[1, 1, 32, 64], g.into(), ShardStrategy::Height, None, true).1,
        [32, 64]
    );
    assert_eq!(
        shard(
            &[32, 64],
            g.into(),
            ShardStrategy::Height,
            Some(ShardOrientation::ColMajor),
            true
        )
        .1,
        [64, 32]
    );
    // Explicit ranges are taken as given (TT-NN: only with the shard shape given).
    let ranges = vec![CoreRange::new((0, 0), (0, 3))];
    assert_eq!(
        shard(
            &[32, 64],
            ranges.clone().into(),
            ShardStrategy::Height,
            None,
            true
        )
        .2,
        ranges
    );

    let err = create_sharded_memory_config(&[100, 64], g, ShardStrategy::Height, None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Invalid sharding core_grid"), "{err}");
    let err = create_sharded_memory_config(&[64], g, ShardStrategy::Height, None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least two dims"), "{err}");
    let err = create_sharded_memory_config(
        &[256, 64],
        CoreRange::new((0, 0), (1, 1)),
        ShardStrategy::Height,
        None,
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("use_height_and_width_as_shard_shape"), "{err}");

    // The config places a real tensor: 8 shards of 32x64 on the 2x4 grid's cores.
    let chip = open(0, 0, None);
    let mc = create_sharded_memory_config(&[1, 2, 128, 64], g, ShardStrategy::Height, None, false)
        .unwrap();
    let t = Tensor::allocate(
        &chip,
        TensorSpec::new(vec![1, 2, 128, 64], DataType::BFloat16, Layout::Tile, mc),
    )
    .unwrap();
    // Each shard is 1x2 tiles of 2048 B: 4096 B per bank, top of L1.
    assert_eq!(t.buffer_address().unwrap(), L1_TOP - 4096);
}
