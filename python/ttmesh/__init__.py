"""ttmesh: an emulator of Tenstorrent multi-chip meshes, with TT-NN's Python API.

    import ttmesh.ttnn as ttnn

gives TT-NN's names, keywords and defaults backed by emulated chips (allocator, command queues,
Metal Trace, the 1D fabric and its collectives). Which machine `open_device` / `open_mesh_device`
open is the *system*: ``TTMESH_SYSTEM`` (default ``t3k``: 8 Wormhole chips as 2x4) or
:func:`set_system` (n150, n300, t3k, galaxy, p150, p300, line-N, ring-N or a cluster TOML path).
"""

import os as _os

from . import _ttmesh  # noqa: F401  (the native module; fails here if the build is missing)

_system = _os.environ.get("TTMESH_SYSTEM", "t3k")


def set_system(name):
    """Chooses the emulated machine that later ``open_device`` / ``open_mesh_device`` calls
    open (a shipped topology name or a cluster descriptor path). Checked now."""
    global _system
    _ttmesh.system_info(str(name))
    _system = str(name)


def system():
    """The emulated machine's topology name (see :func:`set_system`)."""
    return _system


__all__ = ["set_system", "system"]
