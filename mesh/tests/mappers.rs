//! Mappers and composers: every chip gets the right part of a host tensor, composing gives the
//! original back (on the host and through device memory), and bad dims are refused with a
//! message naming the dim and the shape.

mod common;

use common::*;
use proptest::prelude::*;
use ttmesh::*;

fn values(h: &HostTensor) -> Vec<f32> {
    h.to_f32_vec()
}

fn iota(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::from_f32(
        shape.to_vec(),
        DataType::Float32,
        (0..n).map(|i| i as f32).collect(),
    )
    .unwrap()
}

#[test]
fn shard_on_each_dim_gives_each_chip_its_chunk_and_concat_restores() {
    let shape = [4, 8, 16, 24];
    let host = iota(&shape);
    for (rows, cols) in [(1, 2), (2, 2), (2, 4), (1, 8)] {
        let ms = MeshShape::new(rows, cols);
        let n = ms.num_devices();
        for dim in 0..4 {
            if shape[dim] % n != 0 {
                continue;
            }
            let parts = ShardTensorToMesh(dim).map(&host, ms).unwrap();
            assert_eq!(parts.len(), n);
            for (j, p) in parts.iter().enumerate() {
                let mut want_shape = shape.to_vec();
                want_shape[dim] /= n;
                assert_eq!(p.shape, want_shape);
                assert_eq!(values(p), chunk_ref(&values(&host), &shape, dim, n, j));
            }
            let back = ConcatMeshToTensor(dim).compose(parts, ms).unwrap();
            assert_eq!(back, host, "{ms} dim {dim}");
        }
    }
}

#[test]
fn replicate_gives_every_chip_the_whole_tensor() {
    let host = exact(&[1, 1, 32, 64], DataType::BFloat16, 3);
    let parts = ReplicateTensorToMesh
        .map(&host, MeshShape::new(2, 4))
        .unwrap();
    assert_eq!(parts.len(), 8);
    assert!(parts.iter().all(|p| *p == host));
    // Concatenating replicas along dim 0 stacks them.
    let stacked = ConcatMeshToTensor(0)
        .compose(parts, MeshShape::new(2, 4))
        .unwrap();
    assert_eq!(stacked.shape, vec![8, 1, 32, 64]);
}

#[test]
fn shard_2d_splits_rows_and_columns_and_none_replicates() {
    let shape = [2, 4, 8, 12];
    let host = iota(&shape);
    let v = values(&host);
    let ms = MeshShape::new(2, 4);
    // dims[0] splits over the 2 mesh rows, dims[1] over the 4 mesh columns.
    let parts = ShardTensor2dMesh([Some(0), Some(1)])
        .map(&host, ms)
        .unwrap();
    for r in 0..2 {
        let row = chunk_ref(&v, &shape, 0, 2, r);
        for c in 0..4 {
            let want = chunk_ref(&row, &[1, 4, 8, 12], 1, 4, c);
            assert_eq!(values(&parts[r * 4 + c]), want, "chip ({r}, {c})");
            assert_eq!(parts[r * 4 + c].shape, vec![1, 1, 8, 12]);
        }
    }
    let back = ConcatMesh2dToTensor([0, 1]).compose(parts, ms).unwrap();
    assert_eq!(back, host);

    // None on rows: every row holds the same column split.
    let parts = ShardTensor2dMesh([None, Some(3)]).map(&host, ms).unwrap();
    for r in 0..2 {
        for c in 0..4 {
            assert_eq!(values(&parts[r * 4 + c]), chunk_ref(&v, &shape, 3, 4, c));
        }
    }
    // None on columns: every column holds the same row split.
    let parts = ShardTensor2dMesh([Some(2), None]).map(&host, ms).unwrap();
    for r in 0..2 {
        for c in 0..4 {
            assert_eq!(values(&parts[r * 4 + c]), chunk_ref(&v, &shape, 2, 2, r));
        }
    }
    // Both None: replicated everywhere.
    let parts = ShardTensor2dMesh([None, None]).map(&host, ms).unwrap();
    assert!(parts.iter().all(|p| *p == host));
    // Composing a 2d split on (2, 3) back with the same dims.
    let parts = ShardTensor2dMesh([Some(2), Some(3)])
        .map(&host, ms)
        .unwrap();
    let back = ConcatMesh2dToTensor([2, 3]).compose(parts, ms).unwrap();
    assert_eq!(back, host);
}

