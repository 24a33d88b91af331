"""Tensor creation (``zeros``, ``ones``, ``full``, ``*_like``, ``empty``, ``arange``, ``rand``)
and the configuration objects TT-NN programs build and pass to ops (compute kernel and
program configs), which ttmesh accepts: the emulated chips choose their own work split."""

import numpy as np

from ttmesh import _ttmesh as _n

from . import _tensor as t


def _shape(shape):
    return [int(d) for d in shape]


def full(shape, fill_value, dtype=None, layout=t.ROW_MAJOR_LAYOUT, device=None, memory_config=None):
    """TT-NN's ``full(shape, fill_value, dtype=None, layout=ROW_MAJOR_LAYOUT, device=None,
    memory_config=None)`` (bfloat16 when dtype is None)."""
    dtype = t.bfloat16 if dtype is None else dtype
    np_type = np.float32 if dtype in (t.bfloat16, t.float32, t.bfloat8_b, t.bfloat4_b) else (np.int32 if dtype == t.int32 else np.uint32)
    return t.from_torch(np.full(_shape(shape), fill_value, dtype=np_type), dtype=dtype, layout=layout, device=device, memory_config=memory_config)


def zeros(shape, dtype=None, layout=t.ROW_MAJOR_LAYOUT, device=None, memory_config=None):
    return full(shape, 0, dtype, layout, device, memory_config)


def ones(shape, dtype=None, layout=t.ROW_MAJOR_LAYOUT, device=None, memory_config=None):
    return full(shape, 1, dtype, layout, device, memory_config)


def _like(tensor, fill_value, dtype, layout, device, memory_config):
    if not isinstance(tensor, t.Tensor):
        raise TypeError(f"expected a ttnn.Tensor, not {type(tensor).__name__}")
    return full(
        list(tensor.shape),
        fill_value,
        dtype if dtype is not None else tensor.dtype,
        layout if layout is not None else tensor.layout,
        device if device is not None else tensor.device(),
        memory_config if memory_config is not None else (tensor.memory_config() if tensor.device() is not None else None),
    )


def full_like(tensor, fill_value, dtype=None, layout=None, device=None, memory_config=None):
    return _like(tensor, fill_value, dtype, layout, device, memory_config)


def zeros_like(tensor, dtype=None, layout=None, device=None, memory_config=None):
    return _like(tensor, 0, dtype, layout, device, memory_config)


def ones_like(tensor, dtype=None, layout=None, device=None, memory_config=None):
    return _like(tensor, 1, dtype, layout, device, memory_config)


def empty(shape, dtype=None, layout=t.ROW_MAJOR_LAYOUT, device=None, memory_config=None):
    """A device tensor with no values written (``allocate_tensor_on_device``)."""
    if device is None:
        raise ValueError("ttnn.empty: pass device= (an empty tensor lives on a device)")
    dtype = t.bfloat16 if dtype is None else dtype
    return t.allocate_tensor_on_device(t.TensorSpec(_shape(shape), dtype, layout, memory_config), device)


def empty_like(tensor, dtype=None, layout=None, device=None, memory_config=None):
    return empty(
        list(tensor.shape),
        dtype if dtype is not None else tensor.dtype,
        layout if layout is not None else tensor.layout,
        device if device is not None else tensor.device(),
        memory_config if memory_config is not None else tensor.memory_config(),
    )


def arange(start=0, end=None, step=1, dtype=None, device=None, layout=t.ROW_MAJOR_LAYOUT, memory_config=None):
    if end is None:
        start, end = 0, start
    dtype = t.bfloat16 if dtype is None else dtype
    values = np.arange(start, end, step)
    return t.from_torch(values, dtype=dtype, layout=layout, device=device, memory_config=memory_config)


