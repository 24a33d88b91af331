"""``python -m ttnn.graph_report [--svg] REPORT OUT_DIR`` on ttmesh, as seed 002 writes it.

Turns graph-capture reports (``ttnn.graph.end_graph_capture_to_file``) into the folder
ttnn-visualizer opens: ``db.sqlite``, ``config.json``, ``cluster_descriptor.yaml`` and, with
``--svg``, ``call_graph.svg``. One report is ``ttmesh.ttnn.graph_report.import_report`` (the
native binding of ttmesh-report); this front adds the seed's other form, a folder of reports
(each ``*.json`` into ``OUT_DIR/<name>/``), and makes OUT_DIR's parents as TT-NN's importer does.

Under ``python -m ttmesh``, ``-m ttnn.graph_report`` runs this module; it also runs as
``python -m ttmesh.graph_report_cli``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class GraphReportError(RuntimeError):
    """An import that could not run; the message names what is missing and the fix."""


def import_report(report: Path, out_dir: Path, svg: bool = False, replace: bool = False) -> str:
    """Import one report; returns the summary line."""
    from ttmesh.ttnn.graph_report import (
        import_report as import_one,  # loads the native module
    )

    if not report.is_file():
        raise GraphReportError(
            f"report {str(report)!r} does not exist: pass the file end_graph_capture_to_file wrote"
        )
    # TT-NN's importer makes the database folder wherever it is asked; ttmesh makes OUT_DIR.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        summary = import_one(report, out_dir, svg=svg, replace=replace)
    except (RuntimeError, ValueError) as error:
        raise GraphReportError(str(error)) from error
    return (
        f"{summary['out_dir']}: {summary['operations']} operations, {summary['tensors']} tensors, "
        f"{summary['errors']} errors; wrote {', '.join(summary['files'])}"
    )


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
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
