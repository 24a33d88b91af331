"""Module aliases that let an unmodified TT-NN program or test run on ttmesh.

Two import hooks, installed by ``python -m ttmesh`` and ``pytest -p ttmesh.pytest_plugin`` for
that run only (nothing is written to site-packages, so a plain ``import ttnn`` elsewhere is
untouched):

* ``TtnnAliasFinder`` sits at the FRONT of ``sys.meta_path``: ``ttnn`` and every ``ttnn.X``
  resolve to ``ttmesh.ttnn`` and ``ttmesh.ttnn.X``, the very same module objects, so
  ``ttnn.graph is ttmesh.ttnn.graph``. It goes first because the point of the run is that
  ``import ttnn`` means ttmesh even where a real ttnn is installed.

* ``HelperFallbackFinder`` sits at the END of ``sys.meta_path``: the modules tt-metal's tests
  import their comparison helpers from (``tests.ttnn.utils_for_testing``,
  ``models.utility_functions``, ``models.common.utility_functions``) are served from
  ``ttmesh.testing`` only when no real module of that name exists. A user's own ``tests`` or
  ``models`` package is found first by the ordinary finders and wins; only the missing names
  inside it fall back to ours, and a tt-metal checkout's real helpers are used as they are.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

TTNN_TARGET = "ttmesh.ttnn"

# Helper modules tt-metal tests import, and which of ttmesh's modules give their names.
HELPER_MODULES = {
    "tests.ttnn.utils_for_testing": ("ttmesh.testing",),
    "models.utility_functions": ("ttmesh.testing", "ttmesh._utility_functions"),
    "models.common.utility_functions": ("ttmesh.testing", "ttmesh._utility_functions"),
    # Older TT-NN tests import the comparisons from the sweep framework.
    "tests.tt_eager.python_api_testing.sweep_tests.comparison_funcs": ("ttmesh.testing",),
}
# Their parents, made as empty packages only when no real package of that name exists.
HELPER_PARENTS = {
    name.rsplit(".", depth)[0] for name in HELPER_MODULES for depth in range(1, name.count(".") + 1)
}


class _ExistingModuleLoader(importlib.abc.Loader):
    """Hands the import system a module object that already exists (or is built on demand)."""

    def __init__(self, make_module):
        self._make_module = make_module

    def create_module(self, spec):
        return self._make_module()

    def exec_module(self, module):
        # The module is complete already; running anything here would re-execute it.
        pass


class TtnnAliasFinder(importlib.abc.MetaPathFinder):
    """``ttnn[.X]`` -> ``<target>[.X]``."""

    def __init__(self, target: str = TTNN_TARGET, alias: str = "ttnn"):
        self.target = target
        self.alias = alias

    def target_name(self, fullname: str):
        """The module ``fullname`` stands for, or None when it is not under the alias."""
        if fullname == self.alias:
            return self.target
        if fullname.startswith(self.alias + "."):
            return self.target + fullname[len(self.alias) :]
        return None

    def find_spec(self, fullname, path=None, target=None):
        real_name = self.target_name(fullname)
        if real_name is None:
            return None
        make_module = _module_maker(real_name)
        if make_module is None:
            # Nothing to alias: Python's own "No module named 'ttnn.x'" is the right error.
            return None
        return importlib.machinery.ModuleSpec(fullname, _ExistingModuleLoader(make_module))


def _module_maker(real_name: str):
    """How to get module ``real_name``, or None when there is no such module.

    A submodule may also be a module object set as an attribute of its parent without being
    importable by name (a native extension's submodules are made that way)."""
    if real_name in sys.modules:
        return lambda: sys.modules[real_name]
    if importlib.util.find_spec(real_name) is not None:
        return lambda: importlib.import_module(real_name)
    parent_name, _, child = real_name.rpartition(".")
    if parent_name:
        attribute = getattr(importlib.import_module(parent_name), child, None)
        if isinstance(attribute, types.ModuleType):
            return lambda: attribute
    return None


def _helper_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, f"ttmesh's stand-in for tt-metal's {name}")
    for source_name in HELPER_MODULES[name]:
        source = importlib.import_module(source_name)
        exported = getattr(source, "__all__", None)
        if exported is None:
            exported = [n for n in vars(source) if not n.startswith("_")]
        for attribute in exported:
            setattr(module, attribute, getattr(source, attribute))
    module.__ttmesh_stand_in__ = True
    return module


def _empty_package(name: str) -> types.ModuleType:
    module = types.ModuleType(name, f"ttmesh's empty stand-in for a {name} package")
    module.__path__ = []
    module.__ttmesh_stand_in__ = True
    return module


class HelperFallbackFinder(importlib.abc.MetaPathFinder):
    """Serves the tt-metal helper modules when nothing else on sys.path provides them."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in HELPER_MODULES:
            loader = _ExistingModuleLoader(lambda: _helper_module(fullname))
            return importlib.machinery.ModuleSpec(fullname, loader)
        if fullname in HELPER_PARENTS:
            loader = _ExistingModuleLoader(lambda: _empty_package(fullname))
            return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)
        return None


def _warn_if_real_ttnn_loaded(alias: str, target: str) -> None:
    loaded = sys.modules.get(alias)
    if loaded is not None and getattr(loaded, "__name__", None) != target:
        import warnings

        warnings.warn(
            f"a module named {alias!r} was imported before ttmesh's alias was installed "
            f"({getattr(loaded, '__file__', loaded)!r}); it is replaced by {target} for this run",
            RuntimeWarning,
            stacklevel=3,
        )
        for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
            del sys.modules[name]


class Aliases:
    """Both hooks; ``install()`` and ``uninstall()`` leave ``sys`` as they found it."""

    def __init__(self, ttnn_target: str = TTNN_TARGET, alias_ttnn: bool = True):
        self.ttnn_finder = TtnnAliasFinder(ttnn_target) if alias_ttnn else None
        self.helper_finder = HelperFallbackFinder()

    def install(self) -> "Aliases":
        if self.ttnn_finder is not None:
            _warn_if_real_ttnn_loaded(self.ttnn_finder.alias, self.ttnn_finder.target)
            sys.meta_path.insert(0, self.ttnn_finder)
        sys.meta_path.append(self.helper_finder)
        return self

    def uninstall(self) -> None:
        for finder in (self.ttnn_finder, self.helper_finder):
            if finder is not None and finder in sys.meta_path:
                sys.meta_path.remove(finder)
        for name in list(sys.modules):
            module = sys.modules[name]
            stand_in = getattr(module, "__ttmesh_stand_in__", False)
            aliased = self.ttnn_finder is not None and (self.ttnn_finder.target_name(name) is not None)
            if stand_in or aliased:
                del sys.modules[name]

    def __enter__(self) -> "Aliases":
        return self.install()

    def __exit__(self, *exc_info) -> None:
        self.uninstall()
