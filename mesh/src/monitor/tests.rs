//! A mesh's chips published as one rank's part of a split mesh, without MPI: the same chips,
//! listeners and fabric, filtered to what the rank holds.

use ttmesh_chip::allocator::{AllocationRequest, Placement};
use ttmesh_chip::BufferType;
use ttmesh_monitor::{read_segment, ProcessInfo};

use super::MeshMonitor;
use crate::{MeshConfig, MeshDevice};

/// A T3K (2x4) as rank 1 of 2 holding its second row: the segment holds those 4 chips under
/// their ids and coordinates in the whole mesh, each labelled rank 1, sees an allocation on
/// one of them at once, and holds exactly the link directions those chips send on.
#[test]
fn one_rank_publishes_the_chips_it_holds_under_their_global_ids() {
    let mesh = MeshDevice::open(MeshConfig::default()).unwrap();
    let chips = mesh.chips().to_vec();
    let second_row: Vec<u32> = chips[4..].iter().map(|c| c.id()).collect();
    let info = ProcessInfo::for_current_process("t3k", (2, 4), "wormhole_b0", "FABRIC_1D")
        .for_rank(1, 2, "unit-test-mesh");
    let labels = std::sync::Arc::default();
    let part = MeshMonitor::start(&info, &chips, 4, mesh.fabric(), &labels, |id| {
        second_row.contains(&id)
    })
    .expect("publishing is on in tests");
    let name = part.segment().unwrap().to_string();
    assert!(
        name.starts_with(&format!("ttmesh-{}-r1", std::process::id())),
        "{name}"
    );

    let s = read_segment(&name).unwrap();
    assert_eq!((s.info.rank, s.info.ranks), (1, 2));
    assert_eq!(s.info.mesh_id, "unit-test-mesh");
    let got: Vec<(u32, u32, (u32, u32))> =
        s.chips.iter().map(|c| (c.id, c.rank, c.coord)).collect();
    let want: Vec<(u32, u32, (u32, u32))> = (4..8)
        .map(|i| (chips[i].id(), 1, (1, i as u32 - 4)))
        .collect();
    assert_eq!(got, want);

    // Every direction whose sender is one of the rank's chips, and no other.
    let sent: Vec<(u32, u32)> = mesh
        .fabric()
        .unwrap()
        .link_stats()
        .iter()
        .filter(|l| second_row.contains(&l.from_chip))
        .map(|l| (l.from_chip, l.to_chip))
        .collect();
    let published: Vec<(u32, u32)> = s.links.iter().map(|l| (l.a_chip, l.b_chip)).collect();
    assert!(!published.is_empty());
    assert_eq!(published, sent);
    assert!(
        published.iter().any(|(_, to)| !second_row.contains(to)),
        "a link to the other rank's row"
    );

    // The listener publishes an allocation on a held chip at once.
    let before = s.chips[1].dram.allocated;
    let req = AllocationRequest {
        buffer_type: BufferType::Dram,
        page_size: 2048,
        num_pages: 12,
        placement: Placement::Interleaved,
    };
    let a = chips[5].allocate(&req).unwrap();
    let after = read_segment(&name).unwrap().chips[1];
    assert_eq!(after.id, chips[5].id());
    assert_eq!(after.dram.allocated - before, 12 * 2048);
    chips[5].deallocate(&a).unwrap();
    drop(part);
    assert!(read_segment(&name).is_err());
    mesh.close().unwrap();
}
