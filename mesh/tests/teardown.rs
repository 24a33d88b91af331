//! A closed and dropped mesh gives back every chip, the fabric and their memory, whatever ran
//! on it (collectives leave kernels in the program caches that must not keep the mesh alive).

mod common;

use std::sync::{Arc, Weak};

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

/// Resident set size of this process in bytes (Linux), or None elsewhere.
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Opens a galaxy, runs an all_reduce and an all_gather on its rows (odd rounds also replay a
/// traced all_reduce and fail an all_gather over a down link), closes it and drops
/// everything; returns weak references to what must now be gone. Every other pair of rounds
/// opens it with FABRIC_2D, whose routers serve rows and columns at once.
fn one_mesh(round: u64) -> (Vec<Weak<ttmesh_chip::Chip>>, Weak<ttmesh_fabric::Fabric>) {
    let mesh = open_with(MeshConfig {
        topology: "galaxy".into(),
        fabric_config: if round % 4 >= 2 {
            FabricConfig::Fabric2D
        } else {
            FabricConfig::Fabric1D
        },
        trace_region_size: 1 << 20,
        operation_timeout: Some(std::time::Duration::from_secs(3)),
        ..Default::default()
    });
    let parts: Vec<HostTensor> = (0..mesh.num_devices())
        .map(|i| exact(&[1, 1, 32, 256], DataType::BFloat16, round * 64 + i as u64))
        .collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let args = CclArgs {
        cluster_axis: Some(1),
        ..Default::default()
    };
    let y = ccl::all_reduce(&x, &args).unwrap();
    let g = ccl::all_gather(&x, 3, &args).unwrap();
    mesh.synchronize_device().unwrap();
    if round % 2 == 1 {
        let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
        let _traced = ccl::all_reduce(&x, &args).unwrap();
        mesh.end_trace_capture(tid, CqId(0)).unwrap();
        mesh.execute_trace(tid, CqId(0), true).unwrap();
        let fabric = mesh.fabric().unwrap();
        let row = &mesh.ccl_lines(Some(1)).unwrap()[0].0.chips;
        let link = (0..fabric.spec().links.len())
            .find(|&i| fabric.spec().links[i].joins(row[3], row[4]))
            .unwrap();
        fabric.inject(link, ttmesh_fabric::Fault::Down).unwrap();
        let _failed = ccl::all_gather(&x, 3, &args).unwrap();
        assert!(mesh.synchronize_device().is_err());
        if fabric.config().is_2d() {
            // A send that turns from column 0 into row 3, over a down link of row 3 (X).
            let (src, dst) = (mesh.chips()[0].id(), mesh.chips()[31].id());
            let route = fabric.route_chips(src, dst).unwrap();
            let (a, b) = (route[route.len() - 2], route[route.len() - 1]);
            let last = (0..fabric.spec().links.len())
                .filter(|&i| fabric.spec().links[i].joins(a, b))
                .collect::<Vec<_>>();
            for &l in &last {
                fabric.inject(l, ttmesh_fabric::Fault::Down).unwrap();
            }
            let tx = fabric.sender(src).unwrap();
            let at = ttmesh_fabric::NocAddr::dram(0, 1 << 20);
            let sent = tx
                .write_and_inc(dst, at, &[7u8; 4096], 9, 1)
                .and_then(|_| tx.flush());
            let e = sent.expect_err("a send over a down link fails");
            let said = e.to_string();
            assert!(
                said.contains("is down")
                    && said.contains(&format!("chip {a} port"))
                    && said.contains(&format!("chip {b} port")),
                "{said}"
            );
        }
    }
    let chips = mesh.chips().iter().map(Arc::downgrade).collect();
    let fabric = Arc::downgrade(mesh.fabric().unwrap());
    mesh.close().unwrap();
    drop((x, y, g, mesh));
    (chips, fabric)
}

#[test]
fn closed_meshes_free_every_chip_and_fabric() {
    let mut rss = Vec::new();
    for round in 0..20 {
        let (chips, fabric) = one_mesh(round);
        let alive = chips.iter().filter(|c| c.strong_count() > 0).count();
        assert_eq!(alive, 0, "round {round}: {alive} of 32 chips still alive");
        assert_eq!(
            fabric.strong_count(),
            0,
            "round {round}: the fabric is still alive"
        );
        rss.extend(rss_bytes());
    }
    if let (Some(first), Some(last)) = (rss.get(1), rss.last()) {
        let mb = |b: u64| b as f64 / 1e6;
        eprintln!(
            "RSS after mesh 2: {:.1} MB, after mesh 20: {:.1} MB",
            mb(*first),
            mb(*last)
        );
        // A leaked galaxy costs tens of MB each; allocator noise is far below 18 of them.
        assert!(
            *last < *first + 200_000_000,
            "RSS grew from {:.1} MB to {:.1} MB over 18 meshes",
            mb(*first),
            mb(*last)
        );
    }
}
