//! Fabric configs as the mesh opens them: what each topology refuses (naming what would
//! work) and what it carries.

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
