//! Publishing seen from inside the publishing process: after every step of a traced
//! tensor-parallel block, the segment holds exactly what `MeshDevice::reports` computes from
//! the allocator's own counters; closing the mesh removes the segment.

use std::time::{Duration, Instant};
use ttmesh::Blocking;

use ttmesh::ccl::CclArgs;
use ttmesh::ops::{self, MeshMatmulConfig};
use ttmesh::{
    Activation, CqId, DataType, HostTensor, Layout, MemoryConfig, MeshConfig, MeshDevice,
    MeshTensor, ReplicateTensorToMesh, ShardTensorToMesh,
};
use ttmesh_monitor::{read_segment, ProcessSnapshot};

fn host(shape: Vec<usize>, seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 97) as f32 / 97.0 - 0.5)
        .collect();
    HostTensor::from_f32(shape, DataType::BFloat16, v).unwrap()
}

/// Memory figures must match at once (the allocator's listener publishes synchronously);
/// trace counters within a few refresh periods.
fn check(mesh: &MeshDevice, step: &str) -> ProcessSnapshot {
    let name = mesh.monitor_segment().expect("publishing is on");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snap = read_segment(&name).expect("read own segment");
        let reports = mesh.reports();
        assert_eq!(snap.chips.len(), reports.len(), "{step}");
        let mut traces_ok = true;
        for (c, r) in snap.chips.iter().zip(&reports) {
            assert_eq!(c.id, r.id, "{step}");
            assert_eq!(c.coord, (r.coord.row as u32, r.coord.col as u32), "{step}");
            assert_eq!(
                c.dram.allocated, r.dram_allocated,
                "{step}: chip {} DRAM",
                r.id
            );
            assert_eq!(
                c.dram.capacity, r.dram_capacity,
                "{step}: chip {} DRAM",
                r.id
            );
            assert_eq!(c.l1.allocated, r.l1_allocated, "{step}: chip {} L1", r.id);
            assert_eq!(c.l1.capacity, r.l1_capacity, "{step}: chip {} L1", r.id);
            assert_eq!(
                c.l1_small.allocated, r.l1_small_allocated,
                "{step}: chip {}",
                r.id
            );
            assert_eq!(
                c.trace.allocated, r.trace_allocated,
                "{step}: chip {} TRACE",
                r.id
            );
            // The region is rounded up to whole aligned pages in each of the 12 DRAM banks.
            assert!(
                c.trace.capacity >= r.trace_region_size,
                "{step}: chip {}",
                r.id
            );
            assert!(
                c.trace.capacity < r.trace_region_size + 12 * 64 * 1024,
                "{step}"
            );
            assert!(c.dram.peak >= c.dram.allocated, "{step}");
            traces_ok &= c.traces == r.live_traces && c.replays == r.trace_replays;
        }
        if traces_ok {
            return snap;
        }
        assert!(
            Instant::now() < deadline,
            "{step}: trace counters never caught up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn segment_follows_every_step_and_goes_with_close() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 1_000_000,
        ..Default::default()
    })
    .unwrap();
    let name = mesh.monitor_segment().expect("publishing is on by default");
    assert!(name.starts_with(&format!("ttmesh-{}", std::process::id())));
    let s = check(&mesh, "open");
    assert_eq!(s.info.topology, "t3k");
    assert_eq!(s.info.mesh_shape, (2, 4));
    assert!(s
        .chips
        .iter()
        .all(|c| c.dram.allocated == 0 && c.dram.largest_free == c.dram.capacity));
    assert!(!s.links.is_empty());

    let cq = CqId(0);
    let (t, h, f) = (32, 256, 1024);
    let w1 = MeshTensor::from_host(
        &host(vec![h, f], 1),
        &mesh,
        &ShardTensorToMesh(1),
        Layout::Tile,
        MemoryConfig::DRAM,
        cq,
    )
    .unwrap();
    let w2 = MeshTensor::from_host(
        &host(vec![f, h], 2),
        &mesh,
        &ShardTensorToMesh(0),
        Layout::Tile,
        MemoryConfig::DRAM,
        cq,
    )
    .unwrap();
    let x = MeshTensor::from_host(
        &host(vec![1, 1, t, h], 3),
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        cq,
    )
    .unwrap();
    let s = check(&mesh, "weights");
    assert!(s
        .chips
        .iter()
        .all(|c| c.dram.live_buffers == 3 && c.dram.allocated > 0));

    let block = |x: &MeshTensor| {
        let up = MeshMatmulConfig {
            activation: Some(Activation::Gelu { approximate: false }),
            ..Default::default()
        };
        let h = ops::column_parallel_matmul(x, &w1, &up, None)?;
        ops::row_parallel_matmul(&h, &w2, &MeshMatmulConfig::default(), &CclArgs::default())
    };
    let y = block(&x).unwrap();
    y.to_host_shards(cq).unwrap();
    check(&mesh, "untraced block");
    drop(y);
    mesh.synchronize_device().unwrap();
    check(&mesh, "untraced output dropped");

    let tid = mesh.begin_trace_capture(cq).unwrap();
    let y = block(&x).unwrap();
    mesh.end_trace_capture(tid, cq).unwrap();
    let s = check(&mesh, "captured");
    assert!(s
        .chips
        .iter()
        .all(|c| c.traces == 1 && c.trace.allocated > 0 && c.trace_bytes > 0));
    for _ in 0..3 {
        mesh.execute_trace(tid, cq, Blocking::No).unwrap();
        y.to_host_shards(cq).unwrap();
    }
    let s = check(&mesh, "replayed");
    assert!(s.chips.iter().all(|c| c.replays == 3));
    // The all_reduce moved data over the fabric: some link counted packets.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read_segment(&name)
        .unwrap()
        .links
        .iter()
        .any(|l| l.packets > 0 && l.bytes > 0)
    {
        assert!(Instant::now() < deadline, "no link traffic published");
        std::thread::sleep(Duration::from_millis(20));
    }

    mesh.release_trace(tid).unwrap();
    drop(y);
    mesh.synchronize_device().unwrap();
    let s = check(&mesh, "released");
    assert!(s
        .chips
        .iter()
        .all(|c| c.traces == 0 && c.trace.allocated == 0));

    drop((w1, w2, x));
    mesh.close().unwrap();
    assert_eq!(mesh.monitor_segment(), None);
    assert!(!std::path::Path::new(&format!("/dev/shm/{name}")).exists());
}

