"""Every public name of ttmesh.ttnn (and its graph, experimental, transformer modules) is used
by at least one test here (the brief: every name called at least once with TT-NN's keywords)."""

import pathlib
import re

import ttmesh.ttnn as ttnn

HERE = pathlib.Path(__file__).parent


def test_every_public_name_is_used_by_a_test():
    text = "\n".join(p.read_text() for p in HERE.glob("test_*.py") if p.name != pathlib.Path(__file__).name)
    missing = []
    for prefix, module in [("ttnn", ttnn), ("ttnn.graph", ttnn.graph), ("ttnn.experimental", ttnn.experimental), ("ttnn.transformer", ttnn.transformer)]:
        for name in dir(module):
            if name.startswith("_") or isinstance(getattr(module, name), type(ttnn)):
                continue
            if prefix == "ttnn.graph" and name in ("json", "CapturedGraph"):
                continue
            if not re.search(rf"{re.escape(prefix)}\.{re.escape(name)}\b", text):
                missing.append(f"{prefix}.{name}")
    assert not missing, f"public names no test uses: {missing}"
