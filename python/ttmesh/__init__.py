"""ttmesh: an emulator of Tenstorrent multi-chip meshes, with TT-NN's Python API.

    import ttmesh.ttnn as ttnn

gives TT-NN's names, keywords and defaults backed by emulated chips (allocator, command queues,
Metal Trace, the 1D fabric and its collectives). Which machine `open_device` / `open_mesh_device`
open is the *system*: ``TTMESH_SYSTEM`` (default ``t3k``: 8 Wormhole chips as 2x4) or
:func:`set_system` (n150, n300, t3k, galaxy, p150, p300, line-N, ring-N or a cluster TOML path).
"""

import os as _os
import sys as _sys

from . import _ttmesh  # noqa: F401  (the native module; fails here if the build is missing)

# Under an MPI launcher (`mpirun -np N python -m ttmesh prog.py`, a module built with the
# `mpi` feature) every rank runs the program and opens only its own chips of one mesh.
_UNDER_MPI = "OMPI_COMM_WORLD_SIZE" in _os.environ or "PMI_SIZE" in _os.environ


def _end_mpi_job():
    """As a Rust program's last call: every rank meets, then MPI is finalised; an uncaught
    exception instead ends the whole job (MPI_Abort), its traceback printed first, so
    mpirun exits non-zero and no rank waits for one that failed."""
    import atexit

    previous_hook = _sys.excepthook

    def on_uncaught(kind, value, tb):
        previous_hook(kind, value, tb)
        _sys.stderr.flush()
        _ttmesh.end_of_job(f"{kind.__name__}: {value}")

    _sys.excepthook = on_uncaught
    atexit.register(_ttmesh.end_of_job)


if _UNDER_MPI:
    _end_mpi_job()


def _program_failed(reason):
    """The program `python -m ttmesh` ran failed (it printed why): under a launcher, end the
    whole job now, even if MPI never started (a rank that only exits non-zero before then
    leaves mpirun, told not to end the job for it, exiting 0)."""
    if _UNDER_MPI:
        _sys.stderr.flush()
        _ttmesh.end_of_job(str(reason))

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


class profile:
    """``with ttmesh.profile("prof", device=mesh):`` records every chip of the device (the
    device opened last when None) and, at the end of the block, writes the modeled device
    profile to the folder: ops_perf_results.csv (tt-metal's columns, for tt-perf-report),
    trace.json (Perfetto), timeline.svg, calibration.toml and summary.json, as ``ttmesh run
    --profile`` does. ``host_model``: "python" (TT-NN's Python dispatch cost per op), "cpp"
    or "measured". ``iterations`` divides an untraced block's figures per iteration. After
    the block, ``.summary`` (a dict), ``.text`` and ``.files`` hold what was written, and
    ``.predicted`` (a dict, or None when the block captured no trace) the captured trace
    replayed back to back as the hardware would: ``token_us`` per replay and the top ops by
    share, the same model as ``ttmesh plan decode --predict``.
    ``TTMESH_PROFILE=DIR`` profiles every device a program opens, written when it closes."""

    def __init__(self, dir, device=None, calibration=None, host_model="python", iterations=1, quiet=False):
        self.dir, self.device, self.calibration = str(dir), device, calibration
        self.host_model, self.iterations, self.quiet = host_model, iterations, quiet
        self.summary = self.text = self.files = self.predicted = None
        self._p = None

    def __enter__(self):
        from .ttnn import _device  # noqa: PLC0415

        device = self.device if self.device is not None else _device.last_open_device()
        if device is None:
            raise RuntimeError("ttmesh.profile: no open device to profile; open one first or pass device=")
        self._p = _ttmesh.profile_start(device, self.dir, None if self.calibration is None else str(self.calibration), self.host_model)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self._p.cancel()
            return False
        import json  # noqa: PLC0415

        summary, self.text, self.files = self._p.finish(self.iterations)
        self.summary = json.loads(summary)
        self.predicted = self.summary.get("predicted")
        if not self.quiet:
            print(self.text, end="")
            for f in self.files:
                print(f"  wrote {f}")
        return False


__all__ = ["profile", "set_system", "system"]
