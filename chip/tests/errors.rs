//! Bad input returns an error that names the tensor or buffer and what is wrong; nothing panics.

mod common;

use common::{chip, chip_with, upload, values};
use ttmesh_chip::ops::{self, MatmulConfig, OpOptions};
use ttmesh_chip::tensor::{CoreRange, ShardSpec, TensorMemoryLayout};
use ttmesh_chip::{
    BufferType, ChipError, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor, TensorSpec,
};

fn spec(shape: &[usize], dtype: DataType, mc: MemoryConfig) -> TensorSpec {
    TensorSpec::new(shape.to_vec(), dtype, Layout::Tile, mc)
}

#[test]
fn mismatched_shapes_name_both_tensors() {
    let chip = chip();
    let a = Tensor::allocate(
        &chip,
        spec(&[64, 96], DataType::BFloat16, MemoryConfig::DRAM),
    )
    .unwrap();
    let b = Tensor::allocate(
        &chip,
        spec(&[64, 32], DataType::BFloat16, MemoryConfig::DRAM),
    )
    .unwrap();
    let e = ops::matmul(&a, &b, &MatmulConfig::default()).unwrap_err();
    assert!(matches!(e, ChipError::ShapeMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("tensor #{}", a.id()))
            && msg.contains(&format!("tensor #{}", b.id()))
            && msg.contains("K 96 vs 64"),
        "{msg}"
    );

    let c = Tensor::allocate(
        &chip,
        spec(&[3, 64, 32], DataType::BFloat16, MemoryConfig::DRAM),
    )
    .unwrap();
    let d = Tensor::allocate(
        &chip,
        spec(&[2, 32, 32], DataType::BFloat16, MemoryConfig::DRAM),
    )
    .unwrap();
    let msg = ops::matmul(&c, &d, &MatmulConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("batch of") && msg.contains(&format!("tensor #{}", d.id())),
        "{msg}"
    );
    let msg = ops::add(&a, &b, &OpOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("do not broadcast") && msg.contains(&format!("tensor #{}", a.id())),
        "{msg}"
    );
    let bias =
        Tensor::allocate(&chip, spec(&[1, 7], DataType::BFloat16, MemoryConfig::L1)).unwrap();
    let msg = ops::matmul(
        &a,
        &Tensor::allocate(
            &chip,
            spec(&[96, 32], DataType::BFloat16, MemoryConfig::DRAM),
        )
        .unwrap(),
        &MatmulConfig {
            bias: Some(bias.clone()),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("bias") && msg.contains(&format!("tensor #{}", bias.id())),
        "{msg}"
    );

    // Writing a host tensor of another shape, and an output of the wrong spec.
    let host = HostTensor::from_f32(vec![64, 95], DataType::BFloat16, vec![0.0; 64 * 95]).unwrap();
    let msg = a.copy_from_host(&host, CqId(0)).unwrap_err().to_string();
    assert!(
        msg.contains("[64, 95]") && msg.contains(&format!("tensor #{}", a.id())),
        "{msg}"
    );
    let msg = ops::relu(&a, &OpOptions::into_output(&b))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("the output tensor given is") && msg.contains(&format!("tensor #{}", b.id())),
        "{msg}"
    );
    let msg = ops::copy(&a, &OpOptions::into_output(&b))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("differ in shape"), "{msg}");
    let msg = ops::rms_norm(&a, Some(&b), 1e-5, &OpOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("gamma") && msg.contains("(96)"), "{msg}");
    assert!(
        HostTensor::from_f32(vec![2, 3], DataType::Float32, vec![0.0; 5])
            .unwrap_err()
            .to_string()
            .contains("holds 6 elements but 5")
    );
    assert!(
        Tensor::allocate(&chip, spec(&[4, 0], DataType::Float32, MemoryConfig::DRAM))
            .unwrap_err()
            .to_string()
            .contains("no elements")
    );
}

