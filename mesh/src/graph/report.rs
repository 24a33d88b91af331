//! The report file TT-NN's `end_graph_capture_to_file` writes: version, graph, devices,
//! metadata, cluster_descriptor, buffer_pages. Written to a temporary file and renamed, so a
//! failure leaves nothing half-written.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::recorder::PagesOf;
use super::{end_graph_capture, Graph, Node, ScratchEvent};
use crate::error::{MeshError, Result};
use crate::MeshDevice;

/// The report format this build writes and reads.
pub const REPORT_VERSION: u64 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub version: u64,
    pub graph: Vec<Node>,
    pub devices: Vec<Value>,
    pub metadata: Value,
    pub cluster_descriptor: Value,
    #[serde(default)]
    pub buffer_pages: Vec<Value>,
    /// ttmesh's addition: the chips each buffer node's buffer lives on.
    #[serde(default)]
    pub buffer_devices: std::collections::BTreeMap<usize, Vec<u32>>,
    /// ttmesh's addition: allocations TT-NN's graph has no node for (see `ScratchEvent`).
    #[serde(default)]
    pub scratch: Vec<ScratchEvent>,
}

impl Report {
    pub fn graph(&self) -> Graph {
        Graph {
            nodes: self.graph.clone(),
            buffer_chips: self.buffer_devices.clone().into_iter().collect(),
            buffer_pages: self.buffer_pages.clone(),
            scratch: self.scratch.clone(),
        }
    }
}

/// The devices of a mesh as TT-NN's report lists them (one entry per chip).
fn devices(mesh: &MeshDevice) -> Vec<Value> {
    let arch = mesh.arch();
    let (cx, cy) = arch.compute_grid;
    let (tx, ty) = arch.tensix_grid;
    let l1_bank = arch.l1_size_per_core - arch.l1_reserved_base;
    mesh.chips()
        .iter()
        .map(|c| {
            json!({
                "device_id": c.id(),
                "arch": arch.name,
                "num_y_cores": ty, "num_x_cores": tx,
                "num_y_compute_cores": cy, "num_x_compute_cores": cx,
                "worker_l1_size": arch.l1_size_per_core,
                "l1_num_banks": cx * cy,
                "l1_bank_size": l1_bank,
                "address_at_first_l1_bank": arch.l1_reserved_base,
                "address_at_first_l1_cb_buffer": arch.l1_reserved_base,
                "num_banks_per_storage_core": 0,
                "num_compute_cores": cx * cy,
                "num_storage_cores": 0,
                "total_l1_memory": arch.l1_size_per_core * (cx * cy) as u64,
                "total_l1_for_tensors": l1_bank * (cx * cy) as u64,
                "total_l1_for_interleaved_buffers": l1_bank * (cx * cy) as u64,
                "total_l1_for_sharded_buffers": l1_bank * (cx * cy) as u64,
                "cb_limit": l1_bank,
                "num_dram_banks": arch.num_dram_banks,
                "dram_bank_size": arch.dram_bank_size,
            })
        })
        .collect()
}

/// The cluster as a cluster_descriptor (chips, their mesh coordinates, ethernet links).
fn cluster_descriptor(mesh: &MeshDevice) -> Value {
    let cluster = mesh.cluster();
    let chips: Vec<Value> = mesh
        .chips()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let co = mesh.coord_of_index(i);
            json!({"chip": c.id(), "row": co.row, "col": co.col})
        })
        .collect();
    let links: Vec<Value> = cluster
        .links()
        .iter()
        .map(|l| json!([[l.a.0, l.a.1], [l.b.0, l.b.1]]))
        .collect();
    json!({
        "name": cluster.name(),
        "arch": mesh.arch().name,
        "mesh_shape": [mesh.shape().rows, mesh.shape().cols],
        "chips": chips,
        "ethernet_connections": links,
    })
}

