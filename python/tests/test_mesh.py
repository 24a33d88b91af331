"""Meshes: mappers and composers (old and new names), collectives with cluster_axis,
num_links and topology, two meshes at once, tensors of another mesh."""

import numpy as np
import pytest

from conftest import to_np

import ttmesh.ttnn as ttnn


@pytest.fixture
def mesh():
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    m = ttnn.open_mesh_device(ttnn.MeshShape(2, 4), l1_small_size=0, trace_region_size=0, num_command_queues=1)
    yield m
    ttnn.close_mesh_device(m)
    ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def put(mesh, x, mapper=None):
    return ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=mesh, mesh_mapper=mapper)


def test_mesh_device_calls(mesh):
    assert mesh.get_num_devices() == 8
    assert mesh.shape == ttnn.MeshShape(2, 4) and tuple(mesh.shape) == (2, 4)
    assert sorted(mesh.get_device_ids()) == list(range(8))
    grid = ttnn.compute_with_storage_grid_size(mesh)
    assert (grid.x, grid.y) == (8, 8)
    assert ttnn.get_max_worker_l1_unreserved_size(mesh) > 0
    stats = mesh.allocator().get_statistics(ttnn.BufferType.DRAM)
    assert stats.total_allocated_bytes == 0 and stats.total_free_bytes == stats.total_allocatable_size_bytes
    view = ttnn.get_memory_view(mesh, ttnn.BufferType.L1)
    assert view["num_banks"] == 64 and view["block_table"]
    ttnn.synchronize_device(mesh)


def test_mappers_old_and_new(mesh, rng):
    x = rng.standard_normal((1, 1, 64, 256), dtype=np.float32)
    cases = [
        (ttnn.ShardTensorToMesh(mesh, dim=3), ttnn.ConcatMeshToTensor(mesh, dim=3), [1, 1, 64, 32]),
        (ttnn.shard_tensor_to_mesh_mapper(mesh, -1), ttnn.concat_mesh_to_tensor_composer(mesh, -1), [1, 1, 64, 32]),
        (ttnn.ShardTensor2dMesh(mesh, dims=(2, 3), mesh_shape=(2, 4)), ttnn.ConcatMesh2dToTensor(mesh, dims=(2, 3), mesh_shape=(2, 4)), [1, 1, 32, 64]),
        (
            ttnn.create_mesh_mapper(mesh, ttnn.MeshMapperConfig([ttnn.PlacementShard(2), ttnn.PlacementShard(3)])),
            ttnn.create_mesh_composer(mesh, ttnn.MeshComposerConfig([2, 3])),
            [1, 1, 32, 64],
        ),
    ]
    for mapper, composer, per_device in cases:
        t = put(mesh, x, mapper)
        assert list(t.shape) == per_device
        np.testing.assert_array_equal(to_np(t, mesh_composer=composer), x)
    rep = put(mesh, x, ttnn.ReplicateTensorToMesh(mesh))
    for part in ttnn.get_device_tensors(rep):
        np.testing.assert_array_equal(to_np(part), x)
    rep2 = put(mesh, x, ttnn.replicate_tensor_to_mesh_mapper(mesh))
    np.testing.assert_array_equal(to_np(ttnn.get_device_tensors(rep2)[7]), x)
    half = put(mesh, x, ttnn.create_mesh_mapper(mesh, ttnn.MeshMapperConfig([ttnn.PlacementReplicate(), ttnn.PlacementShard(3)])))
    np.testing.assert_array_equal(to_np(ttnn.get_device_tensors(half)[5]), x[..., 64:128])
    # A host tensor split for the mesh, then moved.
    host = ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=3))
    np.testing.assert_array_equal(to_np(host, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=3)), x)
    on = ttnn.to_device(host, mesh)
    np.testing.assert_array_equal(to_np(on, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=3)), x)
    with ttnn.distribute(ttnn.ShardTensorToMesh(mesh, dim=2)):
        t = put(mesh, x)
    with ttnn.distribute(ttnn.ConcatMeshToTensor(mesh, dim=2)):
        np.testing.assert_array_equal(to_np(t), x)