#[test]
fn shard_specs_that_do_not_fit_are_refused() {
    let chip = chip();
    let mc =
        |layout, bt, grid, shape| MemoryConfig::sharded(layout, bt, ShardSpec::new(grid, shape));
    let cases = [
        // 128 shards of one tile row, 64 cores.
        (
            mc(
                TensorMemoryLayout::HeightSharded,
                BufferType::L1,
                CoreRange::grid(8, 8),
                [32, 64],
            ),
            "128 shards",
            "only 64 cores",
        ),
        // Core (8, 0) is outside the 8 x 8 compute grid.
        (
            mc(
                TensorMemoryLayout::HeightSharded,
                BufferType::L1,
                CoreRange::new((0, 0), (8, 0)),
                [512, 64],
            ),
            "core (8, 0) is outside the compute grid",
            "",
        ),
        // DRAM shards go on the 12 banks.
        (
            mc(
                TensorMemoryLayout::WidthSharded,
                BufferType::Dram,
                CoreRange::grid(13, 1),
                [4096, 32],
            ),
            "outside the DRAM banks (12x1)",
            "",
        ),
        (
            mc(
                TensorMemoryLayout::HeightSharded,
                BufferType::L1,
                CoreRange::grid(8, 8),
                [48, 64],
            ),
            "multiple of the 32x32 tile",
            "",
        ),
        (
            mc(
                TensorMemoryLayout::WidthSharded,
                BufferType::L1,
                CoreRange::grid(2, 1),
                [64, 32],
            ),
            "whole columns",
            "",
        ),
    ];
    for (mc, want, want2) in cases {
        let e = Tensor::allocate(&chip, spec(&[4096, 64], DataType::BFloat16, mc)).unwrap_err();
        assert!(matches!(e, ChipError::InvalidShardSpec { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(want) && msg.contains(want2) && msg.contains("tensor [4096, 64] BFLOAT16"),
            "{msg}"
        );
    }
    // A sharded layout without a spec, and an op asked for an output that does not fit.
    let no_spec = MemoryConfig {
        memory_layout: TensorMemoryLayout::BlockSharded,
        buffer_type: BufferType::L1,
        shard_spec: None,
    };
    assert!(matches!(
        Tensor::allocate(&chip, spec(&[64, 64], DataType::BFloat16, no_spec)),
        Err(ChipError::InvalidShardSpec { .. })
    ));
    let x = Tensor::allocate(
        &chip,
        spec(&[4096, 64], DataType::BFloat16, MemoryConfig::DRAM),
    )
    .unwrap();
    let tiny = mc(
        TensorMemoryLayout::HeightSharded,
        BufferType::L1,
        CoreRange::grid(2, 1),
        [32, 64],
    );
    let msg = ops::to_memory_config(&x, &tiny, &OpOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("InterleavedToSharded output") && msg.contains("only 2 cores"),
        "{msg}"
    );
    // L1_SMALL interleaved.
    let chip = chip_with(|c| c.l1_small_size = 32 << 10);
    let small = MemoryConfig {
        buffer_type: BufferType::L1Small,
        ..MemoryConfig::L1
    };
    assert_eq!(
        Tensor::allocate(&chip, spec(&[32, 32], DataType::BFloat16, small))
            .unwrap_err()
            .to_string(),
        "L1_SMALL only supports sharded allocations"
    );
}

#[test]
fn dtypes_an_op_cannot_take() {
    let chip = chip();
    let u = Tensor::from_host(
        &HostTensor::from_u32(vec![32, 32], vec![1; 1024]).unwrap(),
        &chip,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap();
    let f = Tensor::allocate(
        &chip,
        spec(&[32, 32], DataType::Float32, MemoryConfig::DRAM),
    )
    .unwrap();
    let e = ops::matmul(&u, &f, &MatmulConfig::default()).unwrap_err();
    assert!(matches!(e, ChipError::Unsupported { .. }));
    assert_eq!(
        e.to_string(),
        format!(
            "matmul does not support dtype UINT32 of {}: typecast it to BFLOAT16 or FLOAT32 first",
            u.name()
        )
    );
    for r in [
        ops::add(&f, &u, &OpOptions::default()),
        ops::relu(&u, &OpOptions::default()),
        ops::softmax(&u, &OpOptions::default()),
    ] {
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("UINT32") && msg.contains(&format!("tensor #{}", u.id())),
            "{msg}"
        );
    }
    let rm = Tensor::allocate(
        &chip,
        TensorSpec::new(
            vec![32, 32],
            DataType::Float32,
            Layout::RowMajor,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap();
    assert!(ops::matmul(&rm, &f, &MatmulConfig::default())
        .unwrap_err()
        .to_string()
        .contains("ROW_MAJOR layout of"));
    let b8 = Tensor::allocate(
        &chip,
        spec(&[32, 32], DataType::BFloat8B, MemoryConfig::DRAM),
    )
    .unwrap();
    assert!(ops::to_layout(&b8, Layout::RowMajor, &OpOptions::default())
        .unwrap_err()
        .to_string()
        .contains("ROW_MAJOR from BFLOAT8_B"));
    assert!(
        ops::typecast(&rm, DataType::BFloat8B, &OpOptions::default())
            .unwrap_err()
            .to_string()
            .contains("BFLOAT8_B output from ROW_MAJOR")
    );
    let e = Tensor::allocate(
        &chip,
        TensorSpec::new(
            vec![32, 32],
            DataType::BFloat8B,
            Layout::RowMajor,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("BFLOAT8_B in ROW_MAJOR layout"),
        "{e}"
    );
    assert!(
        HostTensor::from_f32(vec![2], DataType::UInt32, vec![1.0, 2.0])
            .unwrap_err()
            .to_string()
            .contains("from_u32")
    );
}

#[test]
fn double_free_and_use_after_free_name_the_tensor() {
    let chip = chip();
    let (t, _) = upload(
        &chip,
        &[64, 64],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(1, 4096, -1.0, 1.0),
    );
    let name = t.name();
    t.deallocate(true).unwrap();
    let e = t.deallocate(true).unwrap_err();
    assert_eq!(
        e,
        ChipError::Deallocated {
            tensor: name.clone(),
            action: "deallocated again (double free)"
        }
    );
    assert!(
        e.to_string()
            .starts_with(&format!("{name} was deallocated")),
        "{e}"
    );
    let used = [
        ops::relu(&t, &OpOptions::default()).unwrap_err(),
        t.to_host(CqId(0)).unwrap_err(),
        t.copy_from_host(
            &HostTensor::zeros(vec![64, 64], DataType::BFloat16),
            CqId(0),
        )
        .unwrap_err(),
        t.buffer_address().unwrap_err(),
    ];
    for e in used {
        assert!(
            matches!(&e, ChipError::Deallocated { tensor, .. } if *tensor == name),
            "{e:?}"
        );
    }
    // A deallocated output is refused too.
    let (x, _) = upload(
        &chip,
        &[64, 64],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(2, 4096, -1.0, 1.0),
    );
    let out = Tensor::allocate(&chip, x.spec().clone()).unwrap();
    out.deallocate(true).unwrap();
    assert!(ops::relu(&x, &OpOptions::into_output(&out))
        .unwrap_err()
        .to_string()
        .contains("cannot be written as an output"));
    // Without force, a shared tensor stays until its last handle goes.
    let y = Tensor::allocate(&chip, x.spec().clone()).unwrap();
    let y2 = y.clone();
    y.deallocate(false).unwrap();
    assert!(y2.is_allocated());
    drop(y);
    y2.deallocate(false).unwrap();
    assert!(!y2.is_allocated());
    assert_eq!(
        chip.statistics(BufferType::L1).total_allocated_bytes,
        x.allocation("t").unwrap().per_bank_size
    );
}

#[test]
fn queues_and_chips_refuse_what_they_do_not_have() {
    for n in [0u8, 3, 255] {
        let e = ttmesh_chip::Chip::open(ttmesh_chip::ChipConfig {
            num_command_queues: n,
            ..ttmesh_chip::ChipConfig::new(0, ttmesh_chip::ArchSpec::wormhole_b0())
        })
        .err()
        .expect("only 1 or 2 CQs");
        assert!(
            e.to_string().contains("num hw cqs must be between 1 and 2"),
            "{e}"
        );
    }
    let chip = chip();
    let (t, _) = upload(
        &chip,
        &[32, 32],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(3, 1024, -1.0, 1.0),
    );
    let msg = t.to_host(CqId(1)).unwrap_err().to_string();
    assert!(
        msg.contains("CQ 1 does not exist on chip 0") && msg.contains("num_command_queues 2"),
        "{msg}"
    );
    assert!(ops::relu(&t, &OpOptions::on_cq(CqId(1))).is_err());
    // Tensors of two chips do not mix.
    let other = chip_with(|c| c.id = 1);
    let (u, _) = upload(
        &other,
        &[32, 32],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(4, 1024, -1.0, 1.0),
    );
    assert!(ops::add(&t, &u, &OpOptions::default())
        .unwrap_err()
        .to_string()
        .contains("is on another chip"));
    let e = other.create_event();
    assert!(chip
        .record_event(CqId(0), &e)
        .unwrap_err()
        .to_string()
        .contains("event of chip 1 used on chip 0"));
    // A closed chip refuses work with its id.
    chip.close().unwrap();
    assert_eq!(
        ops::relu(&t, &OpOptions::default()).unwrap_err(),
        ChipError::Closed(0)
    );
    assert_eq!(t.to_host(CqId(0)).unwrap_err(), ChipError::Closed(0));
    assert!(ttmesh_chip::ArchSpec::from_name("grayskull")
        .unwrap_err()
        .to_string()
        .contains("grayskull"));
}
