//! What TT-NN users compute from a graph: op durations, peak memory, the levelized graph.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use ttmesh_chip::BufferType;

use super::{Graph, Node, ScratchEvent};

/// `(op name, wall-clock ns)` for every function_end that carries a duration, in order.
pub fn op_durations(graph: &Graph) -> Vec<(String, u64)> {
    graph
        .nodes
        .iter()
        .filter(|n| n.node_type == "function_end")
        .filter_map(|n| Some((n.param("name")?, n.duration_ns?)))
        .collect()
}

/// Peak bytes per bank of each buffer type on one chip, over the capture (from the level at
/// which the capture began).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakMemory {
    pub dram: u64,
    pub l1: u64,
    pub l1_small: u64,
    pub trace: u64,
}

impl PeakMemory {
    pub fn get(&self, t: BufferType) -> u64 {
        match t {
            BufferType::Dram => self.dram,
            BufferType::L1 => self.l1,
            BufferType::L1Small => self.l1_small,
            BufferType::Trace => self.trace,
            BufferType::SystemMemory => 0,
        }
    }
    fn slot(&mut self, t: BufferType) -> Option<&mut u64> {
        match t {
            BufferType::Dram => Some(&mut self.dram),
            BufferType::L1 => Some(&mut self.l1),
            BufferType::L1Small => Some(&mut self.l1_small),
            BufferType::Trace => Some(&mut self.trace),
            BufferType::SystemMemory => None,
        }
    }
}

/// Seed 002's `get_peak_memory`: the largest sum of live buffer sizes (bytes, all types)
/// reached by the buffer_allocate / buffer_deallocate nodes, as the graph shows them.
pub fn peak_memory(graph: &Graph) -> u64 {
    let mut total: i128 = 0;
    let mut peak: i128 = 0;
    walk(graph, |event| {
        match event {
            Event::Node(n) if n.node_type == "buffer_allocate" => {
                total += n.param_u64("size").unwrap_or(0) as i128;
            }
            Event::Node(n) if n.node_type == "buffer_deallocate" => {
                if let Some(b) = n.connections.first().and_then(|&b| graph.nodes.get(b)) {
                    total -= b.param_u64("size").unwrap_or(0) as i128;
                }
            }
            Event::Node(_) => {}
            Event::Scratch(s) if s.allocate => total += s.size as i128,
            Event::Scratch(s) => total -= s.size as i128,
        }
        peak = peak.max(total);
    });
    peak.max(0) as u64
}

/// What the memory walks see, in the order it happened: the graph's nodes, and the scratch kept
/// beside them (each just before the node it is recorded at).
enum Event<'a> {
    Node(&'a Node),
    Scratch(&'a ScratchEvent),
}

fn walk<'a>(graph: &'a Graph, mut f: impl FnMut(Event<'a>)) {
    let mut scratch = graph.scratch.iter().peekable();
    for (i, n) in graph.nodes.iter().enumerate() {
        while let Some(s) = scratch.next_if(|s| s.at <= i) {
            f(Event::Scratch(s));
        }
        f(Event::Node(n));
    }
    scratch.for_each(|s| f(Event::Scratch(s)));
}

/// Peak bytes per bank of each buffer type, per chip, from the graph's buffer_allocate /
/// buffer_deallocate nodes (with the chips each buffer lives on) and the scratch beside them.
pub fn peak_memory_per_chip(graph: &Graph) -> BTreeMap<u32, PeakMemory> {
    let mut live: BTreeMap<u32, PeakMemory> = BTreeMap::new();
    let mut peak: BTreeMap<u32, PeakMemory> = BTreeMap::new();
    // Buffer node -> (type, bytes per bank, chips).
    let mut buffers: HashMap<usize, (BufferType, u64, Vec<u32>)> = HashMap::new();
    walk(graph, |event| {
        let (sign, t, per_bank, chips) = match event {
            Event::Scratch(s) => (
                if s.allocate { 1 } else { -1 },
                BufferType::from_u8(s.buffer_type).unwrap_or(BufferType::Dram),
                s.max_size_per_bank,
                s.chips.clone(),
            ),
            Event::Node(n) => {
                let sign = match n.node_type.as_str() {
                    "buffer_allocate" => 1i64,
                    "buffer_deallocate" => -1,
                    _ => return,
                };
                let Some(&b) = n.connections.first() else {
                    return;
                };
                if sign > 0 {
                    let t = n
                        .param_u64("buffer_type")
                        .and_then(|v| BufferType::from_u8(v as u8))
                        .unwrap_or(BufferType::Dram);
                    let per_bank = n.param_u64("max_size_per_bank").unwrap_or(0);
                    let chips = graph
                        .buffer_chips
                        .get(&b)
                        .cloned()
                        .unwrap_or_else(|| vec![n.param_u64("device_id").unwrap_or(0) as u32]);
                    buffers.insert(b, (t, per_bank, chips));
                }
                let Some((t, per_bank, chips)) = buffers.get(&b) else {
                    return;
                };
                (sign, *t, *per_bank, chips.clone())
            }
        };
        for chip in chips {
            let now = live.entry(chip).or_default();
            let Some(v) = now.slot(t) else { continue };
            *v = if sign > 0 {
                *v + per_bank
            } else {
                v.saturating_sub(per_bank)
            };
            let cur = *v;
            let p = peak.entry(chip).or_default();
            if let Some(pv) = p.slot(t) {
                *pv = (*pv).max(cur);
            }
        }
    });
    peak
}

/// One vertex of the levelized graph (TT-NN's LevelizedGraph).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelizedVertex {
    pub counter: usize,
    pub stacking_level: usize,
    /// The op's name, or `tensor[id]` for a tensor no captured op produced.
    pub name: String,
    pub in_edges: Vec<usize>,
    pub out_edges: Vec<usize>,
    pub internals: Vec<usize>,
    pub output_shape: Vec<String>,
    pub arguments: Vec<String>,
}

