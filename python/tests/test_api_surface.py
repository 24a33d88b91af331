"""The rest of the public surface, each name used once with TT-NN's keywords: constants,
enums, config objects, device helpers and the creation calls not covered elsewhere."""

import numpy as np
from conftest import to_np

import ttmesh.ttnn as ttnn


def test_constants_and_enums():
    assert ttnn.DEFAULT_L1_SMALL_SIZE == 0 and ttnn.DEFAULT_TRACE_REGION_SIZE == 0 and ttnn.DEFAULT_WORKER_L1_SIZE == 0
    assert ttnn.DefaultQueueId == 0 and ttnn.TILE_SIZE == 32
    assert ttnn.Layout.TILE == ttnn.TILE_LAYOUT and int(ttnn.Layout.ROW_MAJOR) == 0
    assert int(ttnn.FabricConfig.FABRIC_1D) == 2 and int(ttnn.FabricConfig.FABRIC_1D_RING) == 3
    assert int(ttnn.BufferType.TRACE) == 4
    assert isinstance(ttnn.ShardTensorToMesh(None, 0), ttnn.TensorToMesh)
    assert isinstance(ttnn.ConcatMeshToTensor(None, 0), ttnn.MeshToTensor)
    assert ttnn.GetNumAvailableDevices() == ttnn.get_num_devices() == ttnn.GetNumPCIeDevices() == ttnn.get_num_pcie_devices()
    assert ttnn.get_fabric_config() == ttnn.FabricConfig.DISABLED


def test_core_ranges_and_shard_spec():
    r = ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(3, 1))
    assert r.num_cores() == 8
    s = ttnn.CoreRangeSet({r})
    spec = ttnn.ShardSpec(s, [32, 64], ttnn.ShardOrientation.ROW_MAJOR)
    mc = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, spec)
    assert mc.is_sharded() and mc.shard_spec.num_cores() == 8
    by_shape = ttnn.create_sharded_memory_config([32, 64], s, ttnn.ShardStrategy.HEIGHT, use_height_and_width_as_shard_shape=True)
    assert by_shape.shard_spec.shape == [32, 64]


def test_config_objects_are_accepted():
    for cls in (
        ttnn.BlackholeComputeKernelConfig,
        ttnn.GrayskullComputeKernelConfig,
        ttnn.LayerNormDefaultProgramConfig,
        ttnn.LayerNormShardedMultiCoreProgramConfig,
        ttnn.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig,
        ttnn.MatmulMultiCoreReuseMultiCastProgramConfig,
        ttnn.MatmulMultiCoreReuseProgramConfig,
        ttnn.SDPAProgramConfig,
        ttnn.SoftmaxDefaultProgramConfig,
        ttnn.SoftmaxShardedMultiCoreProgramConfig,
    ):
        assert "x=1" in repr(cls(x=1))
    cfg = ttnn.init_device_compute_kernel_config(None, math_fidelity=ttnn.MathFidelity.HiFi2, fp32_dest_acc_en=True)
    assert cfg.math_fidelity == "HiFi2"
    dc = ttnn.DispatchCoreConfig(ttnn.DispatchCoreType.ETH, ttnn.DispatchCoreAxis.ROW)
    assert dc.args == ("ETH", "ROW")
    ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED, ttnn.FabricReliabilityMode.STRICT_SYSTEM_HEALTH_SETUP_MODE)


def test_device_helpers(tmp_path):
    with ttnn.manage_device(device_id=0) as device:
        ttnn.SetDefaultDevice(device)
        assert ttnn.GetDefaultDevice() is device
        ttnn.enable_program_cache(device)
        ttnn.disable_and_clear_program_cache(device)
        ttnn.ReadDeviceProfiler(device)
        ttnn.DumpDeviceProfiler(device)
        files = ttnn.dump_device_memory_state(device, prefix=str(tmp_path) + "/")
        assert any(f.endswith(".csv") for f in files)
        t = ttnn.rand((1, 1, 32, 32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
        v = to_np(t)
        assert v.shape == (1, 1, 32, 32) and (0 <= v).all() and (v < 1).all()
        np.testing.assert_array_equal(to_np(ttnn.zeros_like(t)), np.zeros_like(v))
        np.testing.assert_array_equal(to_np(ttnn.full_like(t, 2.0)), np.full_like(v, 2.0))
        e = ttnn.empty_like(t)
        assert e.shape == t.shape and e.dtype == t.dtype
        ev = ttnn.create_event(device)
        assert isinstance(ev, ttnn.MeshEvent)
        ttnn.SetDefaultDevice(None)
    assert not device.is_open
