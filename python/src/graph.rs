//! `ttnn.graph`: TT-NN's graph capture, built on `ttmesh::graph`. A captured graph stays whole
//! here (with the chips each buffer lives on, for the per-chip peaks); Python sees its nodes as
//! TT-NN's JSON (a list of dicts).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use ttmesh::graph::{self as g, RunMode as RMode};

use crate::device::Device;
use crate::enums::RunMode;
use crate::errors::{chip_work, runtime, value_error};

/// A captured graph.
#[pyclass(module = "ttnn.graph", frozen, name = "CapturedGraph")]
pub struct Graph {
    pub graph: g::Graph,
}

#[pymethods]
impl Graph {
    /// The nodes as TT-NN's JSON text.
    fn to_json(&self) -> String {
        self.graph.to_json().to_string()
    }
    fn __len__(&self) -> usize {
        self.graph.nodes.len()
    }
    /// Seed 002's peak: the largest sum of live buffer bytes (all types) the graph reaches.
    fn peak_memory(&self) -> u64 {
        g::peak_memory(&self.graph)
    }
    /// Per chip id: peak bytes per bank of DRAM, L1, L1_SMALL and TRACE.
    fn peak_memory_per_chip<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (chip, p) in g::peak_memory_per_chip(&self.graph) {
            let d = PyDict::new(py);
            d.set_item("DRAM", p.dram)?;
            d.set_item("L1", p.l1)?;
            d.set_item("L1_SMALL", p.l1_small)?;
            d.set_item("TRACE", p.trace)?;
            out.set_item(chip, d)?;
        }
        Ok(out)
    }
    /// `(op name, ns)` per function_end with a duration.
    fn op_durations(&self) -> Vec<(String, u64)> {
        g::op_durations(&self.graph)
    }
    /// TT-NN's levelized graph (JSON text).
    fn levelized(&self, max_level: usize) -> PyResult<String> {
        serde_json::to_string(&g::extract_levelized_graph(&self.graph, max_level))
            .map_err(|e| runtime(&e))
    }
    /// Writes the report file (`ttmesh report import` and ttnn-visualizer read it); `device`
    /// supplies the devices and the cluster descriptor.
    #[pyo3(signature = (path, device = None))]
    fn write_report(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        device: Option<&Bound<'_, Device>>,
    ) -> PyResult<()> {
        let mesh = device.map(|d| d.get().state.mesh.clone());
        chip_work(py, || g::write_report(&path, &self.graph, mesh.as_ref()))
    }
}

#[pyfunction]
pub fn begin_graph_capture(mode: RunMode) {
    g::begin_graph_capture(match mode {
        RunMode::NORMAL => RMode::Normal,
        RunMode::NO_DISPATCH => RMode::NoDispatch,
    });
}

#[pyfunction]
pub fn end_graph_capture(py: Python<'_>) -> PyResult<Graph> {
    let graph = chip_work(py, g::end_graph_capture)?;
    Ok(Graph { graph })
}

/// A graph from TT-NN's JSON nodes (for the `extract_*` calls given a plain list).
#[pyfunction]
pub fn graph_from_json(text: &str) -> PyResult<Graph> {
    let nodes: Vec<g::Node> = serde_json::from_str(text).map_err(|e| {
        value_error(format!(
            "not a captured graph (a list of TT-NN graph nodes, as ttnn.graph.end_graph_capture returns): {e}"
        ))
    })?;
    Ok(Graph {
        graph: g::Graph {
            nodes,
            ..Default::default()
        },
    })
}

#[pyfunction]
pub fn set_stack_traces(on: bool) {
    if on {
        g::enable_stack_traces()
    } else {
        g::disable_stack_traces()
    }
}

#[pyfunction]
pub fn is_stack_trace_enabled() -> bool {
    g::is_stack_trace_enabled()
}

#[pyfunction]
pub fn set_buffer_pages(on: bool) {
    if on {
        g::enable_buffer_pages()
    } else {
        g::disable_buffer_pages()
    }
}

#[pyfunction]
pub fn is_capturing() -> bool {
    g::is_capturing()
}

#[pyfunction]
pub fn capture_left_open_warning() -> Option<String> {
    g::capture_left_open_warning()
}
