"""Devices: open/close, the system's device ids, synchronize, memory inspection."""

import contextlib
import os

import ttmesh
from ttmesh import _ttmesh as _n

MeshDevice = _n.MeshDevice
MeshShape = _n.MeshShape
FabricConfig = _n.FabricConfig

# TT-NN's defaults: nothing reserved for L1_SMALL or traces, the whole L1 for workers.
DEFAULT_L1_SMALL_SIZE = 0
DEFAULT_TRACE_REGION_SIZE = 0
DEFAULT_WORKER_L1_SIZE = 0

_fabric_config = FabricConfig.DISABLED

# Devices opened here and not closed yet, oldest first (for calls that name no device, as
# ttnn.graph.end_graph_capture_to_file).
_open_devices = []


# TTMESH_PROFILE=DIR: every device opened is profiled until it closes (ttmesh.profile).
_env_profiles = {}


def _opened(device):
    _open_devices.append(device)
    folder = os.environ.get("TTMESH_PROFILE")
    if folder:
        if _env_profiles:
            folder = os.path.join(folder, f"device-{len(_env_profiles)}")
        p = ttmesh.profile(folder, device=device)
        p.__enter__()
        _env_profiles[hash(device)] = p
    return device


def last_open_device():
    """The device opened last that is still open, or None."""
    for d in reversed(_open_devices):
        if d.is_open:
            return d
    return None


def set_fabric_config(fabric_config, reliability_mode=None, num_planes=None, *args, **kwargs):
    """TT-NN's ``set_fabric_config``: the fabric the next ``open_mesh_device`` builds
    (``FabricConfig.DISABLED`` until set, as in TT-NN; collectives need ``FABRIC_1D`` or
    ``FABRIC_1D_RING``)."""
    global _fabric_config
    if not isinstance(fabric_config, FabricConfig):
        raise TypeError(
            f"set_fabric_config: fabric_config must be a ttnn.FabricConfig (e.g. ttnn.FabricConfig.FABRIC_1D), not {type(fabric_config).__name__}"
        )
    _fabric_config = fabric_config


def get_fabric_config():
    return _fabric_config


def _system_info():
    return _n.system_info(ttmesh.system())


def get_num_devices():
    """Chips in the emulated system (``ttmesh.set_system`` / ``TTMESH_SYSTEM``)."""
    return _system_info()[3]


def get_device_ids():
    return list(range(get_num_devices()))


def get_num_pcie_devices():
    return get_num_devices()


GetNumAvailableDevices = get_num_devices
GetNumPCIeDevices = get_num_pcie_devices


