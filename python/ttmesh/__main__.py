"""``python -m ttmesh SCRIPT.py [args]``: run an unmodified TT-NN program on ttmesh.

Inside the run, ``import ttnn`` (and ``ttnn.graph``, ``ttnn.graph_report``, every ``ttnn.X``)
is ``ttmesh.ttnn``; tt-metal's test helpers (``tests.ttnn.utils_for_testing``,
``models.utility_functions``) fall back to ``ttmesh.testing`` where the program has none of
its own. The script runs as ``python SCRIPT.py`` would run it: ``sys.argv``, ``sys.path[0]``,
``__main__``, the exit code, and a traceback that starts in the script.

``--system NAME`` first picks the machine (n150, n300, t3k, galaxy, ...; default
``$TTMESH_SYSTEM`` or t3k). Also ``python -m ttmesh -m MODULE [args]`` (e.g. ``-m ttnn.graph_report report.json OUT``)
and ``python -m ttmesh -c CODE [args]``.
"""

from __future__ import annotations

import io
import os
import runpy
import sys
import types

import ttmesh
from ttmesh._aliases import Aliases
from ttmesh._run import select_system

USAGE = """\
usage: python -m ttmesh [--system NAME] SCRIPT.py [args ...]
       python -m ttmesh [--system NAME] -m MODULE [args ...]
       python -m ttmesh [--system NAME] -c CODE [args ...]

Runs a TT-NN Python program unmodified on ttmesh's emulated devices: inside the run,
`import ttnn` is `ttmesh.ttnn`. --system picks the machine its devices are opened on (n150,
n300, t3k, galaxy, p150, p300, line-N, ring-N or a cluster TOML; default $TTMESH_SYSTEM or t3k).
"""


def _print_exception(error: BaseException) -> None:
    """Report ``error`` as Python would, without this runner's own frames on top."""
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_frame.f_code.co_filename in _RUNNER_FILES:
        traceback = traceback.tb_next
    # The interpreter prints the exception's own __traceback__, so trim that, not a copy.
    error.with_traceback(traceback)
    sys.excepthook(type(error), error, traceback)


# The frames above the user's code: this module and runpy (frozen in some builds).
_RUNNER_FILES = {__file__, runpy.__file__, "<frozen runpy>"}


def _fresh_main(file: str | None) -> types.ModuleType:
    """A new ``__main__`` module, as the interpreter makes for ``python SCRIPT.py``."""
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    main.__spec__ = None
    if file is not None:
        main.__file__ = file
    sys.modules["__main__"] = main
    return main


def _is_package_path(path: str) -> bool:
    """A directory or zip file with a __main__.py, which Python runs as a whole."""
    return os.path.isdir(path) or (not path.endswith((".py", ".pyw")) and _is_zip(path))


def _run_script(path: str) -> None:
    if _is_package_path(path):
        runpy.run_path(path, run_name="__main__")  # runpy knows their rules
        return
    # Python 3.9+ gives the script an absolute __file__ and compiles it under that name.
    absolute = os.path.abspath(path)
    with io.open_code(absolute) as source_file:
        source = source_file.read()
    code = compile(source, absolute, "exec", dont_inherit=True)
    exec(code, _fresh_main(absolute).__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


# Modules whose command line lives outside ttmesh.ttnn.
_COMMAND_MODULES = {"ttnn.graph_report": "ttmesh.graph_report_cli"}


def _real_module_name(name: str) -> str:
    """``-m ttnn.X`` runs ttmesh's ``ttnn.X`` (runpy needs the module's own loader)."""
    if name in _COMMAND_MODULES:
        return _COMMAND_MODULES[name]
    if name == "ttnn" or name.startswith("ttnn."):
        return "ttmesh." + name
    return name


def _exit_like_python_after_interrupt() -> None:
    """Die of SIGINT as the interpreter does after an uncaught KeyboardInterrupt (exit 130)."""
    import signal

    sys.stdout.flush()
    sys.stderr.flush()
    if hasattr(signal, "SIGINT") and hasattr(os, "kill"):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(130)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        stream = sys.stdout if argv else sys.stderr
        stream.write(USAGE)
        return 0 if argv else 2

    if argv[0] == "--system" or argv[0].startswith("--system="):
        if "=" in argv[0]:
            name, argv = argv[0].split("=", 1)[1], argv[1:]
        else:
            name, argv = (argv[1] if len(argv) > 1 else ""), argv[2:]
        if not name or not argv:
            sys.stderr.write(f"{USAGE}\nerror: --system needs a name and then the program to run\n")
            return 2
        try:
            select_system(name)
        except RuntimeError as error:
            sys.stderr.write(f"error: --system: {error}\n")
            return 2

    mode, target = "script", argv[0]
    rest = argv[1:]
    if argv[0] in ("-m", "-c"):
        if len(argv) < 2:
            sys.stderr.write(f"{USAGE}\nerror: {argv[0]} needs an argument\n")
            return 2
        mode = "module" if argv[0] == "-m" else "code"
        target, rest = argv[1], argv[2:]
    elif argv[0].startswith("-"):
        sys.stderr.write(f"{USAGE}\nerror: unknown option {argv[0]!r}\n")
        return 2

    if mode == "script":
        if not os.path.exists(target):
            sys.stderr.write(
                f"{sys.executable}: can't open file {os.path.abspath(target)!r}: "
                f"[Errno 2] No such file or directory\n"
            )
            return 2
        sys.argv = [target, *rest]
        # As `python SCRIPT.py`: the script's folder first on the path, not the current one
        # (for a directory or zip, itself).
        absolute = os.path.abspath(target)
        sys.path[0] = absolute if _is_package_path(target) else os.path.dirname(absolute)
    elif mode == "module":
        sys.argv = [target, *rest]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
    else:
        sys.argv = ["-c", *rest]
        sys.path[0] = ""

    Aliases().install()
    try:
        if mode == "script":
            _run_script(target)
        elif mode == "module":
            runpy.run_module(_real_module_name(target), run_name="__main__", alter_sys=True)
        else:
            exec(compile(target, "<string>", "exec", dont_inherit=True), _fresh_main(None).__dict__)
    except SystemExit as leaving:
        if leaving.code not in (None, 0):
            ttmesh._program_failed(f"the program exited with {leaving.code!r}")
        raise
    except KeyboardInterrupt as interrupt:
        _print_exception(interrupt)
        _exit_like_python_after_interrupt()
    except BaseException as error:  # noqa: B036 - reported as the interpreter would
        _print_exception(error)
        ttmesh._program_failed(f"{type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
