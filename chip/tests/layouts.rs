//! Data movement must not change a single bit: to_memory_config / reshard between interleaved
//! and height / width / block sharded in DRAM and L1, copy, to_layout, and tilize / untilize
//! through the device for odd shapes. Also the bytes of device pages against tt-metal's tile
//! layout (four 16x16 faces) and page placement, read straight from device memory.

mod common;

use common::{chip, read, upload, values};
use proptest::prelude::*;
use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::tensor::{CoreRange, ShardSpec, TensorMemoryLayout};
use ttmesh_chip::{
    BufferType, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor, TensorSpec,
};

/// A grid of at least `n` cores: full rows of 8 (L1) or one row of banks (DRAM).
fn grid(n: usize, dram: bool) -> CoreRange {
    if dram || n <= 8 {
        CoreRange::grid(n as u32, 1)
    } else {
        CoreRange::grid(8, n.div_ceil(8) as u32)
    }
}

/// Every memory config that fits a tile tensor of `ht x wt` tiles (height counts all batches),
/// with shard sizes picked by `pick`.
fn configs(ht: usize, wt: usize, pick: &[usize]) -> Vec<MemoryConfig> {
    let mut out = vec![MemoryConfig::DRAM, MemoryConfig::L1];
    let p = |i: usize, max: usize| 1 + pick[i % pick.len()] % max;
    for (bt, cores) in [(BufferType::L1, 64usize), (BufferType::Dram, 12)] {
        let dram = bt == BufferType::Dram;
        let sh = p(0, ht).max(ht.div_ceil(cores));
        out.push(MemoryConfig::sharded(
            TensorMemoryLayout::HeightSharded,
            bt,
            ShardSpec::new(grid(ht.div_ceil(sh), dram), [sh * 32, wt * 32]),
        ));
        let sw = p(1, wt).max(wt.div_ceil(cores));
        out.push(MemoryConfig::sharded(
            TensorMemoryLayout::WidthSharded,
            bt,
            ShardSpec::new(grid(wt.div_ceil(sw), dram), [ht * 32, sw * 32]),
        ));
        if !dram {
            let (bh, bw) = (p(2, ht).max(ht.div_ceil(8)), p(3, wt).max(wt.div_ceil(8)));
            let n = ht.div_ceil(bh) * wt.div_ceil(bw);
            out.push(MemoryConfig::sharded(
                TensorMemoryLayout::BlockSharded,
                bt,
                ShardSpec::new(grid(n, false), [bh * 32, bw * 32]),
            ));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(16), ..ProptestConfig::default() })]

    /// A random chain of to_memory_config / reshard (into a fresh or a given output) over every
    /// memory config keeps every value bit for bit, for every dtype.
    #[test]
    fn memory_config_chains_keep_every_bit(batch in 1usize..3, h in 1usize..200, w in 1usize..200, dt in 0u8..4,
                                           pick in proptest::collection::vec(0usize..100, 4), chain in proptest::collection::vec(0usize..100, 1..8),
                                           seed in any::<u64>()) {
        let chip = chip();
        let dtype = [DataType::Float32, DataType::BFloat16, DataType::BFloat8B, DataType::UInt32][dt as usize];
        let shape = vec![batch, h, w];
        let n = batch * h * w;
        let (ht, wt) = (batch * h.div_ceil(32), w.div_ceil(32));
        let all = configs(ht, wt, &pick);
        let mut cur = if dtype == DataType::UInt32 {
            let host = HostTensor::from_u32(shape.clone(), (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect()).unwrap();
            Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap()
        } else {
            upload(&chip, &shape, dtype, Layout::Tile, MemoryConfig::DRAM, values(seed, n, -5.0, 5.0)).0
        };
        let original = cur.to_host(CqId(0)).unwrap();
        for (i, c) in chain.iter().enumerate() {
            let mc = &all[c % all.len()];
            cur = match i % 3 {
                0 => ops::to_memory_config(&cur, mc, &OpOptions::default()).unwrap(),
                1 => ops::reshard(&cur, mc, None, CqId(0)).unwrap(),
                _ => {
                    let out = Tensor::allocate(&chip, TensorSpec::new(shape.clone(), dtype, Layout::Tile, mc.clone())).unwrap();
                    ops::reshard(&cur, mc, Some(&out), CqId(0)).unwrap();
                    out
                }
            };
            prop_assert_eq!(&cur.spec().memory_config, mc);
        }
        prop_assert_eq!(cur.to_host(CqId(0)).unwrap(), original);
    }

    /// TILE <-> ROW_MAJOR on the device and back, and sharded ROW_MAJOR pages (whole rows).
    #[test]
    fn to_layout_round_trips_odd_shapes(shape in proptest::collection::vec(1usize..70, 1..4), bf16 in any::<bool>(), seed in any::<u64>()) {
        let chip = chip();
        let dtype = if bf16 { DataType::BFloat16 } else { DataType::Float32 };
        let n: usize = shape.iter().product();
        let (rm, held) = upload(&chip, &shape, dtype, Layout::RowMajor, MemoryConfig::DRAM, values(seed, n, -9.0, 9.0));
        let tiled = ops::to_layout(&rm, Layout::Tile, &OpOptions::default()).unwrap();
        prop_assert_eq!(tiled.spec().layout, Layout::Tile);
        prop_assert_eq!(read(&tiled), held.clone());
        let back = ops::to_layout(&tiled, Layout::RowMajor, &OpOptions { memory_config: Some(MemoryConfig::L1), ..Default::default() }).unwrap();
        prop_assert_eq!(back.spec().layout, Layout::RowMajor);
        prop_assert_eq!(read(&back), held.clone());
        // Row-major height sharding: shards of whole rows over up to 64 cores.
        let rows = n / shape.last().unwrap();
        let per = rows.div_ceil(64).max(1);
        let mc = MemoryConfig::sharded(TensorMemoryLayout::HeightSharded, BufferType::L1,
                                       ShardSpec::new(grid(rows.div_ceil(per), false), [per, *shape.last().unwrap()]));
        let sharded = ops::to_memory_config(&back, &mc, &OpOptions::default()).unwrap();
        prop_assert_eq!(read(&sharded), held);
    }
}

