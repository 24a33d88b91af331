"""``python -m ttmesh.ttnn.graph_report REPORT.json OUT_DIR [--svg] [--replace]``: a graph
report (``ttnn.graph.end_graph_capture_to_file``) turned into the folder ttnn-visualizer opens
(db.sqlite, config.json, cluster_descriptor.yaml; call_graph.svg with --svg). The same work as
``ttmesh report import``."""

import argparse
import sys

from ttmesh import _ttmesh as _n


def import_report(report, out_dir, svg=False, replace=False):
    """Writes the visualizer folder; returns a dict of what was written. A corrupt report,
    another version or a non-empty ``out_dir`` (without ``replace``) raises with the reason,
    and nothing is left half-written."""
    operations, tensors, errors, files = _n.import_report(str(report), str(out_dir), bool(svg), bool(replace))
    return {"out_dir": str(out_dir), "operations": operations, "tensors": tensors, "errors": errors, "files": files}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ttmesh.ttnn.graph_report", description=__doc__.split("\n\n")[0])
    p.add_argument("report", help="the report file (end_graph_capture_to_file's)")
    p.add_argument("out_dir", help="the folder to create (must not exist or be empty, unless --replace)")
    p.add_argument("--svg", action="store_true", help="also draw the call graph as OUT_DIR/call_graph.svg")
    p.add_argument("--replace", action="store_true", help="overwrite OUT_DIR if it holds something")
    a = p.parse_args(argv)
    try:
        s = import_report(a.report, a.out_dir, a.svg, a.replace)
    except (RuntimeError, ValueError) as e:
        print(f"graph_report: {e}", file=sys.stderr)
        return 1
    print(f"{s['out_dir']}: {s['operations']} operations, {s['tensors']} tensors, {s['errors']} errors; wrote {', '.join(s['files'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
