"""Tensors: from_torch / to_torch (torch tensors or numpy arrays), device moves, specs,
persistent inputs for traces, mesh mappers and composers."""

import contextlib

import numpy as np

from ttmesh import _ttmesh as _n

Tensor = _n.Tensor
Shape = _n.Shape
TensorSpec = _n.TensorSpec
DataType = _n.DataType
Layout = _n.Layout
MemoryConfig = _n.MemoryConfig
BufferType = _n.BufferType
TensorMemoryLayout = _n.TensorMemoryLayout
StorageType = _n.StorageType

bfloat16 = DataType.BFLOAT16
float32 = DataType.FLOAT32
bfloat8_b = DataType.BFLOAT8_B
bfloat4_b = DataType.BFLOAT4_B
uint32 = DataType.UINT32
int32 = DataType.INT32

ROW_MAJOR_LAYOUT = Layout.ROW_MAJOR
TILE_LAYOUT = Layout.TILE
TILE_SIZE = 32

DRAM_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.INTERLEAVED, BufferType.DRAM)
L1_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.INTERLEAVED, BufferType.L1)

DefaultQueueId = 0

_torch_module = None
_torch_checked = False


def _torch():
    """torch when it imports (its PyPI wheel needs CUDA libraries to import), else None."""
    global _torch_module, _torch_checked
    if not _torch_checked:
        _torch_checked = True
        try:
            import torch  # noqa: PLC0415

            _torch_module = torch
        except Exception:  # ImportError, or an OSError from a missing CUDA library
            _torch_module = None
    return _torch_module


