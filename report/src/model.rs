//! What a report's graph says, in the terms of a TT-NN report database: the operations the
//! user called (level 1 of the graph) with their arguments, durations, input and output
//! tensors and the device operations they ran; every tensor with its per-chip addresses; the
//! buffers alive after each operation; errors. Derived from the graph alone, in node order.

use std::collections::BTreeMap;

use serde_json::Value;
use ttmesh::graph::{Node, Report};

/// One level-1 call, or an error raised outside any call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Operation {
    /// 1-based, in call order (TT-NN's operation ids start at 1 too).
    pub id: u64,
    pub name: String,
    pub duration_ns: Option<u64>,
    pub arguments: Vec<String>,
    /// Tensor ids, in argument order.
    pub inputs: Vec<u64>,
    pub outputs: Vec<u64>,
    /// Graph nodes from the call's function_start to its function_end, inclusive.
    pub nodes: std::ops::Range<usize>,
    /// Device operations it ran (nested function_starts), as (graph node, name).
    pub device_operations: Vec<(usize, String)>,
    pub stack_trace: Option<Vec<String>>,
    pub error: Option<OperationError>,
    /// Buffers alive when the operation ended.
    pub live_buffers: Vec<LiveBuffer>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OperationError {
    pub operation: String,
    pub error_type: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub id: u64,
    pub shape: String,
    pub dtype: String,
    pub layout: String,
    pub memory_config: String,
    /// None for a host tensor.
    pub buffer_type: Option<u64>,
    /// (device id, address) per chip holding it; the first is the tensor's own.
    pub device_addresses: Vec<(u64, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LiveBuffer {
    pub device_id: u64,
    pub address: u64,
    pub max_size_per_bank: u64,
    pub buffer_type: u64,
}

/// Everything the database holds, in the order it is written.
#[derive(Clone, Debug, Default)]
pub struct ReportModel {
    pub operations: Vec<Operation>,
    pub tensors: BTreeMap<u64, Tensor>,
}

fn text(params: &Value, key: &str) -> String {
    match params.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

fn number(params: &Value, key: &str) -> Option<u64> {
    match params.get(key)? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn tensor_of(node: &Node) -> Option<Tensor> {
    let p = &node.params;
    let id = number(p, "tensor_id")?;
    let mut device_addresses = Vec::new();
    if let Some(Value::String(list)) = p.get("device_tensors") {
        if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(list) {
            for it in items {
                if let (Some(d), Some(a)) = (number(&it, "device_id"), number(&it, "address")) {
                    device_addresses.push((d, a));
                }
            }
        }
    }
    if device_addresses.is_empty() {
        if let (Some(d), Some(a)) = (number(p, "device_id"), number(p, "address")) {
            device_addresses.push((d, a));
        }
    }
    Some(Tensor {
        id,
        shape: text(p, "shape"),
        dtype: text(p, "dtype"),
        layout: text(p, "layout"),
        memory_config: text(p, "memory_config"),
        buffer_type: number(p, "buffer_type"),
        device_addresses,
    })
}

fn error_of(node: &Node) -> OperationError {
    OperationError {
        operation: text(&node.params, "error_operation"),
        error_type: text(&node.params, "error_type"),
        message: text(&node.params, "error_message"),
    }
}

/// Walks the graph once, in node order.
pub fn build(report: &Report) -> ReportModel {
    let graph = &report.graph;
    let mut model = ReportModel::default();
    for n in graph.iter().filter(|n| n.node_type == "tensor") {
        if let Some(t) = tensor_of(n) {
            model.tensors.entry(t.id).or_insert(t);
        }
    }
    let tensor_id = |node: usize| graph.get(node).and_then(|n| number(&n.params, "tensor_id"));
    // Buffer node -> the live buffers it stands for (one per chip).
    let mut live: BTreeMap<usize, Vec<LiveBuffer>> = BTreeMap::new();
    let mut open: Option<Operation> = None;
    let mut depth = 0usize;
    for (i, n) in graph.iter().enumerate() {
        match n.node_type.as_str() {
            "function_start" => {
                depth += 1;
                let name = text(&n.params, "name");
                match open.as_mut() {
                    None => {
                        open = Some(Operation {
                            id: model.operations.len() as u64 + 1,
                            name,
                            arguments: n.arguments.clone(),
                            inputs: n
                                .input_tensors
                                .iter()
                                .filter_map(|&t| tensor_id(t))
                                .collect(),
                            nodes: i..i + 1,
                            stack_trace: n.stack_trace.clone(),
                            ..Default::default()
                        });
                        depth = 1;
                    }
                    Some(op) => op.device_operations.push((i, name)),
                }
            }
            "function_end" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    if let Some(mut op) = open.take() {
                        op.duration_ns = n.duration_ns;
                        op.outputs = n.connections.iter().filter_map(|&t| tensor_id(t)).collect();
                        op.nodes = op.nodes.start..i + 1;
                        op.live_buffers = live.values().flatten().copied().collect();
                        op.live_buffers.sort();
                        model.operations.push(op);
                    }
                }
            }
            "buffer_allocate" => {
                let p = &n.params;
                let Some(&buffer) = n.connections.first() else {
                    continue;
                };
                let chips = report
                    .buffer_devices
                    .get(&buffer)
                    .map(|c| c.iter().map(|&c| c as u64).collect())
                    .unwrap_or_else(|| vec![number(p, "device_id").unwrap_or(0)]);
                let per_chip = chips.into_iter().map(|device_id| LiveBuffer {
                    device_id,
                    address: number(p, "address").unwrap_or(0),
                    max_size_per_bank: number(p, "max_size_per_bank").unwrap_or(0),
                    buffer_type: number(p, "buffer_type").unwrap_or(0),
                });
                live.insert(buffer, per_chip.collect());
            }
            "buffer_deallocate" => {
                if let Some(buffer) = n.connections.first() {
                    live.remove(buffer);
                }
            }
            "error" => {
                let error = error_of(n);
                match open.as_mut() {
                    Some(op) => op.error = Some(error),
                    // Raised outside any call (a wait, a trace replay): an operation of its own.
                    None => model.operations.push(Operation {
                        id: model.operations.len() as u64 + 1,
                        name: error.operation.clone(),
                        nodes: i..i + 1,
                        error: Some(error),
                        ..Default::default()
                    }),
                }
            }
            _ => {}
        }
    }
    // A call the capture ended inside (a failure or a timeout): kept, without a duration.
    if let Some(mut op) = open.take() {
        op.nodes = op.nodes.start..graph.len();
        op.live_buffers = live.values().flatten().copied().collect();
        op.live_buffers.sort();
        model.operations.push(op);
    }
    model
}
