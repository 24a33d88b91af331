//! One capture's state: chip events (allocations, launches) arrive as they happen and mesh
//! functions open and close frames around them; a frame becomes nodes when it closes at the top
//! level, in the order and with the connections TT-NN's graph processor gives them.
//!
//! A mesh buffer is one set of per-chip allocations at the same address: the first chip's
//! allocation makes the `buffer` / `buffer_allocate` nodes, the others join it (TT-NN allocates
//! a mesh buffer once). The chips a buffer lives on are kept beside the graph for per-chip peaks.

mod params;
pub(crate) use params::PagesOf;
use params::*;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde_json::{json, Map, Value};
use ttmesh_chip::allocator::{AllocatorEvent, AllocatorEventKind};
use ttmesh_chip::observe::LaunchEvent;
use ttmesh_chip::BufferType;

use super::ttnn_ops::{device_op, device_op_of, factory_index, DeviceOp, ProgramL1};
use super::{describe, Graph, Node, RunMode, ScratchEvent, TensorInfo};

/// A launch as the graph needs it.
#[derive(Clone, Debug)]
pub(crate) struct LaunchRec {
    pub chip: u32,
    pub cq: u8,
    pub name: &'static str,
    pub cache_hit: bool,
    /// The chip's id of the program launched.
    pub program: u32,
    pub cbs: Vec<u64>,
    pub grid: (u32, u32),
    /// The worker cores the program runs on.
    pub cores: u32,
    /// Per operand: sharded, and its shape.
    pub sharded: Vec<bool>,
    pub shapes: Vec<Vec<usize>>,
    /// Per operand: bytes it spans in each bank (a shard's bytes per core when sharded).
    pub per_bank: Vec<u64>,
    /// The first operand is row-major.
    pub row_major: bool,
}

impl LaunchRec {
    /// The program's per-core buffer for each operand: (bytes per core, bound to the operand's
    /// own L1). A sharded operand's buffer is its shard (TT-NN binds the circular buffer to the
    /// tensor's memory: `globally_allocated` / `borrows_memory`); any other operand streams
    /// through two pages.
    fn operand_buffers(&self) -> Vec<(u64, bool)> {
        self.cbs
            .iter()
            .enumerate()
            .map(|(i, two_pages)| match self.sharded.get(i) {
                Some(true) => (self.per_bank.get(i).copied().unwrap_or(*two_pages), true),
                _ => (*two_pages, false),
            })
            .collect()
    }