def test_mapper_errors(mesh, rng):
    x = rng.standard_normal((1, 1, 32, 100), dtype=np.float32)
    with pytest.raises(ValueError, match="does not split evenly over 8"):
        put(mesh, x, ttnn.ShardTensorToMesh(mesh, dim=3))
    with pytest.raises(ValueError, match="out of range"):
        put(mesh, x, ttnn.ShardTensorToMesh(mesh, dim=7))
    with pytest.raises(ValueError, match="mesh_composer"):
        to_np(put(mesh, x[..., :64]))
    with pytest.raises(TypeError, match="mesh_mapper must be"):
        put(mesh, x, mapper=3)


def test_collectives(mesh, rng):
    x = rng.standard_normal((1, 1, 32, 256), dtype=np.float32)
    t = put(mesh, x, ttnn.ShardTensorToMesh(mesh, dim=3))
    parts = x.reshape(1, 1, 32, 8, 32).transpose(3, 0, 1, 2, 4)  # device i's part
    g = ttnn.all_gather(t, dim=3, num_links=1, topology=ttnn.Topology.Linear)
    for part in ttnn.get_device_tensors(g):
        np.testing.assert_array_equal(to_np(part), x)
    r = ttnn.all_reduce(t)
    np.testing.assert_allclose(to_np(ttnn.get_device_tensors(r)[3]), parts.sum(0), rtol=1e-5, atol=1e-5)
    # Along rows (cluster_axis=1): each row of 4 sums its own parts.
    r1 = ttnn.all_reduce(t, cluster_axis=1, num_links=1, topology=ttnn.Topology.Linear, memory_config=ttnn.L1_MEMORY_CONFIG)
    assert r1.memory_config().buffer_type == ttnn.BufferType.L1
    np.testing.assert_allclose(to_np(ttnn.get_device_tensors(r1)[6]), parts[4:].sum(0), rtol=1e-5, atol=1e-5)
    # Along columns (cluster_axis=0): devices i and i+4.
    r0 = ttnn.all_reduce(t, cluster_axis=0)
    np.testing.assert_allclose(to_np(ttnn.get_device_tensors(r0)[1]), parts[1] + parts[5], rtol=1e-6)
    full = put(mesh, x)
    rs = ttnn.reduce_scatter(full, dim=3)
    np.testing.assert_allclose(to_np(rs, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=3)), 8 * x, rtol=1e-5)
    ga = ttnn.all_gather(t, dim=3, cluster_axis=1)
    np.testing.assert_array_equal(to_np(ttnn.get_device_tensors(ga)[0]), x[..., :128])
    with pytest.raises(ValueError, match="cluster_axis"):
        ttnn.all_reduce(t, cluster_axis=2)


def test_collective_without_fabric_says_how(rng):
    ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
    m = ttnn.open_mesh_device(ttnn.MeshShape(1, 2))
    try:
        t = put(m, rng.standard_normal((1, 1, 32, 64), dtype=np.float32), ttnn.ShardTensorToMesh(m, dim=3))
        with pytest.raises(RuntimeError, match="set_fabric_config"):
            ttnn.all_reduce(t)
    finally:
        ttnn.close_mesh_device(m)


def test_two_meshes_at_once_each_right(rng):
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    a = ttnn.open_mesh_device(ttnn.MeshShape(1, 4))
    b = ttnn.open_mesh_device(ttnn.MeshShape(2, 4), trace_region_size=65536)
    try:
        x = rng.standard_normal((1, 1, 32, 128), dtype=np.float32)
        y = rng.standard_normal((1, 1, 32, 256), dtype=np.float32)
        ta = put(a, x, ttnn.ShardTensorToMesh(a, dim=3))
        tb = put(b, y, ttnn.ShardTensorToMesh(b, dim=3))
        ra, rb = ttnn.all_reduce(ta), ttnn.all_reduce(tb)
        np.testing.assert_allclose(to_np(ttnn.get_device_tensors(ra)[0]), x.reshape(1, 1, 32, 4, 32).sum(3), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(to_np(ttnn.get_device_tensors(rb)[0]), y.reshape(1, 1, 32, 8, 32).sum(3), rtol=1e-5, atol=1e-5)
        assert a.allocator().get_config().trace_region_size == 0
        assert b.allocator().get_config().trace_region_size == 65536
        with pytest.raises(ValueError, match="input_tensor_b is on mesh #.*but input_tensor_a is on mesh"):
            ttnn.add(ta, put(b, x[..., :32]))
    finally:
        ttnn.close_mesh_device(a)
        ttnn.close_mesh_device(b)
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
