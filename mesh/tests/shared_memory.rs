//! Equal chunks stored once on the host: a replicated tensor on 32 chips costs about one
//! host copy, a later write on one chip changes only that chip, and a trace replayed over
//! shared pages gives the same bits as before and as unshared memory would.

mod common;

use common::*;
use ttmesh::*;

fn host_bytes(mesh: &MeshDevice) -> u64 {
    mesh.reports().iter().map(|r| r.host_bytes).sum()
}

fn dram_allocated(mesh: &MeshDevice) -> Vec<u64> {
    mesh.reports().iter().map(|r| r.dram_allocated).collect()
}

fn replicate(mesh: &MeshDevice, host: &HostTensor) -> MeshTensor {
    MeshTensor::from_host(
        host,
        mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap()
}

#[test]
fn a_replicated_tensor_on_32_chips_is_one_host_copy_and_a_write_on_one_chip_stays_there() {
    let mesh = open("galaxy", FabricConfig::Disabled);
    let bytes = 4 << 20;
    let host = random(&[1, 1, 1024, 1024], DataType::Float32, 7);
    let (before, allocated) = (host_bytes(&mesh), dram_allocated(&mesh));
    let t = replicate(&mesh, &host);
    wait_until_idle(&mesh);
    let added = host_bytes(&mesh) - before;
    // One copy, plus at most the partly filled chunk at each end of every bank's run.
    let slack = 2 * 12 * (64 << 10);
    assert!(
        added <= bytes + slack,
        "a {bytes} B tensor on 32 chips added {added} B of host memory"
    );
    // The devices' own figures are those of 32 copies.
    let per_chip = dram_allocated(&mesh)
        .iter()
        .zip(&allocated)
        .map(|(a, b)| a - b)
        .collect::<Vec<_>>();
    assert!(per_chip.iter().all(|&d| d == per_chip[0] && d >= bytes));

    let other = random(&[1, 1, 1024, 1024], DataType::Float32, 8);
    t.shards()[5].copy_from_host(&other, CqId(0)).unwrap();
    let got = shards_f32(&t);
    for (i, g) in got.iter().enumerate() {
        let want = if i == 5 { &other } else { &host };
        assert_bits_eq(&format!("chip index {i}"), g, &want.to_f32_vec());
    }
    mesh.close().unwrap();
}

#[test]
fn equal_parts_of_a_per_chip_write_are_shared_too() {
    let mesh = open("t3k", FabricConfig::Disabled);
    let host = random(&[1, 1, 512, 1024], DataType::Float32, 9);
    let before = host_bytes(&mesh);
    let t = per_chip(&mesh, &vec![host.clone(); 8], Layout::Tile);
    wait_until_idle(&mesh);
    assert!(host_bytes(&mesh) - before <= (2 << 20) + 2 * 12 * (64 << 10));
    assert!(shards_f32(&t)
        .iter()
        .all(|g| bits(g) == bits(&host.to_f32_vec())));
    mesh.close().unwrap();
}

#[test]
fn a_trace_replayed_over_shared_pages_gives_the_same_bits() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 1 << 20,
        ..Default::default()
    });
    let w_host = random(&[1, 1, 256, 256], DataType::Float32, 11);
    let x_host = random(&[1, 1, 32, 256], DataType::Float32, 12);
    let w = replicate(&mesh, &w_host);
    let x = replicate(&mesh, &x_host);
    let cfg = ops::MeshMatmulConfig::default();
    let untraced = shards_f32(&ops::matmul(&x, &w, &cfg).unwrap());
    assert!(untraced.iter().all(|o| bits(o) == bits(&untraced[0])));

    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let out = ops::matmul(&x, &w, &cfg).unwrap();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();
    let replay = || {
        mesh.execute_trace(tid, CqId(0), Blocking::Yes).unwrap();
        shards_f32(&out)
    };
    assert_eq!(replay(), untraced);
    // Chip 3's weight written apart from the others: only its output moves, and writing the
    // shared bytes back gives every chip the first bits again.
    let w2 = random(&[1, 1, 256, 256], DataType::Float32, 13);
    w.shards()[3].copy_from_host(&w2, CqId(0)).unwrap();
    let moved = replay();
    for (i, o) in moved.iter().enumerate() {
        assert_eq!(bits(o) == bits(&untraced[i]), i != 3, "chip index {i}");
    }
    w.shards()[3].copy_from_host(&w_host, CqId(0)).unwrap();
    assert_eq!(replay(), untraced);
    mesh.close().unwrap();
}