/// The ops of levels 1..=max_level with their data flow: an edge from the op (or input
/// tensor) that produced each input to the op that consumed it; `internals` lists the next
/// level's ops nested in an op.
pub fn extract_levelized_graph(graph: &Graph, max_level: usize) -> Vec<LevelizedVertex> {
    let mut vertices: Vec<LevelizedVertex> = Vec::new();
    let mut producers: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    let mut tensor_vertices: HashMap<String, usize> = HashMap::new();
    let mut open: Vec<Option<usize>> = Vec::new();
    let tensor_id = |n: &Node| n.param("tensor_id").unwrap_or_default();
    for n in &graph.nodes {
        match n.node_type.as_str() {
            "function_start" => {
                let level = n.stacking_level;
                if level == 0 || level > max_level {
                    open.push(None);
                    continue;
                }
                let v = vertices.len();
                vertices.push(LevelizedVertex {
                    counter: v,
                    stacking_level: level,
                    name: n.param("name").unwrap_or_default(),
                    in_edges: Vec::new(),
                    out_edges: Vec::new(),
                    internals: Vec::new(),
                    output_shape: Vec::new(),
                    arguments: n.arguments.clone(),
                });
                if let Some(Some(parent)) = open.iter().rev().find(|p| p.is_some()) {
                    vertices[*parent].internals.push(v);
                }
                for &t in &n.input_tensors {
                    let Some(tn) = graph.nodes.get(t) else {
                        continue;
                    };
                    let id = tensor_id(tn);
                    let from = producers
                        .get(&id)
                        .and_then(|ps| best_producer(ps, level))
                        .unwrap_or_else(|| {
                            *tensor_vertices.entry(id.clone()).or_insert_with(|| {
                                let tv = vertices.len();
                                vertices.push(LevelizedVertex {
                                    counter: tv,
                                    stacking_level: 1,
                                    name: format!("tensor[{id}]"),
                                    in_edges: Vec::new(),
                                    out_edges: Vec::new(),
                                    internals: Vec::new(),
                                    output_shape: tn.param("shape").into_iter().collect(),
                                    arguments: Vec::new(),
                                });
                                tv
                            })
                        });
                    vertices[v].in_edges.push(from);
                    vertices[from].out_edges.push(v);
                }
                open.push(Some(v));
            }
            "function_end" => {
                let Some(v) = open.pop().flatten() else {
                    continue;
                };
                for &t in &n.connections {
                    let Some(tn) = graph.nodes.get(t).filter(|x| x.node_type == "tensor") else {
                        continue;
                    };
                    vertices[v].output_shape.extend(tn.param("shape"));
                    producers
                        .entry(tensor_id(tn))
                        .or_default()
                        .push((vertices[v].stacking_level, v));
                }
            }
            _ => {}
        }
    }
    vertices
}

/// The latest producer at the consumer's level, else the latest at the nearest level above it
/// (`max_by_key` keeps the last of equal keys).
fn best_producer(ps: &[(usize, usize)], level: usize) -> Option<usize> {
    ps.iter()
        .filter(|(l, _)| *l <= level)
        .max_by_key(|(l, _)| *l)
        .map(|(_, v)| *v)
}