    pub fn from_event(l: &LaunchEvent<'_>) -> LaunchRec {
        let operands = &l.program.operands;
        LaunchRec {
            chip: l.chip,
            cq: l.cq.0,
            name: l.name,
            cache_hit: l.program_cache_hit,
            program: l.program.id,
            // Double-buffered circular buffers: two pages per operand.
            cbs: l.page_sizes.iter().map(|p| 2 * p).collect(),
            grid: l.compute_grid,
            cores: l.program.split.cores,
            sharded: operands
                .iter()
                .map(|o| o.spec.memory_config.is_sharded())
                .collect(),
            shapes: operands.iter().map(|o| o.spec.shape.clone()).collect(),
            per_bank: operands.iter().map(|o| o.per_bank_size).collect(),
            row_major: operands
                .first()
                .is_some_and(|o| o.spec.layout == ttmesh_chip::Layout::RowMajor),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum FrameKind {
    /// A device operation; named after its launches unless a name is given.
    DeviceOp(Option<&'static str>),
    /// `tt::tt_metal::create_device_tensor`.
    CreateDeviceTensor,
}

#[derive(Debug)]
enum Item {
    Alloc(usize),
    Dealloc(usize),
    Launch(LaunchRec),
    Child(Frame),
    Error(String, String),
}

/// The op a node is emitted in.
struct OpenFrame<'a> {
    /// Its function_start node.
    start: usize,
    /// The device operation it is, when it is one.
    op: Option<&'static DeviceOp>,
    /// No launch of it has shown its program-scope L1 yet.
    first_launch: bool,
    /// Its own launches (not its children's), in order.
    launches: &'a [LaunchRec],
    /// Its outputs (tensor, buffer).
    outputs: &'a [(TensorInfo, usize)],
    /// Buffers it allocates and frees that TT-NN's operation does not: kept beside the graph.
    scratch: &'a [usize],
}

#[derive(Debug)]
pub(crate) struct Frame {
    kind: FrameKind,
    inputs: Vec<(TensorInfo, usize)>,
    outputs: Vec<(TensorInfo, usize)>,
    arguments: Vec<String>,
    stack_trace: Option<Vec<String>>,
    items: Vec<Item>,
    start: Instant,
    duration_ns: u64,
}

#[derive(Clone, Debug)]
struct BufferRec {
    node: Option<usize>,
    buffer_type: BufferType,
    address: u64,
    size: u64,
    per_bank: u64,
    page_size: u64,
    num_banks: u32,
    sharded: bool,
    chips: Vec<u32>,
    live: Vec<u32>,
    /// Allocated during a NO_DISPATCH capture: reported at address 0, as TT-NN does.
    zero: bool,
}

pub(crate) struct Capture {
    pub mode: RunMode,
    start: Instant,
    nodes: Vec<Node>,
    /// Open function_start nodes (capture_start at the bottom).
    stack: Vec<usize>,
    frames: Vec<Frame>,
    buffers: Vec<BufferRec>,
    live: HashMap<(BufferType, u64), Vec<usize>>,
    last_finished: Option<usize>,
    sub_device_manager: bool,
    runtime_id: u64,
    pub buffer_chips: HashMap<usize, Vec<u32>>,
    pub buffer_pages: Vec<Value>,
    pub with_pages: bool,
    scratch: Vec<ScratchEvent>,
    /// (chip, program) built during this NO_DISPATCH capture.
    built_here: HashSet<(u32, u32)>,
}

/// Process-wide count of program executions (TT-NN's global_call_count).
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(4096);

impl Capture {
    pub fn new(mode: RunMode, with_pages: bool) -> Capture {
        let mut c = Capture {
            mode,
            start: Instant::now(),
            nodes: Vec::new(),
            stack: vec![0],
            frames: Vec::new(),
            buffers: Vec::new(),
            live: HashMap::new(),
            last_finished: None,
            sub_device_manager: false,
            runtime_id: 0,
            buffer_chips: HashMap::new(),
            buffer_pages: Vec::new(),
            with_pages,
            scratch: Vec::new(),
            built_here: HashSet::new(),
        };
        c.push("capture_start", None, 0);
        c
    }

    fn push(&mut self, node_type: &str, params: Option<Map<String, Value>>, level: usize) -> usize {
        let counter = self.nodes.len();
        self.nodes.push(Node {
            arguments: Vec::new(),
            connections: Vec::new(),
            counter,
            input_tensors: Vec::new(),
            node_type: node_type.into(),
            params: params.map(Value::Object).unwrap_or(Value::Null),
            stacking_level: level,
            duration_ns: None,
            stack_trace: None,
        });
        counter
    }

    /// A node under the innermost open function (or the capture).
    fn child(&mut self, node_type: &str, params: Map<String, Value>) -> usize {
        let level = self.stack.len() - 1;
        let n = self.push(node_type, Some(params), level);
        let parent = *self.stack.last().unwrap_or(&0);
        self.nodes[parent].connections.push(n);
        n
    }

    // ---- events ----

    pub fn allocator_event(&mut self, e: &AllocatorEvent) {
        let key = (e.buffer_type, e.address);
        match e.kind {
            AllocatorEventKind::Allocate => {
                let list = self.live.entry(key).or_default();
                let joined = list.iter().copied().find(|&i| {
                    let b = &self.buffers[i];
                    b.size == e.size && !b.chips.contains(&e.chip)
                });
                if let Some(i) = joined {
                    self.buffers[i].chips.push(e.chip);
                    self.buffers[i].live.push(e.chip);
                    return;
                }
                let idx = self.buffers.len();
                self.buffers.push(BufferRec {
                    node: None,
                    buffer_type: e.buffer_type,
                    address: e.address,
                    size: e.size,
                    per_bank: e.per_bank_size,
                    page_size: e.page_size,
                    num_banks: e.num_banks,
                    sharded: e.sharded,
                    chips: vec![e.chip],
                    live: vec![e.chip],
                    zero: self.mode == RunMode::NoDispatch,
                });
                list.push(idx);
                self.item(Item::Alloc(idx));
            }
            AllocatorEventKind::Deallocate => {
                let Some(list) = self.live.get_mut(&key) else {
                    return;
                };
                let Some(pos) = list
                    .iter()
                    .position(|&i| self.buffers[i].live.contains(&e.chip))
                else {
                    return;
                };
                let idx = list[pos];
                let b = &mut self.buffers[idx];
                b.live.retain(|c| *c != e.chip);
                if b.live.is_empty() {
                    list.remove(pos);
                    if list.is_empty() {
                        self.live.remove(&key);
                    }
                    self.item(Item::Dealloc(idx));
                }
            }
        }
    }

    pub fn launch(&mut self, mut l: LaunchRec) {
        // TT-NN does not keep programs it builds under NO_DISPATCH (their buffer addresses are
        // 0): one built during this capture misses again each time it comes back.
        if self.mode == RunMode::NoDispatch {
            let program = (l.chip, l.program);
            if !l.cache_hit {
                self.built_here.insert(program);
            } else if self.built_here.contains(&program) {
                l.cache_hit = false;
            }
        }
        self.item(Item::Launch(l));
    }

    pub fn error(&mut self, operation: &str, message: &str) {
        self.item(Item::Error(operation.into(), message.into()));
    }

    fn item(&mut self, item: Item) {
        match self.frames.last_mut() {
            Some(f) => f.items.push(item),
            None => self.emit_item(item, None),
        }
    }

    /// The live buffer holding `t` on its first chip; one made up (no allocate node) for a
    /// tensor allocated before the capture began.
    fn buffer_of(&mut self, t: &TensorInfo) -> usize {
        let (chip, address) = t.places.first().copied().unwrap_or((0, 0));
        let key = (t.buffer_type, address);
        if let Some(&i) = self
            .live
            .get(&key)
            .and_then(|l| l.iter().find(|&&i| self.buffers[i].live.contains(&chip)))
        {
            return i;
        }
        let idx = self.buffers.len();
        let chips: Vec<u32> = t.places.iter().map(|p| p.0).collect();
        self.buffers.push(BufferRec {
            node: None,
            buffer_type: t.buffer_type,
            address,
            size: t.size,
            per_bank: 0,
            page_size: t.page_size,
            num_banks: 0,
            sharded: t.sharded,
            chips: chips.clone(),
            live: chips,
            zero: false,
        });
        self.live.entry(key).or_default().push(idx);
        idx
    }

    pub fn begin_frame(
        &mut self,
        kind: FrameKind,
        inputs: &[TensorInfo],
        arguments: Vec<String>,
        stack_trace: Option<Vec<String>>,
    ) {
        let inputs = inputs
            .iter()
            .map(|t| (t.clone(), self.buffer_of(t)))
            .collect();
        self.frames.push(Frame {
            kind,
            inputs,
            outputs: Vec::new(),
            arguments,
            stack_trace,
            items: Vec::new(),
            start: Instant::now(),
            duration_ns: 0,
        });
    }

    /// Closes the innermost frame; `error` adds an error node inside it.
    pub fn end_frame(&mut self, outputs: &[TensorInfo], error: Option<(&str, String)>) {
        let outs: Vec<(TensorInfo, usize)> = outputs
            .iter()
            .map(|t| (t.clone(), self.buffer_of(t)))
            .collect();
        let Some(mut f) = self.frames.pop() else {
            return;
        };
        f.outputs = outs;
        f.duration_ns = f.start.elapsed().as_nanos() as u64;
        if let Some((op, msg)) = error {
            f.items.push(Item::Error(op.into(), msg));
        }
        match self.frames.last_mut() {
            Some(parent) => parent.items.push(Item::Child(f)),
            None => self.emit_frame(f),
        }
    }

    /// Ends the capture: open frames are closed (a failure left them open), capture_end added.
    pub fn finish(mut self) -> Graph {
        while !self.frames.is_empty() {
            self.end_frame(&[], None);
        }
        let end = self.push("capture_end", None, 0);
        self.nodes[end].duration_ns = Some(self.start.elapsed().as_nanos() as u64);
        if let Some(lf) = self.last_finished.take() {
            self.nodes[lf].connections.push(end);
        }
        for b in &self.buffers {
            if let Some(chips) = b.node.and_then(|n| self.buffer_chips.get_mut(&n)) {
                chips.clone_from(&b.chips);
            }
        }
        Graph {
            nodes: self.nodes,
            buffer_chips: self.buffer_chips,
            buffer_pages: self.buffer_pages,
            scratch: self.scratch,
        }
    }

    // ---- nodes ----

    fn emit_item(&mut self, item: Item, frame: Option<&mut OpenFrame<'_>>) {
        match item {
            Item::Alloc(b) | Item::Dealloc(b)
                if frame.as_ref().is_some_and(|f| f.scratch.contains(&b)) =>
            {
                let operation = frame.and_then(|f| f.op).map_or("", |o| o.name);
                self.scratch_event(b, matches!(item, Item::Alloc(_)), operation);
            }
            Item::Alloc(b) => match frame {
                Some(OpenFrame { outputs, .. }) => {
                    // An allocation inside an op: TT-NN shows it under create_device_tensor,
                    // with the op's output tensor that lives in it.
                    let outs: Vec<(TensorInfo, usize)> =
                        outputs.iter().filter(|o| o.1 == b).cloned().collect();
                    // A buffer no output lives in (scratch) has no tensor to describe.
                    let arguments = outs
                        .first()
                        .map_or_else(Vec::new, |(t, _)| t.creation_arguments());
                    self.emit_frame(Frame {
                        kind: FrameKind::CreateDeviceTensor,
                        inputs: Vec::new(),
                        outputs: outs,
                        arguments,
                        stack_trace: None,
                        items: vec![Item::Alloc(b)],
                        start: Instant::now(),
                        duration_ns: 0,
                    });
                }
                None => self.buffer_allocate(b),
            },
            Item::Dealloc(b) => {
                let node = self.buffer_node(b);
                let rec = &self.buffers[b];
                let params = buffer_params(rec, false);
                let n = self.child("buffer_deallocate", params);
                self.nodes[n].connections.push(node);
            }
            Item::Launch(l) => {
                // TT-NN tracks every program of a mesh workload before it enqueues the
                // workload: the program-scope nodes of all of them come first, then the
                // executions. A workload of one program over the mesh has one set.
                if let Some(f) = frame {
                    if std::mem::replace(&mut f.first_launch, false) {
                        let programs = if f.op.is_some_and(|o| o.program_per_chip) {
                            f.launches
                        } else {
                            &f.launches[..f.launches.len().min(1)]
                        };
                        for program in programs {
                            self.program_l1(f.start, f.op, program);
                        }
                    }
                }
                if self.mode == RunMode::Normal {
                    let ranges = format!(
                        "[{{\"end\":{{\"x\":{},\"y\":{}}},\"start\":{{\"x\":0,\"y\":0}}}}]",
                        l.grid.0 - 1,
                        l.grid.1 - 1
                    );
                    if !std::mem::replace(&mut self.sub_device_manager, true) {
                        let mut p = Map::new();
                        p.insert("device_id".into(), json!(0));
                        p.insert("sub_device_manager_id".into(), json!(0));
                        p.insert(
                            "sub_devices".into(),
                            json!(format!(
                                "[{{\"sub_device_id\":0,\"worker_core_ranges\":{ranges}}}]"
                            )),
                        );
                        self.child("sub_device_manager", p);
                    }
                    let mut p = Map::new();
                    p.insert("command_queue_id".into(), json!(l.cq));
                    p.insert("device_id".into(), json!(0));
                    p.insert(
                        "global_call_count".into(),
                        json!(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
                    );
                    p.insert("physical_device_id".into(), json!(l.chip));
                    p.insert("runtime_id".into(), json!(self.runtime_id));
                    p.insert("sub_device_id".into(), json!(0));
                    p.insert("sub_device_manager_id".into(), json!(0));
                    p.insert("worker_core_ranges".into(), json!(ranges));
                    self.child("program_execution", p);
                }
            }
            Item::Child(f) => self.emit_frame(f),
            Item::Error(op, msg) => {
                let mut p = Map::new();
                p.insert("error_message".into(), json!(msg));
                p.insert("error_operation".into(), json!(op));
                p.insert("error_type".into(), json!("exception"));
                self.child("error", p);
            }
        }
    }

    /// A program's L1 scope: TT-NN releases the previous program's circular buffers before
    /// each program (`circular_buffer_deallocate_all`), then, when the program allocates (under
    /// NO_DISPATCH, or on a program cache miss), shows its own per-core buffers.
    fn program_l1(&mut self, start: usize, op: Option<&DeviceOp>, l: &LaunchRec) {
        let mut p = Map::new();
        p.insert("device_id".into(), json!(0));
        let n = self.child("circular_buffer_deallocate_all", p);
        self.nodes[n].connections.push(start);
        if self.mode == RunMode::Normal && l.cache_hit {
            return;
        }
        let whole_grid = core_range_set(l.grid.0 * l.grid.1, l.grid);
        let used_cores = core_range_set(l.cores, l.grid);
        let buffer = |size: u64, cores: &str, flag: (&str, &str)| {
            let mut p = Map::new();
            p.insert("address".into(), json!(0));
            p.insert(flag.0.into(), json!(flag.1));
            p.insert("core_range_set".into(), json!(cores));
            p.insert("device_id".into(), json!(0));
            p.insert("size".into(), json!(size));
            p
        };
        match op.map_or(ProgramL1::CircularBuffers, |o| o.l1) {
            ProgramL1::CircularBuffers => {
                for (size, bound) in l.operand_buffers() {
                    let p = buffer(size, &whole_grid, ("globally_allocated", flag(bound)));
                    self.child("circular_buffer_allocate", p);
                }
            }
            // tt-metal reports dataflow buffers only for a program that never runs (NO_DISPATCH);
            // a running one has no allocation-time hook for them.
            ProgramL1::DataflowBuffers if self.mode == RunMode::NoDispatch => {
                for (size, bound) in l.operand_buffers() {
                    let p = buffer(size, &used_cores, ("borrows_memory", flag(bound)));
                    self.child("dataflow_buffer_allocate", p);
                }
            }
            ProgramL1::DataflowBuffers => {}
            ProgramL1::OnePacketBuffer => {
                let size = l.cbs.first().copied().unwrap_or(0);
                let p = buffer(size, &used_cores, ("globally_allocated", "0"));
                self.child("circular_buffer_allocate", p);
            }
        }
    }

    /// A scratch buffer's allocation or release, kept beside the nodes (see `ScratchEvent`).
    fn scratch_event(&mut self, b: usize, allocate: bool, operation: &str) {
        let rec = &self.buffers[b];
        self.scratch.push(ScratchEvent {
            at: self.nodes.len(),
            allocate,
            operation: operation.to_string(),
            buffer_type: rec.buffer_type as u8,
            size: rec.size,
            max_size_per_bank: rec.per_bank,
            chips: rec.chips.clone(),
        });
    }

    fn buffer_allocate(&mut self, b: usize) {
        let node = self.buffer_node(b);
        let rec = self.buffers[b].clone();
        let mut params = buffer_params(&rec, true);
        params.insert(
            "address".into(),
            json!(if rec.zero { 0 } else { rec.address }),
        );
        params.insert("max_size_per_bank".into(), json!(rec.per_bank));
        params.insert(
            "num_cores".into(),
            json!(if rec.sharded { rec.num_banks } else { 0 }),
        );
        params.insert("page_size".into(), json!(rec.page_size));
        let n = self.child("buffer_allocate", params);
        self.nodes[n].connections.push(node);
        // The chips are filled in at the end: the others join after this node is made.
        self.buffer_chips.insert(node, Vec::new());
        if self.with_pages && rec.buffer_type == BufferType::L1 && !rec.sharded {
            super::report::record_pages(&mut self.buffer_pages, &rec_view(&rec));
        }
    }

    /// The buffer node of a buffer, made when first needed.
    fn buffer_node(&mut self, b: usize) -> usize {
        if let Some(n) = self.buffers[b].node {
            return n;
        }
        let params = buffer_params(&self.buffers[b].clone(), false);
        let n = self.child("buffer", params);
        self.buffers[b].node = Some(n);
        n
    }

    fn tensor_node(&mut self, t: &TensorInfo, b: usize) -> usize {
        let zero = self.buffers[b].zero;
        let level = self.stack.len() - 1;
        let n = self.push("tensor", Some(tensor_params(t, zero)), level);
        let bn = self.buffer_node(b);
        self.nodes[bn].connections.push(n);
        n
    }

    fn emit_frame(&mut self, mut f: Frame) {
        let level = self.stack.len();
        let launch = first_launch(&f.items).cloned();
        // The device operation: named by the chip op that launched, or by the mesh op's own
        // name when nothing launched (it failed first).
        let op = match f.kind {
            FrameKind::CreateDeviceTensor => None,
            FrameKind::DeviceOp(given) => launch
                .as_ref()
                .and_then(device_op_of)
                .or_else(|| given.and_then(device_op)),
        };
        let name = match (&f.kind, op) {
            (FrameKind::CreateDeviceTensor, _) => "tt::tt_metal::create_device_tensor".to_string(),
            (_, Some(op)) => op.name.to_string(),
            (FrameKind::DeviceOp(Some(n)), None) => n.to_string(),
            (FrameKind::DeviceOp(None), None) => launch
                .as_ref()
                .map(|l| format!("{}DeviceOperation", l.name))
                .unwrap_or_else(|| "ttnn::operation".into()),
        };
        let mut params = Map::new();
        // TT-NN counts a device operation's two arguments (attributes, tensor args) and
        // create_device_tensor's five.
        let inputs = match f.kind {
            FrameKind::CreateDeviceTensor => 5,
            FrameKind::DeviceOp(_) => 2,
        };
        params.insert("inputs".into(), json!(inputs.to_string()));
        params.insert("name".into(), json!(name));
        if let Some(op) = op {
            params.insert(
                "program_cache_hit".into(),
                json!(launch.as_ref().is_some_and(|l| l.cache_hit)),
            );
            let index = launch.as_ref().map_or(0, |l| factory_index(op, l));
            params.insert("program_factory_index".into(), json!(index));
            params.insert("program_factory_type".into(), json!(op.factories[index]));
            if let Some(first) = f.arguments.first_mut() {
                *first = format!("{}()", op.attributes);
            }
        }
        let start = self.push("function_start", Some(params), level);
        self.nodes[start].arguments = f.arguments;
        self.nodes[start].stack_trace = f.stack_trace;
        let parent = *self.stack.last().unwrap_or(&0);
        self.nodes[parent].connections.push(start);
        if let Some(lf) = self.last_finished.take() {
            self.nodes[lf].connections.push(start);
        }
        self.stack.push(start);
        for (t, b) in &f.inputs {
            let tn = self.tensor_node(t, *b);
            self.nodes[tn].connections.push(start);
            self.nodes[start].input_tensors.push(tn);
        }
        if matches!(f.kind, FrameKind::DeviceOp(_)) {
            self.runtime_id += 1;
        }
        let outputs = f.outputs;
        let is_cdt = matches!(f.kind, FrameKind::CreateDeviceTensor);
        let scratch = if op.is_some() {
            scratch_of(&f.items, &outputs)
        } else {
            Vec::new()
        };
        let launches: Vec<LaunchRec> = f
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Launch(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        let mut open = OpenFrame {
            start,
            op,
            first_launch: true,
            launches: &launches,
            outputs: &outputs,
            scratch: &scratch,
        };
        for item in f.items {
            if is_cdt {
                if let Item::Alloc(b) = item {
                    self.buffer_allocate(b);
                    continue;
                }
            }
            self.emit_item(item, Some(&mut open));
        }
        let mut params = Map::new();
        params.insert("name".into(), json!(name));
        let end = self.push("function_end", Some(params), level);
        self.nodes[end].duration_ns = Some(f.duration_ns);
        self.nodes[start].connections.push(end);
        // An op's outputs appear once more at its end (the create_device_tensor inside already
        // showed those it allocated); a create_device_tensor shows its own.
        for (t, b) in &outputs {
            let tn = self.tensor_node(t, *b);
            self.nodes[end].connections.push(tn);
        }
        self.stack.pop();
        self.last_finished = Some(end);
    }
}

fn first_launch(items: &[Item]) -> Option<&LaunchRec> {
    items.iter().find_map(|i| match i {
        Item::Launch(l) => Some(l),
        Item::Child(f) => first_launch(&f.items),
        _ => None,
    })
}

/// The buffers a device operation allocates and frees itself without returning them: TT-NN's
/// device operations allocate only their outputs (their working memory is circular buffers).
fn scratch_of(items: &[Item], outputs: &[(TensorInfo, usize)]) -> Vec<usize> {
    let freed = |b: usize| {
        items
            .iter()
            .any(|i| matches!(i, Item::Dealloc(d) if *d == b))
    };
    items
        .iter()
        .filter_map(|i| match i {
            Item::Alloc(b) if freed(*b) && !outputs.iter().any(|o| o.1 == *b) => Some(*b),
            _ => None,
        })
        .collect()
}
