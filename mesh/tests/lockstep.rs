//! The lockstep rule has one owner and one message: when the chips' allocations diverge, the
//! error names the chip that differs and both addresses.

mod common;

use common::*;
use ttmesh::*;

#[test]
fn diverged_allocation_names_the_chip_and_both_addresses() {
    let mesh = open("t3k", FabricConfig::Fabric1D);
    let spec = TensorSpec::new(
        vec![1, 1, 32, 64],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
    );
    // One chip allocates behind the mesh's back: its next buffer lands elsewhere.
    let stray = ttmesh_chip::tensor::Tensor::allocate(&mesh.chips()[3], spec.clone()).unwrap();
    let e = MeshTensor::allocate(&mesh, &spec).unwrap_err().to_string();
    let at = |chip: usize| {
        let t = ttmesh_chip::tensor::Tensor::allocate(&mesh.chips()[chip], spec.clone()).unwrap();
        let a = t.buffer_address().unwrap();
        drop(t);
        a
    };
    // The failed allocation freed its buffers: the next ones land where it tried.
    let (a0, a3) = (at(0), at(3));
    assert_ne!(a0, a3);
    let chip3 = mesh.chips()[3].id();
    let chip0 = mesh.chips()[0].id();
    assert!(
        e.contains(&format!(
            "chip {chip3} has {a3:#x} where chip {chip0} has {a0:#x}"
        )),
        "{e}"
    );
    drop(stray);
    mesh.close().unwrap();
}