#[test]
fn copy_into_a_given_output_and_tilize_untilize_odd_shapes() {
    let chip = chip();
    for shape in [
        vec![1usize],
        vec![31],
        vec![33, 1],
        vec![3, 33, 65],
        vec![2, 2, 1, 97],
    ] {
        let n: usize = shape.iter().product();
        let (t, held) = upload(
            &chip,
            &shape,
            DataType::Float32,
            Layout::Tile,
            MemoryConfig::L1,
            values(n as u64, n, -1.0, 1.0),
        );
        assert_eq!(
            held,
            values(n as u64, n, -1.0, 1.0),
            "f32 TILE upload is exact for {shape:?}"
        );
        let out = Tensor::allocate(
            &chip,
            TensorSpec::new(
                shape.clone(),
                DataType::Float32,
                Layout::Tile,
                MemoryConfig::DRAM,
            ),
        )
        .unwrap();
        let same = ops::copy(&t, &OpOptions::into_output(&out)).unwrap();
        assert_eq!(
            same.buffer_address().unwrap(),
            out.buffer_address().unwrap()
        );
        assert_eq!(read(&out), held);
        let rm = ops::to_layout(&out, Layout::RowMajor, &OpOptions::default()).unwrap();
        let again = ops::to_layout(&rm, Layout::Tile, &OpOptions::default()).unwrap();
        assert_eq!(
            read(&again),
            held,
            "untilize + tilize on the device for {shape:?}"
        );
    }
}

