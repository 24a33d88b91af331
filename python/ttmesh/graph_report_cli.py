"""``python -m ttnn.graph_report [--svg] REPORT OUT_DIR`` on ttmesh (seed 002's importer).

Turns a graph-capture report (``ttnn.graph.end_graph_capture_to_file``) into the folder
ttnn-visualizer opens: ``db.sqlite``, ``config.json``, ``cluster_descriptor.yaml`` and, with
``--svg``, ``call_graph.svg``. The work is ttmesh-report's (Rust); this front end runs the ``ttmesh``
command (``ttmesh report import``), found as ``$TTMESH_BIN``, this checkout's
``target/release/ttmesh``, or on PATH.

REPORT may be a folder: every ``*.json`` report in it is imported into ``OUT_DIR/<name>/``.
Under ``python -m ttmesh``, ``-m ttnn.graph_report`` runs this module; it also runs as
``python -m ttmesh.graph_report_cli``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

BUILD_HINT = (
    "build it with `cargo build --release -p ttmesh-cli` in the ttmesh checkout, or point "
    "TTMESH_BIN at a built `ttmesh`"
)


class GraphReportError(RuntimeError):
    """An import that could not run; the message names what is missing and the fix."""


def ttmesh_command() -> str:
    """Path of the ``ttmesh`` command that does the import."""
    configured = os.environ.get("TTMESH_BIN")
    if configured:
        if not os.access(configured, os.X_OK):
            raise GraphReportError(f"TTMESH_BIN={configured!r} is not an executable file: {BUILD_HINT}")
        return configured
    checkout_build = Path(__file__).resolve().parents[2] / "target" / "release" / "ttmesh"
    if os.access(checkout_build, os.X_OK):
        return str(checkout_build)
    on_path = shutil.which("ttmesh")
    if on_path:
        return on_path
    raise GraphReportError(f"the `ttmesh` command was not found: {BUILD_HINT}")


def import_report(report: Path, out_dir: Path, svg: bool = False, replace: bool = False) -> str:
    """Import one report; returns the summary line ttmesh prints."""
    if not report.is_file():
        raise GraphReportError(
            f"report {str(report)!r} does not exist: pass the file end_graph_capture_to_file wrote"
        )
    # TT-NN's importer makes the database folder wherever it is asked; ttmesh makes OUT_DIR.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    command = [ttmesh_command(), "report", "import", str(report), str(out_dir)]
    if svg:
        command.append("--svg")
    if replace:
        command.append("--replace")
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if completed.returncode != 0:
        raise GraphReportError(
            completed.stderr.strip() or f"`{' '.join(command)}` exited {completed.returncode}"
        )
    return completed.stdout.splitlines()[0] if completed.stdout else str(out_dir)


def reports_in(source: Path, out_dir: Path):
    """``(report, folder)`` pairs: one report into OUT_DIR, or a folder's into OUT_DIR/<name>."""
    if source.is_dir():
        reports = sorted(p for p in source.iterdir() if p.suffix == ".json" and p.is_file())
        if not reports:
            raise GraphReportError(f"{str(source)!r} holds no *.json report files")
        return [(report, out_dir / report.stem) for report in reports]
    return [(source, out_dir)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ttnn.graph_report",
        description="Import graph-capture reports into the folder ttnn-visualizer opens.",
    )
    parser.add_argument("report", type=Path, help="a report .json file, or a folder of them")
    parser.add_argument("out_dir", type=Path, help="the folder to create (must not exist or be empty)")
    parser.add_argument("--svg", action="store_true", help="also draw the call graph as call_graph.svg")
    parser.add_argument("--replace", action="store_true", help="overwrite OUT_DIR if it holds something")
    args = parser.parse_args(argv)
    try:
        for report, folder in reports_in(args.report, args.out_dir):
            print(import_report(report, folder, svg=args.svg, replace=args.replace))
    except GraphReportError as error:
        message = str(error)
        print(message if message.startswith("error: ") else f"error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