def rand(shape, dtype=None, layout=t.ROW_MAJOR_LAYOUT, device=None, memory_config=None, seed=None):
    dtype = t.bfloat16 if dtype is None else dtype
    values = np.random.default_rng(seed).random(_shape(shape), dtype=np.float32)
    return t.from_torch(values, dtype=dtype, layout=layout, device=device, memory_config=memory_config)


class MathFidelity:
    LoFi = "LoFi"
    HiFi2 = "HiFi2"
    HiFi3 = "HiFi3"
    HiFi4 = "HiFi4"


class _Config:
    """A TT-NN configuration object: keeps its keywords; ttmesh's ops do not need them."""

    def __init__(self, *args, **kwargs):
        self.args = args
        for k, v in kwargs.items():
            setattr(self, k, v)
        self._kwargs = kwargs

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return f"{type(self).__name__}({inner})"


def _config(name):
    return type(name, (_Config,), {"__doc__": f"TT-NN's ``{name}``: accepted; the emulated op chooses its own work split."})


WormholeComputeKernelConfig = _config("WormholeComputeKernelConfig")
BlackholeComputeKernelConfig = _config("BlackholeComputeKernelConfig")
GrayskullComputeKernelConfig = _config("GrayskullComputeKernelConfig")
MatmulMultiCoreReuseProgramConfig = _config("MatmulMultiCoreReuseProgramConfig")
MatmulMultiCoreReuseMultiCastProgramConfig = _config("MatmulMultiCoreReuseMultiCastProgramConfig")
MatmulMultiCoreReuseMultiCast1DProgramConfig = _config("MatmulMultiCoreReuseMultiCast1DProgramConfig")
MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig = _config("MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig")
SoftmaxDefaultProgramConfig = _config("SoftmaxDefaultProgramConfig")
SoftmaxShardedMultiCoreProgramConfig = _config("SoftmaxShardedMultiCoreProgramConfig")
LayerNormDefaultProgramConfig = _config("LayerNormDefaultProgramConfig")
LayerNormShardedMultiCoreProgramConfig = _config("LayerNormShardedMultiCoreProgramConfig")
SDPAProgramConfig = _config("SDPAProgramConfig")


def init_device_compute_kernel_config(arch=None, math_fidelity=MathFidelity.LoFi, math_approx_mode=True, fp32_dest_acc_en=False, packer_l1_acc=False, dst_full_sync_en=False):
    return WormholeComputeKernelConfig(
        math_fidelity=math_fidelity,
        math_approx_mode=math_approx_mode,
        fp32_dest_acc_en=fp32_dest_acc_en,
        packer_l1_acc=packer_l1_acc,
        dst_full_sync_en=dst_full_sync_en,
    )


_default_device = [None]


def SetDefaultDevice(device):  # noqa: N802 (TT-NN's name)
    _default_device[0] = device


def GetDefaultDevice():  # noqa: N802
    return _default_device[0]


def ReadDeviceProfiler(device):  # noqa: N802
    """No device profiler to read on ttmesh (the modeled profile is ttmesh's own)."""


DumpDeviceProfiler = ReadDeviceProfiler


def enable_program_cache(device):
    """The program cache is always on in ttmesh (trace capture needs it)."""


def disable_and_clear_program_cache(device):
    """Kept for TT-NN programs; the emulated program cache stays on."""


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("np", "t")]
_ = _n


DispatchCoreConfig = _config("DispatchCoreConfig")


class DispatchCoreType:
    WORKER = "WORKER"
    ETH = "ETH"


class DispatchCoreAxis:
    ROW = "ROW"
    COL = "COL"


class FabricReliabilityMode:
    STRICT_SYSTEM_HEALTH_SETUP_MODE = "STRICT_SYSTEM_HEALTH_SETUP_MODE"
    RELAXED_SYSTEM_HEALTH_SETUP_MODE = "RELAXED_SYSTEM_HEALTH_SETUP_MODE"
    DYNAMIC_RECONFIGURATION_SETUP_MODE = "DYNAMIC_RECONFIGURATION_SETUP_MODE"


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("np", "t")]
