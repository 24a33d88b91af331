//! TT-NN's memory inspection calls on a mesh: the mesh answers for its identical chips, and
//! where one chip differs the mesh-wide view is the tightest chip's.

mod common;

use common::*;
use ttmesh::*;
use ttmesh_chip::allocator::{AllocationRequest, Placement};
use ttmesh_chip::ChipError;

#[test]
fn a_mesh_answers_for_its_chips() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        l1_small_size: 24_576,
        trace_region_size: 800_768,
        fabric_config: FabricConfig::Disabled,
        ..Default::default()
    });
    let t = MeshTensor::from_host(
        &exact(&[1, 1, 64, 64], DataType::BFloat16, 1),
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::L1,
        CqId(0),
    )
    .unwrap();
    for bt in [
        BufferType::Dram,
        BufferType::L1,
        BufferType::L1Small,
        BufferType::Trace,
    ] {
        let view = get_memory_view(&mesh, bt).unwrap();
        for (coord, v) in mesh.memory_views_per_chip(bt).unwrap() {
            assert_eq!(v, view, "{bt} on {coord:?}");
        }
        let chip = &mesh.chips()[0];
        assert_eq!(
            get_allocator_base_address(&mesh, bt).unwrap(),
            get_allocator_base_address(chip, bt).unwrap()
        );
        assert_eq!(
            get_region_base_address(&mesh, bt).unwrap(),
            get_region_base_address(chip, bt).unwrap()
        );
    }
    let l1 = get_memory_view(&mesh, BufferType::L1).unwrap();
    assert_eq!(
        (l1.num_banks, l1.total_bytes_per_bank),
        (64, 1_393_312 - 24_576)
    );
    // Four tiles over 64 banks: one 2048 B page in each bank that holds one, reserved in all.
    assert_eq!(l1.total_bytes_allocated_per_bank, 2048);
    assert_eq!(
        get_memory_view(&mesh, BufferType::Trace)
            .unwrap()
            .total_bytes_per_bank,
        73_728
    );
    assert_eq!(get_max_worker_l1_unreserved_size(&mesh), 1_463_968);
    assert_eq!(
        compute_with_storage_grid_size(&mesh),
        CoreCoord { x: 8, y: 8 }
    );
    assert_eq!(dram_grid_size(&mesh), CoreCoord { x: 12, y: 1 });

    // One chip allocates on its own: the mesh reports the tightest chip.
    let extra = mesh.chips()[5]
        .allocate(&AllocationRequest {
            buffer_type: BufferType::Dram,
            page_size: 2048,
            num_pages: 12 * 1000,
            placement: Placement::Interleaved,
        })
        .unwrap();
    let views = mesh.memory_views_per_chip(BufferType::Dram).unwrap();
    assert_ne!(views[5].1, views[0].1);
    assert_eq!(
        get_memory_view(&mesh, BufferType::Dram).unwrap(),
        views[5].1
    );
    mesh.chips()[5].deallocate(&extra).unwrap();
    assert_eq!(
        get_memory_view(&mesh, BufferType::Dram).unwrap(),
        views[0].1
    );

    // The report files of a mesh are those of its view.
    let dir = std::env::temp_dir().join(format!("ttmesh-mesh-inspect-{}", std::process::id()));
    let files = dump_device_memory_state(&mesh, &format!("{}/", dir.display())).unwrap();
    let summary = std::fs::read_to_string(&files[0]).unwrap();
    let l1_row = summary.lines().nth(2).unwrap();
    let s = mesh.chips()[0].statistics(BufferType::L1);
    assert_eq!(
        l1_row,
        format!(
            ",{},{},{},{}",
            s.total_allocatable_size_bytes,
            s.total_allocated_bytes,
            s.total_free_bytes,
            s.largest_free_block_bytes
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
    drop(t);

    let err = get_memory_view(&mesh, BufferType::SystemMemory).unwrap_err();
    assert!(
        matches!(
            err,
            MeshError::Chip {
                source: ChipError::NotDeviceMemory { .. },
                ..
            }
        ),
        "{err:?}"
    );
    mesh.close().unwrap();
}