/// The pages on the device are tt-metal's: a tile is four 16x16 faces (row-major faces, rows
/// within a face), tile pages go round-robin over the 12 DRAM banks at one address, and a
/// height-sharded tensor's shard i sits on core i of the grid (bank y*8 + x).
#[test]
fn device_pages_hold_faces_at_tt_metal_locations() {
    let chip = chip();
    let (h, w) = (64usize, 96usize);
    let data: Vec<f32> = (0..h * w).map(|i| i as f32).collect();
    let (t, _) = upload(
        &chip,
        &[h, w],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
        data,
    );
    chip.finish(CqId(0)).unwrap();
    let base = t.buffer_address().unwrap();
    let page = |bank: u32, addr: u64| {
        let mut b = vec![0u8; 4096];
        chip.memory()
            .read(MemSpace::Dram, bank, addr, &mut b)
            .unwrap();
        b.chunks_exact(4)
            .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
            .collect::<Vec<f32>>()
    };
    // 2 x 3 tiles = 6 pages over 12 banks: page p on bank p at the same address.
    for p in 0..6u32 {
        let (tr, tc) = (p as usize / 3, p as usize % 3);
        let tile = page(p, base);
        for (face, (fr, fc)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
            for r in 0..16 {
                for c in 0..16 {
                    let (row, col) = (tr * 32 + fr * 16 + r, tc * 32 + fc * 16 + c);
                    assert_eq!(
                        tile[face * 256 + r * 16 + c],
                        (row * w + col) as f32,
                        "page {p} face {face} ({r},{c})"
                    );
                }
            }
        }
    }
    assert_eq!(
        page(6, base),
        vec![0.0; 1024],
        "bank 6 holds nothing of a 6-page tensor"
    );

    // bf16 tiles: 2048 B pages of bf16 bit patterns.
    let (t16, held) = upload(
        &chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(5, 1024, -2.0, 2.0),
    );
    chip.finish(CqId(0)).unwrap();
    let pages = t16.pages().unwrap();
    assert_eq!(pages.map.page_size, 2048);
    let (bank, addr) = pages.location(0);
    let mut raw = vec![0u8; 2048];
    chip.memory()
        .read(MemSpace::L1, bank, addr, &mut raw)
        .unwrap();
    assert_eq!(
        f32::from_bits((u16::from_le_bytes([raw[2], raw[3]]) as u32) << 16),
        held[1]
    );
    assert_eq!(
        f32::from_bits((u16::from_le_bytes([raw[512], raw[513]]) as u32) << 16),
        held[16],
        "face 1 starts at column 16"
    );

    // Height sharded on a 4 x 2 grid, 2 tile rows per shard: shard i on core (i % 4, i / 4).
    let mc = MemoryConfig::sharded(
        TensorMemoryLayout::HeightSharded,
        BufferType::L1,
        ShardSpec::new(CoreRange::grid(4, 2), [64, 32]),
    );
    let data: Vec<f32> = (0..512 * 32).map(|i| i as f32).collect();
    let (s, _) = upload(&chip, &[512, 32], DataType::Float32, Layout::Tile, mc, data);
    chip.finish(CqId(0)).unwrap();
    let base = s.buffer_address().unwrap();
    for tile_row in 0..16u32 {
        let (shard, within) = (tile_row / 2, tile_row % 2);
        let bank = (shard / 4) * 8 + shard % 4;
        let mut b = vec![0u8; 4];
        chip.memory()
            .read(MemSpace::L1, bank, base + within as u64 * 4096, &mut b)
            .unwrap();
        assert_eq!(
            f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            (tile_row * 32 * 32) as f32,
            "tile row {tile_row}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(24), ..ProptestConfig::default() })]

    /// Kernels read and write float TILE tensors through a fused page path; it must agree bit
    /// for bit with the host's page codec (encode_pages / decode_pages) for every float dtype,
    /// odd shape and memory config. Half the widths are whole tiles, up to 20 of them: bands
    /// of whole tiles are converted a row at a time through groups of pages (16 bf16 or 8 f32
    /// tiles), and must agree too.
    #[test]
    fn kernel_page_io_matches_the_host_codec(batch in 1usize..3, h in 1usize..100, odd_w in 1usize..100, tiles_w in 1usize..=20,
                                             whole in any::<bool>(), dt in 0u8..3,
                                             pick in proptest::collection::vec(0usize..100, 4), c in 0usize..100, seed in any::<u64>()) {
        let w = if whole { 32 * tiles_w } else { odd_w };
        use ttmesh_chip::program::KernelContext;
        let chip = chip();
        let dtype = [DataType::Float32, DataType::BFloat16, DataType::BFloat8B][dt as usize];
        let shape = vec![batch, h, w];
        let n = batch * h * w;
        let all = configs(batch * h.div_ceil(32), w.div_ceil(32), &pick);
        let mc = all[c % all.len()].clone();
        let (t, held) = upload(&chip, &shape, dtype, Layout::Tile, mc, values(seed, n, -3.0, 3.0));
        chip.finish(CqId(0)).unwrap();
        let ctx = KernelContext { chip: 0, arch: chip.arch(), memory: chip.memory(), timeout: std::time::Duration::from_secs(5) };
        let addr = t.buffer_address().unwrap() as u32;
        let got = match ops::read_logical(&ctx, t.spec(), addr).unwrap() {
            ttmesh_chip::tensor::HostData::F32(v) => v,
            other => panic!("{other:?}"),
        };
        prop_assert!(got.iter().zip(&held).all(|(a, b)| a.to_bits() == b.to_bits()), "kernel read differs from the host decode");
        // Write new values through the kernel path; the host decode must see what the host
        // encoder would have stored.
        let fresh = values(seed ^ 9, n, -3.0, 3.0);
        ops::write_logical(&ctx, t.spec(), addr, &ttmesh_chip::tensor::HostData::F32(fresh.clone())).unwrap();
        let host = HostTensor::from_f32(shape.clone(), dtype, fresh).unwrap();
        let want = ttmesh_chip::tensor::decode_pages(t.spec(), &ttmesh_chip::tensor::encode_pages(t.spec(), &host.data).unwrap()).unwrap();
        prop_assert_eq!(t.to_host(CqId(0)).unwrap().data, want);
    }
}

/// The kernel page path's conversions run vectorised (AVX2 where the host has it); the
/// values where rounding and NaN handling differ from a plain shift must still come out as
/// the host codec stores them: halfway cases (ties to even, both ways), NaNs with payloads
/// only in the low bits, infinities, subnormals, the largest finite values, signed zeros.
#[test]
fn kernel_page_io_converts_special_values_like_the_host_codec() {
    use ttmesh_chip::program::KernelContext;
    let special = [
        0u32,
        0x8000_0000,
        0x7F80_0000,
        0xFF80_0000,
        0x7FC0_0000,
        0x7F80_0001,
        0xFF80_0001,
        0x7FFF_FFFF,
        0x7F7F_FFFF,
        0xFF7F_FFFF,
        0x0000_8000,
        0x0001_8000,
        0x3F80_8000,
        0x3F81_8000,
        0x3F80_7FFF,
        0x3F80_8001,
        0x0000_0001,
        0x807F_FFFF,
        0x4049_0FDB,
    ];
    let chip = chip();
    // 40 x 70: whole tiles and right / bottom edge tiles, every value at every lane offset.
    // 64 x 640: bands of whole tiles, converted by rows in groups of pages (16 + 4 bf16
    // tiles, 8 + 8 + 4 f32 ones).
    for ((h, w), dtype) in [(40, 70), (64, 640)]
        .into_iter()
        .flat_map(|hw| [(hw, DataType::BFloat16), (hw, DataType::Float32)])
    {
        let vals: Vec<f32> = (0..h * w)
            .map(|i| f32::from_bits(special[(i * 7 + i / w) % special.len()]))
            .collect();
        let (t, _) = upload(
            &chip,
            &[h, w],
            dtype,
            Layout::Tile,
            MemoryConfig::DRAM,
            vec![0.0; h * w],
        );
        chip.finish(CqId(0)).unwrap();
        let ctx = KernelContext {
            chip: 0,
            arch: chip.arch(),
            memory: chip.memory(),
            timeout: std::time::Duration::from_secs(5),
        };
        let addr = t.buffer_address().unwrap() as u32;
        ops::write_logical(
            &ctx,
            t.spec(),
            addr,
            &ttmesh_chip::tensor::HostData::F32(vals.clone()),
        )
        .unwrap();
        let host = HostTensor::from_f32(vec![h, w], dtype, vals.clone()).unwrap();
        let want = ttmesh_chip::tensor::decode_pages(
            t.spec(),
            &ttmesh_chip::tensor::encode_pages(t.spec(), &host.data).unwrap(),
        )
        .unwrap();
        let stored = t.to_host(CqId(0)).unwrap().data;
        let bits = |d: &ttmesh_chip::tensor::HostData| match d {
            ttmesh_chip::tensor::HostData::F32(v) => {
                v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bits(&stored),
            bits(&want),
            "{dtype:?}: kernel encode differs from the host codec"
        );
        let read_back = ops::read_logical(&ctx, t.spec(), addr).unwrap();
        assert_eq!(
            bits(&read_back),
            bits(&want),
            "{dtype:?}: kernel decode differs from the host codec"
        );
    }
}

/// TT-NN's rule: an op given an output tensor writes it in that tensor's memory config.
#[test]
fn a_given_output_decides_the_memory_config() {
    let chip = chip();
    let (x, held) = upload(
        &chip,
        &[64, 64],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(8, 4096, -1.0, 1.0),
    );
    let mc = MemoryConfig::sharded(
        TensorMemoryLayout::WidthSharded,
        BufferType::Dram,
        ShardSpec::new(CoreRange::grid(2, 1), [64, 32]),
    );
    let out = Tensor::allocate(
        &chip,
        TensorSpec::new(vec![64, 64], DataType::BFloat16, Layout::Tile, mc),
    )
    .unwrap();
    let y = ops::relu(&x, &OpOptions::into_output(&out)).unwrap();
    assert_eq!(y.buffer_address().unwrap(), out.buffer_address().unwrap());
    let want: Vec<f32> = held.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(read(&out), want);
    // An explicit memory config that contradicts the output is still an error.
    let opts = OpOptions {
        output: Some(out.clone()),
        memory_config: Some(MemoryConfig::L1),
        ..Default::default()
    };
    assert!(ops::relu(&x, &opts)
        .unwrap_err()
        .to_string()
        .contains("the output tensor given is"));
}
