"""The seeds' pytest form, as tt-metal tests are written: run with
`pytest -p ttmesh.pytest_plugin python/tests/seeds/tt_metal_style_seeds.py`.

The device_params are the ones seeds 001, 003 and 004 put in their
`@pytest.mark.parametrize("device_params", [...], indirect=True)`; each test hands the
fixture's device to a seed program (the program uses it instead of opening its own), and the
plugin closes it afterwards.
"""

import runpy
from pathlib import Path

import pytest
import ttnn

SEEDS = Path(__file__).resolve().parent


def run_seed(program, **fixtures):
    runpy.run_path(str(SEEDS / program), init_globals=fixtures, run_name="__main__")


@pytest.mark.parametrize(
    "device_params", [{"l1_small_size": 24576, "trace_region_size": 800768, "num_command_queues": 2}], indirect=True
)
@pytest.mark.parametrize(
    "program",
    [
        "seed001_trace_dram_input.py",
        "seed001_trace_l1_input.py",
        "seed001_2cq_writes.py",
        "seed001_2cq_writes_reads.py",
        "seed001_trace_2cq_writes.py",
        "seed001_trace_2cq_writes_reads.py",
    ],
)
def test_seed_001(device, program):
    run_seed(program, device=device)


@pytest.mark.parametrize("device_params", [{"l1_small_size": 24576, "trace_region_size": 800768}], indirect=True)
@pytest.mark.parametrize("program", ["seed003_trace_dram_input.py", "seed003_trace_l1_input.py"])
def test_seed_003(device, program):
    run_seed(program, device=device)


@pytest.mark.parametrize(
    "device_params", [{"trace_region_size": 30000000, "fabric_config": ttnn.FabricConfig.FABRIC_1D}], indirect=True
)
def test_seed_004(t3k_mesh_device):
    run_seed("seed004_trace_lifecycle.py", mesh_device=t3k_mesh_device)
