"""TT-NN's Python API on ttmesh: ``import ttmesh.ttnn as ttnn``.

Names, keyword names and defaults are TT-NN's; behaviour comes from the emulated mesh (the
``ttmesh`` Rust library). Errors that tt-metal raises are ``RuntimeError`` with tt-metal's text
and ttmesh's hint; bad arguments are ``TypeError`` / ``ValueError`` naming the argument.
"""

from ttmesh import _ttmesh as _n

from ._device import (  # noqa: F401
    DEFAULT_L1_SMALL_SIZE,
    DEFAULT_TRACE_REGION_SIZE,
    DEFAULT_WORKER_L1_SIZE,
    FabricConfig,
    MeshDevice,
    MeshShape,
    close_device,
    close_mesh_device,
    compute_with_storage_grid_size,
    dump_device_memory_state,
    get_device_ids,
    get_fabric_config,
    get_max_worker_l1_unreserved_size,
    get_memory_view,
    get_num_devices,
    GetNumAvailableDevices,
    GetNumPCIeDevices,
    get_num_pcie_devices,
    manage_device,
    open_device,
    open_mesh_device,
    set_fabric_config,
    synchronize_device,
)
from ._ops import (  # noqa: F401
    add,
    all_gather,
    all_reduce,
    argmax,
    clone,
    command_queue,
    concat,
    embedding,
    exp,
    gelu,
    linear,
    matmul,
    mul,
    multiply,
    neg,
    permute,
    reciprocal,
    reduce_scatter,
    relu,
    reshape,
    reshard,
    rms_norm,
    sigmoid,
    silu,
    slice,
    softmax,
    sqrt,
    sub,
    subtract,
    tanh,
    to_layout,
    to_memory_config,
    transpose,
    typecast,
    update_cache,
)
from ._trace import (  # noqa: F401
    MeshEvent,
    MeshTraceId,
    begin_trace_capture,
    create_event,
    end_trace_capture,
    event_synchronize,
    execute_trace,
    record_event,
    release_trace,
    wait_for_event,
)
from ._tensor import (  # noqa: F401
    DRAM_MEMORY_CONFIG,
    L1_MEMORY_CONFIG,
    ROW_MAJOR_LAYOUT,
    TILE_LAYOUT,
    TILE_SIZE,
    BufferType,
    ConcatMesh2dToTensor,
    ConcatMeshToTensor,
    DataType,
    DefaultQueueId,
    Layout,
    MemoryConfig,
    MeshComposerConfig,
    MeshMapperConfig,
    MeshToTensor,
    PlacementReplicate,
    PlacementShard,
    ReplicateTensorToMesh,
    Shape,
    ShardTensor2dMesh,
    ShardTensorToMesh,
    StorageType,
    Tensor,
    TensorMemoryLayout,
    TensorSpec,
    TensorToMesh,
    allocate_tensor_on_device,
    bfloat8_b,
    bfloat4_b,
    bfloat16,
    concat_mesh_to_tensor_composer,
    copy_host_to_device_tensor,
    create_mesh_composer,
    create_mesh_mapper,
    deallocate,
    distribute,
    float32,
    from_device,
    from_torch,
    get_device_tensors,
    int32,
    is_tensor_storage_on_device,
    replicate_tensor_to_mesh_mapper,
    shard_tensor_to_mesh_mapper,
    to_device,
    to_numpy,
    to_torch,
    uint32,
)

CoreCoord = _n.CoreCoord
CoreRange = _n.CoreRange
CoreRangeSet = _n.CoreRangeSet
CoreGrid = _n.CoreGrid
ShardSpec = _n.ShardSpec
ShardStrategy = _n.ShardStrategy
ShardOrientation = _n.ShardOrientation
Topology = _n.Topology
create_sharded_memory_config = _n.create_sharded_memory_config

from ._creation import *  # noqa: E402,F401,F403  (zeros, ones, full, ..., config classes)
from . import experimental, graph, transformer  # noqa: E402,F401

import types as _types  # noqa: E402

# TT-NN's native namespace, as programs sometimes call it (ttnn._ttnn.device.synchronize_device).
_ttnn = _types.SimpleNamespace(device=_types.SimpleNamespace(synchronize_device=synchronize_device, DEFAULT_L1_SMALL_SIZE=DEFAULT_L1_SMALL_SIZE, DEFAULT_TRACE_REGION_SIZE=DEFAULT_TRACE_REGION_SIZE, DEFAULT_WORKER_L1_SIZE=DEFAULT_WORKER_L1_SIZE))