#[test]
fn bad_dims_are_refused_with_the_dim_and_shape() {
    let host = iota(&[1, 1, 30, 64]);
    let ms = MeshShape::new(2, 4);
    let e = ShardTensorToMesh(2).map(&host, ms).unwrap_err().to_string();
    assert!(
        e.contains("dim 2") && e.contains("[1, 1, 30, 64]") && e.contains("8 chips"),
        "{e}"
    );
    let e = ShardTensorToMesh(4).map(&host, ms).unwrap_err().to_string();
    assert!(e.contains("dim 4") && e.contains("out of range"), "{e}");
    let e = ShardTensor2dMesh([Some(9), None])
        .map(&host, ms)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dim 9"), "{e}");
    // 30 rows do not split over 4 columns.
    let e = ShardTensor2dMesh([None, Some(2)])
        .map(&host, ms)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dim 2") && e.contains("4 chips"), "{e}");
    let parts = ShardTensorToMesh(3).map(&host, ms).unwrap();
    let e = ConcatMeshToTensor(7)
        .compose(parts.clone(), ms)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dim 7") && e.contains("out of range"), "{e}");
    let e = ConcatMesh2dToTensor([0, 5])
        .compose(parts, ms)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dim 5"), "{e}");
    // Shards that disagree outside the concat dim.
    let odd = vec![iota(&[1, 1, 32, 8]), iota(&[1, 1, 16, 8])];
    let e = ConcatMeshToTensor(3)
        .compose(odd, MeshShape::new(1, 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("differ"), "{e}");
    let e = ConcatMeshToTensor(0)
        .compose(Vec::new(), MeshShape::new(1, 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no tensors"), "{e}");
    // From the device API too: the error comes back before anything is allocated.
    let mesh = open("t3k", FabricConfig::Disabled);
    let before = mesh.reports()[0].dram_allocated;
    let e = MeshTensor::from_host(
        &host,
        &mesh,
        &ShardTensorToMesh(2),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not split"), "{e}");
    assert_eq!(mesh.reports()[0].dram_allocated, before);
    mesh.close().unwrap();
}

#[test]
fn round_trip_through_device_memory() {
    let mesh = open("t3k", FabricConfig::Disabled);
    let ms = mesh.shape();
    for (dtype, layout) in [
        (DataType::Float32, Layout::Tile),
        (DataType::BFloat16, Layout::Tile),
        (DataType::Float32, Layout::RowMajor),
    ] {
        let host = random(&[2, 8, 40, 64], dtype, 17);
        let cases: Vec<(Box<dyn MeshMapper>, Box<dyn MeshComposer>)> = vec![
            (
                Box::new(ShardTensorToMesh(1)),
                Box::new(ConcatMeshToTensor(1)),
            ),
            (
                Box::new(ShardTensorToMesh(3)),
                Box::new(ConcatMeshToTensor(3)),
            ),
            (
                Box::new(ShardTensor2dMesh([Some(0), Some(1)])),
                Box::new(ConcatMesh2dToTensor([0, 1])),
            ),
            (
                Box::new(ShardTensor2dMesh([Some(2), Some(3)])),
                Box::new(ConcatMesh2dToTensor([2, 3])),
            ),
        ];
        for (i, (mapper, composer)) in cases.iter().enumerate() {
            let t = MeshTensor::from_host(
                &host,
                &mesh,
                mapper.as_ref(),
                layout,
                MemoryConfig::DRAM,
                CqId(0),
            )
            .unwrap();
            // Every chip holds exactly what the mapper gave it.
            let want = mapped_f32(&mesh, &host, mapper.as_ref());
            assert_eq!(shards_f32(&t), want, "case {i} {dtype} {layout:?}");
            let back = t.to_host(composer.as_ref(), CqId(0)).unwrap();
            assert_eq!(back, host, "case {i} {dtype} {layout:?} on {ms}");
            t.deallocate(false).unwrap();
        }
        let r = MeshTensor::from_host(
            &host,
            &mesh,
            &ReplicateTensorToMesh,
            layout,
            MemoryConfig::DRAM,
            CqId(0),
        )
        .unwrap();
        for s in r.to_host_shards(CqId(0)).unwrap() {
            assert_eq!(s, host);
        }
        // copy_from_host rewrites the same buffers.
        let other = random(&[2, 8, 40, 64], dtype, 18);
        let addr = r.buffer_address().unwrap();
        r.copy_from_host(&other, &ReplicateTensorToMesh, CqId(0))
            .unwrap();
        assert_eq!(r.buffer_address().unwrap(), addr);
        for s in r.to_host_shards(CqId(0)).unwrap() {
            assert_eq!(s, other);
        }
        r.deallocate(false).unwrap();
    }
    mesh.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Shard then concat is the identity, for any shape, dim and mesh that divide.
    #[test]
    fn shard_concat_identity(
        dims in proptest::collection::vec(1usize..4, 1..5),
        rows in 1usize..3,
        cols in 1usize..5,
        dim_pick in 0usize..8,
        seed in 0u64..1000,
    ) {
        let ms = MeshShape::new(rows, cols);
        let n = ms.num_devices();
        let dim = dim_pick % dims.len();
        let mut shape = dims.clone();
        shape[dim] *= n;
        let host = random(&shape, DataType::Float32, seed);
        let parts = ShardTensorToMesh(dim).map(&host, ms).unwrap();
        prop_assert_eq!(parts.len(), n);
        let back = ConcatMeshToTensor(dim).compose(parts, ms).unwrap();
        prop_assert_eq!(back, host);
    }

    /// The 2D mapper and composer are inverse when both axes split distinct dims.
    #[test]
    fn shard_2d_concat_identity(
        rows in 1usize..4,
        cols in 1usize..4,
        d0 in 0usize..3,
        d1_off in 1usize..3,
        seed in 0u64..1000,
    ) {
        let d1 = (d0 + d1_off) % 3;
        let ms = MeshShape::new(rows, cols);
        let mut shape = vec![2, 3, 2];
        shape[d0] *= rows;
        shape[d1] *= cols;
        let host = random(&shape, DataType::Float32, seed);
        let parts = ShardTensor2dMesh([Some(d0), Some(d1)]).map(&host, ms).unwrap();
        prop_assert_eq!(parts.len(), rows * cols);
        let back = ConcatMesh2dToTensor([d0, d1]).compose(parts, ms).unwrap();
        prop_assert_eq!(back, host);
    }
}

/// `map_distinct` (what writing a mesh tensor uses: each distinct part encoded once) gives
/// every chip the part `map` gives it, for every mapper and mesh shape; and a mesh tensor
/// written from a mapper that replicates over one axis holds on each chip what `map` says.
#[test]
fn distinct_parts_are_what_map_gives_every_chip() {
    let host = iota(&[4, 8, 16, 24]);
    let mappers: Vec<Box<dyn MeshMapper>> = vec![
        Box::new(ReplicateTensorToMesh),
        Box::new(ShardTensorToMesh(1)),
        Box::new(ShardTensor2dMesh([None, None])),
        Box::new(ShardTensor2dMesh([Some(0), None])),
        Box::new(ShardTensor2dMesh([None, Some(1)])),
        Box::new(ShardTensor2dMesh([Some(0), Some(1)])),
    ];
    for (rows, cols) in [(1, 1), (1, 2), (2, 2), (2, 4), (4, 1)] {
        let ms = MeshShape::new(rows, cols);
        for (i, m) in mappers.iter().enumerate() {
            let all = m.map(&host, ms).unwrap();
            let d = m.map_distinct(&host, ms).unwrap();
            assert_eq!(d.of_chip.len(), rows * cols, "mapper {i} on {ms}");
            for (chip, &p) in d.of_chip.iter().enumerate() {
                assert_eq!(*d.parts[p], all[chip], "mapper {i} on {ms}: chip {chip}");
            }
            // Replicating mappers share: never more parts than distinct values.
            let distinct = match i {
                0 | 2 => 1,
                3 => rows,
                4 => cols,
                _ => rows * cols,
            };
            assert_eq!(
                d.parts.len(),
                distinct.min(rows * cols),
                "mapper {i} on {ms}"
            );
        }
    }
    let mesh = open("t3k", FabricConfig::Disabled);
    for (i, m) in mappers.iter().enumerate() {
        let t = MeshTensor::from_host(
            &host,
            &mesh,
            m.as_ref(),
            Layout::Tile,
            MemoryConfig::DRAM,
            CqId(0),
        )
        .unwrap();
        assert_eq!(
            shards_f32(&t),
            mapped_f32(&mesh, &host, m.as_ref()),
            "mapper {i}"
        );
        t.deallocate(false).unwrap();
    }
    mesh.close().unwrap();
}
