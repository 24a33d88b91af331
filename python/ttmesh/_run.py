"""What `python -m ttmesh` and the pytest plugin share about the run itself."""

import os


def select_system(name: str) -> None:
    """The machine the run's devices open on, for the processes it starts too (as
    ``TTMESH_SYSTEM``). A name ttmesh does not know raises RuntimeError naming the choices."""
    import ttmesh

    ttmesh.set_system(name)  # checks the name now, not at the first open
    os.environ["TTMESH_SYSTEM"] = name
