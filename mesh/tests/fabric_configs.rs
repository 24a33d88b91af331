//! Fabric configs as the mesh opens them: what each topology refuses (naming what would
//! work) and what it carries.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

fn open_err(topology: &str, fabric: FabricConfig) -> String {
    match MeshDevice::open(MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        ..Default::default()
    }) {
        Ok(_) => panic!("{topology} opened with {fabric}; it should be refused"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn configs_the_topology_cannot_carry_are_refused_when_the_mesh_opens() {
    use FabricConfig::*;
    // The Galaxy has no wrap links: every torus is refused, 2D and the 1D configs fit.
    for torus in [Fabric2DTorusX, Fabric2DTorusY, Fabric2DTorusXY] {
        let e = open_err("galaxy", torus);
        assert!(
            e.contains(&format!("fabric config {torus} cannot run on this topology"))
                && e.contains("has no wrap link")
                && e.contains("use one of DISABLED, FABRIC_1D_NEIGHBOR_EXCHANGE, FABRIC_1D, FABRIC_1D_RING, FABRIC_2D"),
            "{e}"
        );
    }
    // Two chips are a line: no 2D, no ring.
    for c in [Fabric2D, Fabric2DTorusXY] {
        let e = open_err("n300", c);
        assert!(
            e.contains("2D routing needs at least 2 rows and 2 columns"),
            "{e}"
        );
    }
    let e = open_err("line-5", Fabric1DRing);
    assert!(
        e.contains("no line of this topology closes into a ring"),
        "{e}"
    );
    let e = open_err("n300", Fabric1DRing);
    assert!(
        e.contains("no line of this topology closes into a ring")
            && e.ends_with("use one of DISABLED, FABRIC_1D_NEIGHBOR_EXCHANGE, FABRIC_1D"),
        "{e}"
    );
    // A Galaxy opened as one row of 32 is a line for 2D purposes.
    let e = match MeshDevice::open(MeshConfig {
        topology: "galaxy".into(),
        mesh_shape: Some(MeshShape::new(1, 32)),
        fabric_config: Fabric2D,
        ..Default::default()
    }) {
        Ok(_) => panic!("a 1x32 mesh opened with FABRIC_2D"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("the mesh is 1x32"), "{e}");
}

/// One step from `a` toward `b` on a line of `n` chips (a ring if `wrap`: the shorter way
/// round, ties toward higher indices).
fn toward(n: usize, a: usize, b: usize, wrap: bool) -> usize {
    let up = if wrap {
        let f = (b + n - a) % n;
        f <= n - f
    } else {
        b > a
    };
    if up {
        (a + 1) % n
    } else {
        (a + n - 1) % n
    }
}

/// Opens `topology` with `config`: a fabric write from every chip to every other lands in
/// the destination chip's memory, after a route along the source's column to the
/// destination's row, then along that row (mesh coordinates; wrapping where `wraps` says).
fn every_pair_writes(topology: &str, config: FabricConfig, (wrap_x, wrap_y): (bool, bool)) {
    use std::time::Duration;
    use ttmesh_fabric::NocAddr;
    let mesh = MeshDevice::open(MeshConfig {
        topology: topology.into(),
        fabric_config: config,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{topology} with {config}: {e}"));
    let f = mesh.fabric().expect("a 2D mesh has a fabric").clone();
    assert_eq!(f.config(), config);
    let (rows, cols) = (mesh.shape().rows, mesh.shape().cols);
    let id = |r: usize, c: usize| mesh.chips()[r * cols + c].id();
    let at = NocAddr::dram(1, 4096);
    for s in 0..rows * cols {
        for d in (0..rows * cols).filter(|&d| d != s) {
            let ((r1, c1), (r2, c2)) = ((s / cols, s % cols), (d / cols, d % cols));
            let mut want = vec![id(r1, c1)];
            let mut r = r1;
            while r != r2 {
                r = toward(rows, r, r2, wrap_y);
                want.push(id(r, c1));
            }
            let mut c = c1;
            while c != c2 {
                c = toward(cols, c, c2, wrap_x);
                want.push(id(r2, c));
            }
            let (src, dst) = (id(r1, c1), id(r2, c2));
            assert_eq!(
                f.route_chips(src, dst).unwrap(),
                want,
                "{topology} {config}"
            );
            let data: Vec<u8> = (0..6000u32)
                .map(|i| (i * 13 + src * 7 + dst) as u8)
                .collect();
            let tx = f.sender(src).unwrap();
            tx.write_and_inc(dst, at, &data, 5, 1).unwrap();
            tx.flush().unwrap();
            f.wait_semaphore(dst, 5, 1, Duration::from_secs(20))
                .unwrap();
            let mut got = vec![0u8; data.len()];
            f.read_local(dst, at, &mut got).unwrap();
            assert_eq!(got, data, "{topology} {config}: chip {src} -> chip {dst}");
        }
    }
    mesh.close().unwrap();
}

/// A Galaxy (4x8) and a T3K (2x4) open with FABRIC_2D, end to end.
#[test]
fn fabric_2d_writes_between_any_two_chips_of_a_galaxy_and_a_t3k() {
    every_pair_writes("galaxy", FabricConfig::Fabric2D, (false, false));
    every_pair_writes("t3k", FabricConfig::Fabric2D, (false, false));
}

/// A generated 4x8 torus (wrap links on every row and column) carries every torus config;
/// each wraps only its own axis. A 4x8 mesh without wrap links refuses them.
#[test]
fn fabric_2d_torus_configs_on_a_generated_torus() {
    use FabricConfig::*;
    every_pair_writes("torus-4x8", Fabric2DTorusXY, (true, true));
    every_pair_writes("torus-4x8", Fabric2DTorusX, (true, false));
    every_pair_writes("torus-4x8", Fabric2DTorusY, (false, true));
    every_pair_writes("mesh-4x8", Fabric2D, (false, false));
    let e = open_err("mesh-4x8", Fabric2DTorusY);
    assert!(
        e.contains("column 0 has no wrap link from chip 24 back to chip 0"),
        "{e}"
    );
}

/// The 1D collectives along either axis of a Galaxy opened with FABRIC_2D: each row or column
/// is a line of the 2D fabric (its neighbours one hop apart), so they run unchanged and match
/// the host reference bit for bit.
#[test]
fn collectives_along_either_axis_run_on_a_2d_fabric() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "galaxy".into(),
        fabric_config: FabricConfig::Fabric2D,
        ..Default::default()
    })
    .unwrap();
    let shape = [1, 1, 32, 256];
    let dtype = DataType::Float32;
    let parts: Vec<HostTensor> = (0..mesh.num_devices())
        .map(|i| exact(&shape, dtype, 100 + i as u64))
        .collect();
    let data: Vec<Vec<f32>> = parts.iter().map(|p| p.to_f32_vec()).collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    for axis in [0usize, 1] {
        let args = CclArgs {
            cluster_axis: Some(axis),
            ..Default::default()
        };
        for op in [Op::AllGather, Op::ReduceScatter, Op::AllReduce] {
            let y = match op {
                Op::AllGather => ccl::all_gather(&x, 3, &args),
                Op::ReduceScatter => ccl::reduce_scatter(&x, 3, &args),
                Op::AllReduce => ccl::all_reduce(&x, &args),
            }
            .unwrap_or_else(|e| panic!("{op:?} on axis {axis}: {e}"));
            mesh.synchronize_device().unwrap();
            let want = reference(&mesh, op, Some(axis), None, &shape, 3, dtype, &data);
            for (i, got) in shards_f32(&y).iter().enumerate() {
                assert_bits_eq(&format!("{op:?} axis {axis} chip {i}"), got, &want[i]);
            }
        }
    }
    mesh.close().unwrap();
}

/// A test descriptor of tt-metal's mesh graph descriptor format (MGD 2.0 textproto).
fn mgd(name: &str) -> String {
    format!(
        "{}/../topologies/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `MeshConfig::described` opens a mesh graph descriptor with the fabric its `dim_types`
/// imply; a TOML descriptor keeps FABRIC_1D.
#[test]
fn a_mesh_graph_descriptor_opens_with_the_fabric_its_dim_types_imply() {
    use FabricConfig::*;
    for (file, want, shape) in [
        ("t3k.textproto", Fabric2D, (4, 2)),
        ("galaxy.textproto", Fabric2D, (8, 4)),
        ("galaxy_torus_xy.textproto", Fabric2DTorusXY, (8, 4)),
        ("n300.textproto", Fabric1D, (1, 2)),
        ("two_meshes_one_picked.textproto", Fabric1DRing, (1, 6)),
    ] {
        let cfg = MeshConfig::described(&mgd(file)).unwrap();
        assert_eq!(cfg.fabric_config, want, "{file}");
        let mesh = MeshDevice::open(cfg).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!((mesh.shape().rows, mesh.shape().cols), shape, "{file}");
        assert_eq!(mesh.fabric().unwrap().config(), want, "{file}");
        mesh.close().unwrap();
    }
    assert_eq!(
        MeshConfig::described("galaxy").unwrap().fabric_config,
        Fabric1D
    );
    // One RING dim: the torus on that axis only (dim_types are [rows, cols]).
    for (kinds, want) in [
        ("RING, LINE", Fabric2DTorusY),
        ("LINE, RING", Fabric2DTorusX),
    ] {
        let text = format!(
            "mesh_descriptors {{ name: \"M\" arch: WORMHOLE_B0 \
             device_topology {{ dims: [ 4, 4 ] dim_types: [ {kinds} ] }} \
             host_topology {{ dims: [ 1, 1 ] }} channels {{ count: 1 }} }} \
             top_level_instance {{ mesh {{ mesh_descriptor: \"M\" }} }}"
        );
        let g = ttmesh_topologies::parse_mgd_str(&text, "x.textproto").unwrap();
        assert_eq!(implied_fabric_config(&g), Some(want), "{kinds}");
    }
    assert_eq!(
        implied_fabric_config(&ttmesh_topologies::load("galaxy").unwrap()),
        None
    );
}

/// Every pair of a Galaxy's 32 chips, wired as a torus by its mesh graph descriptor, routes
/// by the rule (column first, the shorter way round) and its bytes arrive.
#[test]
fn every_pair_of_a_torus_galaxy_from_its_descriptor_routes_and_arrives() {
    every_pair_writes(
        &mgd("galaxy_torus_xy.textproto"),
        FabricConfig::Fabric2DTorusXY,
        (true, true),
    );
}