/// Memory a program labels (weights, KV cache) appears in every chip's slot within a few
/// refresh periods, labels add up, and a dropped label is taken off again.
#[test]
fn labelled_memory_is_published_per_chip() {
    use ttmesh::MemoryRole;
    let mesh = MeshDevice::open(MeshConfig {
        topology: "n300".into(),
        ..Default::default()
    })
    .unwrap();
    let name = mesh.monitor_segment().expect("publishing is on");
    let wait_for = |want: (u64, u64)| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let snap = read_segment(&name).unwrap();
            if snap
                .chips
                .iter()
                .all(|c| (c.weights_bytes, c.kv_cache_bytes) == want)
            {
                return;
            }
            assert!(Instant::now() < deadline, "labels never reached {want:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for((0, 0));
    let weights = mesh.label_memory(MemoryRole::Weights, 3 << 20);
    let more = mesh.label_memory(MemoryRole::Weights, 1 << 20);
    let cache = mesh.label_memory(MemoryRole::KvCache, 5 << 10);
    assert_eq!(mesh.labelled_bytes(MemoryRole::Weights), 4 << 20);
    wait_for((4 << 20, 5 << 10));
    drop(more);
    wait_for((3 << 20, 5 << 10));
    drop((weights, cache));
    wait_for((0, 0));
}
