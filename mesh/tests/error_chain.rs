//! Errors keep their type across crates: a link going down under an all_reduce reaches the
//! user as a typed error whose `source()` chain leads, through the chip's kernel error, to the
//! fabric's `LinkDown` naming the link.

mod common;

use std::error::Error;
use std::time::Duration;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;
use ttmesh_chip::ChipError;
use ttmesh_fabric::{FabricError, Fault};

/// The link a chain of sources ends on, if one of its errors is the fabric's `LinkDown`.
fn down_link(e: &(dyn Error + 'static)) -> Option<String> {
    let mut at = Some(e);
    while let Some(e) = at {
        // An aborted fabric's cause is boxed (the error is recursive), so it may appear as one.
        let fabric = e
            .downcast_ref::<FabricError>()
            .or_else(|| e.downcast_ref::<Box<FabricError>>().map(|b| &**b));
        if let Some(FabricError::LinkDown { link, .. }) = fabric {
            return Some(link.clone());
        }
        at = e.source();
    }
    None
}

#[test]
fn link_down_during_all_reduce_is_a_typed_error_chain_down_to_the_link() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Fabric1D,
        operation_timeout: Some(Duration::from_secs(2)),
        ..Default::default()
    });
    let parts: Vec<HostTensor> = (0..mesh.num_devices())
        .map(|i| exact(&[1, 1, 32, 256], DataType::Float32, i as u64))
        .collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let _ = ccl::all_reduce(&x, &CclArgs::default()).unwrap();
    mesh.synchronize_device().unwrap();
    let fabric = mesh.fabric().unwrap().clone();
    let mut name = None;
    for (i, l) in fabric.spec().links.iter().enumerate() {
        if l.joins(6, 7) {
            fabric.inject(i, Fault::Down).unwrap();
            name.get_or_insert(l.to_string());
        }
    }
    let name = name.unwrap();
    // The first failing chip stops the fabric at once, so the all_reduce may already be refused
    // when it is issued; otherwise the error comes at synchronize.
    let mut chains: Vec<Box<dyn Error>> = Vec::new();
    if let Err(e) = ccl::all_reduce(&x, &CclArgs::default()) {
        chains.push(Box::new(e));
    }
    // Every chip's own errors (the mesh's synchronize returns only the first chip's); a
    // second round, once every queue is idle, takes the kernel errors of chips whose finish
    // timed out first.
    for round in 0..2 {
        if round == 1 {
            wait_until_idle(&mesh);
        }
        for c in mesh.chips() {
            if let Err(e) = c.synchronize() {
                chains.push(Box::new(e));
            }
        }
    }
    let found: Vec<&Box<dyn Error>> = chains
        .iter()
        .filter(|e| down_link(e.as_ref()).as_deref() == Some(name.as_str()))
        .collect();
    assert!(
        !found.is_empty(),
        "no error's source chain reaches LinkDown on {name}: {:?}",
        chains.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    );
    // The step above the link is the chip's kernel error, matched by its type, in every chain
    // that comes from a chip's queue (the all_reduce call's own refusal has no kernel above).
    let mut kernels = 0;
    for e in found {
        let mut at: Option<&(dyn Error + 'static)> = Some(e.as_ref());
        let mut kernel = None;
        while let Some(e) = at {
            if let Some(ChipError::KernelFault { kernel: k, .. }) = e.downcast_ref::<ChipError>() {
                kernel = Some(k.clone());
            }
            at = e.source();
        }
        let Some(kernel) = kernel else { continue };
        kernels += 1;
        assert!(
            // bf16/f32 all_reduce is one kernel; other formats run its two halves.
            ["AllReduce", "ReduceScatter", "AllGather"].contains(&kernel.as_str()),
            "{kernel}"
        );
    }
    assert!(
        kernels > 0,
        "no chip kernel error above the fabric's LinkDown"
    );
    // close reports the fault still pending on the fabric (and frees the mesh either way).
    if let Err(e) = mesh.close() {
        assert_eq!(down_link(&e).as_deref(), Some(name.as_str()), "{e}");
    }
}