/// Ends the innermost capture and writes its report to `path` (TT-NN's
/// `end_graph_capture_to_file`); `mesh` supplies the devices and the cluster descriptor.
/// The capture ends even when the file cannot be written.
pub fn end_graph_capture_to_file(path: impl AsRef<Path>, mesh: &MeshDevice) -> Result<Graph> {
    let graph = end_graph_capture()?;
    write_report(path.as_ref(), &graph, Some(mesh))?;
    Ok(graph)
}

/// Writes `graph` as a report file.
pub fn write_report(path: &Path, graph: &Graph, mesh: Option<&MeshDevice>) -> Result<()> {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let report = Report {
        version: REPORT_VERSION,
        graph: graph.nodes.clone(),
        devices: mesh.map(devices).unwrap_or_default(),
        metadata: json!({
            "capture_timestamp": since_epoch,
            "producer": format!("ttmesh {}", env!("CARGO_PKG_VERSION")),
        }),
        cluster_descriptor: mesh.map(cluster_descriptor).unwrap_or(Value::Null),
        buffer_pages: graph.buffer_pages.clone(),
        buffer_devices: graph.buffer_chips.clone().into_iter().collect(),
        scratch: graph.scratch.clone(),
    };
    let text = serde_json::to_string_pretty(&report).map_err(|e| MeshError::ReportFormat {
        path: path.into(),
        detail: e.to_string(),
    })?;
    write_atomically(path, text.as_bytes())
}

/// Writes through a temporary file beside `path`, then renames it into place.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| MeshError::ReportIo {
        path: path.into(),
        source,
    };
    let name = path
        .file_name()
        .ok_or_else(|| MeshError::ReportFormat {
            path: path.into(),
            detail: "is not a file name; give a path such as report.json".into(),
        })?
        .to_string_lossy()
        .to_string();
    let tmp: PathBuf = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// Reads a report file, refusing other versions and anything that is not one.
pub fn read_report(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).map_err(|source| MeshError::ReportIo {
        path: path.into(),
        source,
    })?;
    let bad = |detail: String| MeshError::ReportFormat {
        path: path.into(),
        detail,
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "is not valid JSON ({e}); pass a file written by end_graph_capture_to_file"
        ))
    })?;
    match v.get("version").and_then(Value::as_u64) {
        Some(REPORT_VERSION) => {}
        Some(other) => {
            return Err(bad(format!(
                "is report version {other}, but this ttmesh reads version {REPORT_VERSION}; capture it again with this ttmesh"
            )))
        }
        None => {
            return Err(bad(
                "has no \"version\": it is not a graph report; pass a file written by end_graph_capture_to_file".into(),
            ))
        }
    }
    let report: Report =
        serde_json::from_value(v).map_err(|e| bad(format!("is not a well-formed report ({e})")))?;
    for (i, n) in report.graph.iter().enumerate() {
        if n.counter != i
            || n.connections
                .iter()
                .chain(&n.input_tensors)
                .any(|&c| c >= report.graph.len())
        {
            return Err(bad(format!(
                "node {i} has counter {} or a connection outside the graph; the file is damaged",
                n.counter
            )));
        }
    }
    Ok(report)
}

/// Adds one entry per page of an interleaved L1 buffer (core, bank, page address).
pub(crate) fn record_pages(out: &mut Vec<Value>, b: &PagesOf) {
    if b.num_banks == 0 || b.page_size == 0 {
        return;
    }
    let pages = b.size / b.page_size;
    let per_bank_pages = pages.div_ceil(b.num_banks as u64).max(1);
    let stride = b.per_bank / per_bank_pages;
    let grid_x = 8u64;
    for p in 0..pages {
        let bank = p % b.num_banks as u64;
        out.push(json!({
            "device_id": b.device_id,
            "address": b.address,
            "core_x": bank % grid_x,
            "core_y": bank / grid_x,
            "bank_id": bank,
            "page_index": p,
            "page_address": b.address + (p / b.num_banks as u64) * stride,
            "page_size": b.page_size,
            "buffer_type": b.buffer_type as u8,
        }));
    }
}