def _check_size(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (bytes), not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0 bytes, got {value}")
    return value


def _check_cqs(num_command_queues):
    if isinstance(num_command_queues, bool) or not isinstance(num_command_queues, int):
        raise TypeError(f"num_command_queues must be 1 or 2, not {num_command_queues!r}")
    if num_command_queues not in (1, 2):
        raise ValueError(f"num_command_queues must be 1 or 2 (num hw cqs must be between 1 and 2), got {num_command_queues}")
    return num_command_queues


def open_device(
    device_id=0,
    l1_small_size=DEFAULT_L1_SMALL_SIZE,
    trace_region_size=DEFAULT_TRACE_REGION_SIZE,
    dispatch_core_config=None,
    *,
    worker_l1_size=DEFAULT_WORKER_L1_SIZE,
    num_command_queues=1,
    **kwargs,
):
    """TT-NN's ``open_device``: one device (a 1x1 MeshDevice, as TT-NN gives)."""
    _unknown_kwargs("open_device", kwargs, {"enable_program_cache", "dispatch_core_type"})
    n = get_num_devices()
    if isinstance(device_id, bool) or not isinstance(device_id, int):
        raise TypeError(f"open_device: device_id must be an int in 0..{n - 1}, not {device_id!r}")
    if not 0 <= device_id < n:
        raise ValueError(
            f"open_device: device_id {device_id} does not exist: the system ({ttmesh.system()}) has {n} device(s), ids 0..{n - 1}"
        )
    # One chip of the system's arch (chip id 0 in messages, as device 0 would be).
    single = "p150" if _system_info()[0] == "blackhole" else "n150"
    return _opened(_n.open_mesh(
        single,
        MeshShape(1, 1),
        _check_size("l1_small_size", l1_small_size),
        _check_size("trace_region_size", trace_region_size),
        _check_cqs(num_command_queues),
        _check_size("worker_l1_size", worker_l1_size),
        FabricConfig.DISABLED,
        device_id,
    ))


def open_mesh_device(
    mesh_shape=None,
    l1_small_size=DEFAULT_L1_SMALL_SIZE,
    trace_region_size=DEFAULT_TRACE_REGION_SIZE,
    num_command_queues=1,
    dispatch_core_config=None,
    offset=None,
    physical_device_ids=None,
    worker_l1_size=DEFAULT_WORKER_L1_SIZE,
    **kwargs,
):
    """TT-NN's ``open_mesh_device``: the system's chips as a mesh of ``mesh_shape`` (the whole
    system when None; a sub-grid from (0, 0); or 1xN along the system's ring or line)."""
    _unknown_kwargs("open_mesh_device", kwargs, {"enable_program_cache", "dispatch_core_type", "mesh_id"})
    if offset is not None and tuple(offset) not in ((0, 0),):
        raise ValueError("open_mesh_device: ttmesh opens sub-meshes from (0, 0) only; pass offset=None")
    if mesh_shape is not None and not isinstance(mesh_shape, MeshShape):
        try:
            mesh_shape = MeshShape(*tuple(mesh_shape))
        except TypeError:
            raise TypeError(f"open_mesh_device: mesh_shape must be a ttnn.MeshShape(rows, cols), not {mesh_shape!r}") from None
    return _opened(_n.open_mesh(
        ttmesh.system(),
        mesh_shape,
        _check_size("l1_small_size", l1_small_size),
        _check_size("trace_region_size", trace_region_size),
        _check_cqs(num_command_queues),
        _check_size("worker_l1_size", worker_l1_size),
        _fabric_config,
        None,
    ))


def _unknown_kwargs(fn, kwargs, accepted_and_ignored):
    bad = sorted(k for k in kwargs if k not in accepted_and_ignored)
    if bad:
        raise TypeError(f"{fn}() got unexpected keyword argument(s) {', '.join(bad)}")


def _check_device(fn, device):
    if not isinstance(device, MeshDevice):
        raise TypeError(f"{fn}: device must be a ttnn.MeshDevice (from ttnn.open_device / open_mesh_device), not {type(device).__name__}")
    return device


def _close(fn, device):
    _check_device(fn, device)
    p = _env_profiles.pop(hash(device), None) if device.is_open else None
    if p is not None:
        p.__exit__(None, None, None)
    from . import _ops  # noqa: PLC0415

    key = hash(device)
    for k in [k for k in _ops._scalars if k[0] == key]:
        del _ops._scalars[k]
    try:
        _n.close_mesh(device)
    finally:
        # Closed even when closing reported an error (the mesh frees everything first).
        _open_devices[:] = [d for d in _open_devices if d.is_open]


def close_device(device):
    _close("close_device", device)


def close_mesh_device(mesh_device):
    _close("close_mesh_device", mesh_device)


@contextlib.contextmanager
def manage_device(device_id=0, **kwargs):
    """TT-NN's ``manage_device``: a device open for the ``with`` block."""
    device = open_device(device_id=device_id, **kwargs)
    try:
        yield device
    finally:
        close_device(device)


def synchronize_device(device, cq_id=None, sub_device_ids=None):
    """Waits until every queue (or queue ``cq_id``) of every chip is done."""
    _n.synchronize_device(_check_device("synchronize_device", device), cq_id)


def get_memory_view(device, buffer_type):
    return _n.get_memory_view(_check_device("get_memory_view", device), buffer_type)


def dump_device_memory_state(device, prefix=""):
    return _n.dump_device_memory_state(_check_device("dump_device_memory_state", device), prefix)


def get_max_worker_l1_unreserved_size(device):
    return _n.get_max_worker_l1_unreserved_size(_check_device("get_max_worker_l1_unreserved_size", device))


def compute_with_storage_grid_size(device):
    return _check_device("compute_with_storage_grid_size", device).compute_with_storage_grid_size()