def _is_torch_tensor(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def _as_numpy(x):
    """(array, torch dtype name or None) for a torch tensor, numpy array or nested list."""
    if _is_torch_tensor(x):
        torch = _torch()
        name = str(x.dtype).replace("torch.", "")
        t = x.detach().cpu()
        if name == "bfloat16":
            t = t.to(torch.float32)
        return t.contiguous().numpy(), name
    if isinstance(x, np.ndarray):
        return x, None
    if isinstance(x, Tensor):
        raise TypeError("from_torch: the argument is already a ttnn.Tensor; use ttnn.to_device to move it")
    try:
        return np.asarray(x), None
    except Exception:
        raise TypeError(f"from_torch: tensor must be a torch.Tensor or a numpy array, not {type(x).__name__}") from None


def _infer_dtype(arr, torch_name):
    if torch_name == "bfloat16":
        return bfloat16
    k = arr.dtype
    if k.kind == "f":
        return float32
    if k == np.int32 or (k.kind == "i" and torch_name is not None):
        return int32
    if k.kind == "u" or k.kind == "b":
        return uint32
    if k.kind == "i":
        return int32
    raise TypeError(f"from_torch: cannot infer a ttnn dtype from {arr.dtype}; pass dtype=ttnn.bfloat16 / float32 / uint32 / int32")


def _encode(arr, dtype):
    """(bytes, kind) the native side takes: f32 for float dtypes, u32 bits for integers."""
    if dtype in (bfloat16, float32, bfloat8_b, bfloat4_b):
        return np.ascontiguousarray(arr, dtype=np.float32).tobytes(), "f32"
    if dtype == uint32:
        if arr.dtype.kind in "iub":
            if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
                raise ValueError("from_torch: negative values cannot be held as ttnn.uint32; use dtype=ttnn.int32")
            return np.ascontiguousarray(arr, dtype=np.uint32).tobytes(), "u32"
        return np.ascontiguousarray(np.asarray(arr, dtype=np.float64).astype(np.uint32)).tobytes(), "u32"
    if dtype == int32:
        return np.ascontiguousarray(arr, dtype=np.int32).view(np.uint32).tobytes(), "u32"
    raise TypeError(f"from_torch: dtype must be a ttnn.DataType (ttnn.bfloat16, float32, bfloat8_b, uint32, int32), not {dtype!r}")


_default_mapper = None
_default_composer = None


def _mapper_of(mapper):
    if mapper is None:
        return None, None
    spec = getattr(mapper, "_ttmesh_spec", None)
    if spec is None:
        raise TypeError(
            f"mesh_mapper must be a ttnn mesh mapper (ttnn.ShardTensorToMesh, ReplicateTensorToMesh, ShardTensor2dMesh, create_mesh_mapper(...)), not {type(mapper).__name__}"
        )
    return spec, mapper.mesh_device


def from_torch(
    tensor,
    dtype=None,
    *,
    spec=None,
    tile=None,
    pad_value=None,
    layout=ROW_MAJOR_LAYOUT,
    device=None,
    memory_config=None,
    mesh_mapper=None,
    cq_id=DefaultQueueId,
    sub_device_ids=None,
):
    """TT-NN's ``from_torch``: a torch tensor (or numpy array) as a ttnn.Tensor, on the host or
    written to ``device`` (split or replicated over a mesh by ``mesh_mapper``; replicated when
    None)."""
    arr, torch_name = _as_numpy(tensor)
    if spec is not None:
        dtype, layout, memory_config = spec.dtype, spec.layout, spec.memory_config
    if dtype is None:
        dtype = _infer_dtype(arr, torch_name)
    if not isinstance(dtype, DataType):
        raise TypeError(f"from_torch: dtype must be a ttnn.DataType (e.g. ttnn.bfloat16), not {dtype!r}")
    if not isinstance(layout, Layout):
        raise TypeError(f"from_torch: layout must be ttnn.TILE_LAYOUT or ttnn.ROW_MAJOR_LAYOUT, not {layout!r}")
    if device is not None and not isinstance(device, _n.MeshDevice):
        raise TypeError(f"from_torch: device must be a ttnn.MeshDevice (from ttnn.open_device / open_mesh_device), not {type(device).__name__}")
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if mesh_mapper is None:
        mesh_mapper = _default_mapper
    mapper_spec, mapper_mesh = _mapper_of(mesh_mapper)
    data, kind = _encode(arr, dtype)
    return _n.from_host_data(
        data,
        list(arr.shape),
        kind,
        dtype,
        layout,
        device,
        memory_config,
        mapper_spec,
        mapper_mesh,
        0 if cq_id is None else cq_id,
    )


def _decode(tensor, mesh_composer, cq_id):
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_torch: tensor must be a ttnn.Tensor, not {type(tensor).__name__}")
    if mesh_composer is None:
        mesh_composer = _default_composer
    composer = None
    if mesh_composer is not None:
        composer = getattr(mesh_composer, "_ttmesh_spec", None)
        if composer is None:
            raise TypeError(
                f"mesh_composer must be a ttnn mesh composer (ttnn.ConcatMeshToTensor, ConcatMesh2dToTensor, create_mesh_composer(...)), not {type(mesh_composer).__name__}"
            )
    data, shape, kind = _n.read_data(tensor, composer, 0 if cq_id is None else cq_id)
    arr = np.frombuffer(data, dtype=np.float32 if kind == "f32" else np.uint32).reshape(shape)
    if tensor.dtype == int32:
        arr = arr.view(np.int32)
    return arr


def to_numpy(tensor, *, mesh_composer=None, cq_id=DefaultQueueId):
    """The tensor's values as a numpy array (float32 for float dtypes, uint32 / int32)."""
    return _decode(tensor, mesh_composer, cq_id)


def to_torch(tensor, dtype=None, *, torch_rank=None, mesh_composer=None, device=None, cq_id=DefaultQueueId):
    """TT-NN's ``to_torch``: a torch tensor when torch imports (bfloat16 for ttnn.bfloat16 and
    bfloat8_b, as TT-NN gives), else a numpy array."""
    arr = _decode(tensor, mesh_composer, cq_id)
    if torch_rank is not None:
        while arr.ndim > torch_rank and arr.shape[0] == 1:
            arr = arr[0]
        if arr.ndim != torch_rank:
            raise ValueError(f"to_torch: cannot make rank {torch_rank} from shape {list(arr.shape)} by dropping leading 1s")
    torch = _torch()
    if torch is None:
        if dtype is not None:
            arr = arr.astype(dtype)
        return arr
    if arr.dtype == np.uint32:
        # torch has no full uint32 type; TT-NN gives int32 bits.
        arr = arr.view(np.int32)
    out = torch.from_numpy(np.array(arr))
    if tensor.dtype in (bfloat16, bfloat8_b):
        out = out.to(torch.bfloat16)
    if dtype is not None:
        out = out.to(dtype)
    return out


def to_device(tensor, device, memory_config=None, cq_id=DefaultQueueId, sub_device_ids=None):
    return _n.to_device(tensor, device, memory_config, 0 if cq_id is None else cq_id)


def from_device(tensor, blocking=True, cq_id=DefaultQueueId):
    return tensor.cpu(blocking=blocking, cq_id=0 if cq_id is None else cq_id)


def get_device_tensors(tensor):
    return _n.get_device_tensors(tensor)


def allocate_tensor_on_device(*args, **kwargs):
    """TT-NN's ``allocate_tensor_on_device(spec, device, memory_config=None)`` or
    ``allocate_tensor_on_device(shape, dtype, layout, device, memory_config=None)``."""
    names = ("shape", "dtype", "layout", "device", "memory_config")
    if args and isinstance(args[0], TensorSpec) or "spec" in kwargs or "tensor_spec" in kwargs:
        spec = kwargs.pop("spec", None) or kwargs.pop("tensor_spec", None) or args[0]
        rest = list(args[1:]) if args and isinstance(args[0], TensorSpec) else list(args)
        device = kwargs.pop("device", None) or (rest.pop(0) if rest else None)
        memory_config = kwargs.pop("memory_config", None) or (rest.pop(0) if rest else None)
        if kwargs:
            raise TypeError(f"allocate_tensor_on_device() got unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        if memory_config is not None:
            spec = TensorSpec(spec.shape, spec.dtype, spec.layout, memory_config)
    else:
        bound = dict(zip(names, args))
        for k in list(kwargs):
            if k not in names:
                raise TypeError(f"allocate_tensor_on_device() got an unexpected keyword argument {k!r}")
            bound[k] = kwargs.pop(k)
        missing = [k for k in names[:4] if k not in bound]
        if missing:
            raise TypeError(f"allocate_tensor_on_device: missing {', '.join(missing)}: pass (spec, device) or (shape, dtype, layout, device)")
        spec = TensorSpec(bound["shape"], bound["dtype"], bound["layout"], bound.get("memory_config"))
        device = bound["device"]
    if not isinstance(device, _n.MeshDevice):
        raise TypeError(f"allocate_tensor_on_device: device must be a ttnn.MeshDevice, not {type(device).__name__}")
    return _n.allocate_tensor_on_device(spec, device)


def copy_host_to_device_tensor(host_tensor, device_tensor, cq_id=DefaultQueueId, sub_device_ids=None):
    _n.copy_host_to_device_tensor(host_tensor, device_tensor, 0 if cq_id is None else cq_id)


def deallocate(tensor, force=True):
    """TT-NN's ``deallocate(tensor, force=True)``: frees the tensor's device buffer."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"deallocate: tensor must be a ttnn.Tensor, not {type(tensor).__name__}")
    tensor.deallocate(force)


def is_tensor_storage_on_device(tensor):
    return tensor.storage_type() == StorageType.DEVICE


# ---- mesh mappers and composers -------------------------------------------------------------


class _MeshMap:
    """A mapper or composer: the mesh it was made for and what the native side does."""

    _ttmesh_spec = None
    mesh_device = None

    def __repr__(self):
        return f"{type(self).__name__}{self._ttmesh_spec[1:]}"


def _dim(name, dim):
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{name}: dim must be an int, not {dim!r}")
    return dim


class TensorToMesh(_MeshMap):
    pass


class MeshToTensor(_MeshMap):
    pass


class ShardTensorToMesh(TensorToMesh):
    """Splits the tensor along ``dim`` over every device of the mesh (row-major)."""

    def __init__(self, mesh_device, dim):
        self.mesh_device = mesh_device
        self.dim = _dim("ShardTensorToMesh", dim)
        self._ttmesh_spec = ("shard", self.dim)


class ReplicateTensorToMesh(TensorToMesh):
    """The same tensor on every device."""

    def __init__(self, mesh_device=None):
        self.mesh_device = mesh_device
        self._ttmesh_spec = ("replicate",)


class ShardTensor2dMesh(TensorToMesh):
    """Splits along ``dims[0]`` over mesh rows and ``dims[1]`` over columns (None replicates)."""

    def __init__(self, mesh_device, dims, mesh_shape=None):
        self.mesh_device = mesh_device
        dims = tuple(dims)
        if len(dims) != 2:
            raise ValueError(f"ShardTensor2dMesh: dims must give one dim (or None) per mesh axis, 2 in all; got {dims}")
        self.dims = tuple(None if d is None else _dim("ShardTensor2dMesh", d) for d in dims)
        self._ttmesh_spec = ("2d",) + self.dims


class ConcatMeshToTensor(MeshToTensor):
    """Joins every device's tensor along ``dim`` (row-major device order)."""

    def __init__(self, mesh_device, dim):
        self.mesh_device = mesh_device
        self.dim = _dim("ConcatMeshToTensor", dim)
        self._ttmesh_spec = ("concat", self.dim)


class ConcatMesh2dToTensor(MeshToTensor):
    """Joins along ``dims[0]`` over rows and ``dims[1]`` over columns."""

    def __init__(self, mesh_device, dims, mesh_shape=None):
        self.mesh_device = mesh_device
        dims = tuple(dims)
        if len(dims) != 2 or any(d is None for d in dims):
            raise ValueError(f"ConcatMesh2dToTensor: dims must be two ints (rows' dim, columns' dim); got {dims}")
        self.dims = tuple(_dim("ConcatMesh2dToTensor", d) for d in dims)
        self._ttmesh_spec = ("concat2d",) + self.dims


def shard_tensor_to_mesh_mapper(mesh_device, dim):
    return ShardTensorToMesh(mesh_device, dim)


def replicate_tensor_to_mesh_mapper(mesh_device):
    return ReplicateTensorToMesh(mesh_device)


def concat_mesh_to_tensor_composer(mesh_device, dim):
    return ConcatMeshToTensor(mesh_device, dim)


class PlacementReplicate:
    def __repr__(self):
        return "PlacementReplicate()"

    def __eq__(self, other):
        return isinstance(other, PlacementReplicate)


class PlacementShard:
    def __init__(self, dim):
        self.dim = _dim("PlacementShard", dim)

    def __repr__(self):
        return f"PlacementShard({self.dim})"

    def __eq__(self, other):
        return isinstance(other, PlacementShard) and other.dim == self.dim


class MeshMapperConfig:
    """``MeshMapperConfig(placements, mesh_shape_override=None)``: one placement per mesh axis."""

    def __init__(self, placements, mesh_shape_override=None):
        self.placements = list(placements)
        for p in self.placements:
            if not isinstance(p, (PlacementShard, PlacementReplicate)):
                raise TypeError(f"MeshMapperConfig: placements must be ttnn.PlacementShard(dim) or ttnn.PlacementReplicate(), not {p!r}")
        self.mesh_shape_override = mesh_shape_override


class MeshComposerConfig:
    """``MeshComposerConfig(dims, mesh_shape_override=None)``: the dim each mesh axis joins on."""

    def __init__(self, dims, mesh_shape_override=None):
        self.dims = list(dims)
        self.mesh_shape_override = mesh_shape_override


def create_mesh_mapper(mesh_device, config):
    if not isinstance(config, MeshMapperConfig):
        raise TypeError(f"create_mesh_mapper: config must be a ttnn.MeshMapperConfig, not {type(config).__name__}")
    placements = config.placements
    if len(placements) == 1:
        # One placement for a mesh seen as one line of devices.
        p = placements[0]
        return ReplicateTensorToMesh(mesh_device) if isinstance(p, PlacementReplicate) else ShardTensorToMesh(mesh_device, p.dim)
    if len(placements) != 2:
        raise ValueError(f"create_mesh_mapper: a mesh has 2 axes; give 1 or 2 placements, not {len(placements)}")
    dims = [None if isinstance(p, PlacementReplicate) else p.dim for p in placements]
    return ShardTensor2dMesh(mesh_device, dims)


def create_mesh_composer(mesh_device, config):
    if not isinstance(config, MeshComposerConfig):
        raise TypeError(f"create_mesh_composer: config must be a ttnn.MeshComposerConfig, not {type(config).__name__}")
    if len(config.dims) == 1:
        return ConcatMeshToTensor(mesh_device, config.dims[0])
    if len(config.dims) != 2:
        raise ValueError(f"create_mesh_composer: a mesh has 2 axes; give 1 or 2 dims, not {len(config.dims)}")
    return ConcatMesh2dToTensor(mesh_device, config.dims)


@contextlib.contextmanager
def distribute(default):
    """``with ttnn.distribute(mapper_or_composer):`` makes it the default ``mesh_mapper`` of
    ``from_torch`` (or ``mesh_composer`` of ``to_torch``) inside the block."""
    global _default_mapper, _default_composer
    if isinstance(default, TensorToMesh):
        saved, _default_mapper = _default_mapper, default
        try:
            yield
        finally:
            _default_mapper = saved
    elif isinstance(default, MeshToTensor):
        saved, _default_composer = _default_composer, default
        try:
            yield
        finally:
            _default_composer = saved
    else:
        raise TypeError(f"distribute: pass a ttnn mesh mapper or composer, not {type(default).__name__}")
