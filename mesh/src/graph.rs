//! TT-NN's graph capture: `begin_graph_capture(RunMode)` ... `end_graph_capture()` records which
//! ops ran, the tensors and buffers they used and allocated, the programs each chip executed,
//! and errors, as TT-NN's graph nodes (node types, fields and params keys of TT-NN 0.81.1).
//!
//! Where the data comes from: chips report every allocator event and every program launch
//! through `ttmesh_chip::observe` (the chip does not know who listens); mesh functions open a
//! frame around each op (`device_operation`) and each tensor allocation (`create_device_tensor`),
//! so a mesh op nests its per-chip program executions. Nothing is recounted.
//!
//! `RunMode::NoDispatch` turns the chips' NO_DISPATCH on: buffers are allocated (so peaks and
//! out-of-memory are real) and commands encoded (so trace sizes are exact), but nothing runs,
//! no data is written, and the graph shows address 0 for buffers made during the capture.
//!
//! One capture stack per process: captures nest, each `end_graph_capture` ends the innermost.

mod analysis;
mod describe;
mod plan;
mod recorder;
mod report;
mod ttnn_ops;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ttmesh_chip::allocator::AllocatorEvent;
use ttmesh_chip::observe::{self, ChipObserver, LaunchEvent};
use ttmesh_chip::tensor::TensorSpec;
use ttmesh_chip::{BufferType, DataType, Layout, MemoryConfig};

use crate::error::{MeshError, Result};
use crate::tensor::MeshTensor;
use crate::MeshDevice;
use recorder::{Capture, FrameKind, LaunchRec};

pub use analysis::{
    extract_levelized_graph, op_durations, peak_memory, peak_memory_per_chip, LevelizedVertex,
    PeakMemory,
};
pub use plan::{plan, ChipPlan, Plan, PLANNING_TRACE_REGION};
pub use report::{end_graph_capture_to_file, read_report, write_report, Report, REPORT_VERSION};

/// TT-NN's `ttnn.graph.RunMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunMode {
    /// Everything runs; real addresses.
    Normal,
    /// Nothing runs; memory is accounted and commands encoded.
    NoDispatch,
}

/// One graph node, with TT-NN's fields (`params` values are strings or numbers, as TT-NN
/// writes them; `null` for capture_start / capture_end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub arguments: Vec<String>,
    pub connections: Vec<usize>,
    pub counter: usize,
    pub input_tensors: Vec<usize>,
    pub node_type: String,
    pub params: Value,
    pub stacking_level: usize,
    /// function_end and capture_end: wall-clock nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ns: Option<u64>,
    /// function_start, when stack traces are enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_trace: Option<Vec<String>>,
}

impl Node {
    /// A param as a string (TT-NN writes some as numbers, some as strings).
    pub fn param(&self, key: &str) -> Option<String> {
        match self.params.get(key)? {
            Value::String(s) => Some(s.clone()),
            v => Some(v.to_string()),
        }
    }
    pub fn param_u64(&self, key: &str) -> Option<u64> {
        match self.params.get(key)? {
            Value::String(s) => s.parse().ok(),
            v => v.as_u64(),
        }
    }
}

/// A captured graph: the nodes (`counter` = index), plus what a mesh adds beside TT-NN's
/// format: the chips each buffer lives on (keyed by buffer node), and buffer pages if enabled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub buffer_chips: HashMap<usize, Vec<u32>>,
    pub buffer_pages: Vec<Value>,
    /// Allocations TT-NN's graph has no node for, in order (see [`ScratchEvent`]).
    pub scratch: Vec<ScratchEvent>,
}

/// A buffer ttmesh allocates and frees inside one device operation where TT-NN's operation
/// allocates none (a collective's slots: TT-NN's keeps its packets in circular buffers). TT-NN's
/// graph shows no node for it, so neither does ours; it is kept here instead, so peak memory
/// and `plan` count what the allocators really held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScratchEvent {
    /// Takes effect just before node `at` (after the last node when `at` is the node count).
    pub at: usize,
    /// Allocated (true) or freed.
    pub allocate: bool,
    /// The device operation it belongs to.
    pub operation: String,
    /// TT-NN's BufferType number, as buffer nodes carry it.
    pub buffer_type: u8,
    pub size: u64,
    pub max_size_per_bank: u64,
    pub chips: Vec<u32>,
}

impl Graph {
    /// The graph as TT-NN's JSON array of nodes.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.nodes).unwrap_or(Value::Null)
    }
}

/// A mesh tensor as the graph shows it.
#[derive(Clone, Debug)]
pub(crate) struct TensorInfo {
    pub tensor_id: u64,
    pub shape: Vec<usize>,
    pub dtype: DataType,
    pub layout: Layout,
    pub memory_config: MemoryConfig,
    pub buffer_type: BufferType,
    pub sharded: bool,
    pub size: u64,
    pub page_size: u64,
    /// (chip id, address) per chip, mesh order.
    pub places: Vec<(u32, u64)>,
    /// The mesh device's address, which TT-NN prints for a device argument.
    pub device: usize,
}

impl TensorInfo {
    fn of(t: &MeshTensor) -> Option<TensorInfo> {
        let spec = t.spec();
        let places = t
            .shards()
            .iter()
            .map(|s| Some((s.chip().id(), s.buffer_address().ok()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(TensorInfo {
            tensor_id: t.shards()[0].id(),
            shape: spec.shape.clone(),
            dtype: spec.dtype,
            layout: spec.layout,
            memory_config: spec.memory_config.clone(),
            buffer_type: spec.memory_config.buffer_type,
            sharded: spec.memory_config.is_sharded(),
            size: spec.buffer_size(),
            page_size: spec.page_size(),
            places,
            device: device_pointer(t.mesh()),
        })
    }

    /// The arguments of the `create_device_tensor` that made this tensor.
    fn creation_arguments(&self) -> Vec<String> {
        let spec = TensorSpec {
            shape: self.shape.clone(),
            dtype: self.dtype,
            layout: self.layout,
            memory_config: self.memory_config.clone(),
        };
        describe::create_device_tensor_arguments(&spec, self.device)
    }
}

/// A mesh device as a pointer, the way TT-NN shows a `MeshDevice*` argument.
fn device_pointer(mesh: &MeshDevice) -> usize {
    Arc::as_ptr(&mesh.inner) as usize
}

static CAPTURES: Mutex<Vec<Capture>> = parking_lot::const_mutex(Vec::new());
static CAPTURING: AtomicBool = AtomicBool::new(false);
static STACK_TRACES: AtomicBool = AtomicBool::new(false);
static BUFFER_PAGES: AtomicBool = AtomicBool::new(false);

/// Feeds chip events to every open capture.
struct Observer;

impl ChipObserver for Observer {
    fn allocator_event(&self, event: &AllocatorEvent) {
        for c in CAPTURES.lock().iter_mut() {
            c.allocator_event(event);
        }
    }
    fn program_launched(&self, launch: &LaunchEvent<'_>) {
        let rec = LaunchRec::from_event(launch);
        for c in CAPTURES.lock().iter_mut() {
            c.launch(rec.clone());
        }
    }
}

/// Starts a capture (nested inside any open one). With `RunMode::NoDispatch`, nothing runs
/// on any chip of the process until it ends.
pub fn begin_graph_capture(mode: RunMode) {
    let mut caps = CAPTURES.lock();
    caps.push(Capture::new(mode, BUFFER_PAGES.load(Ordering::Relaxed)));
    let modes: Vec<RunMode> = caps.iter().map(|c| c.mode).collect();
    // Chips call the observer holding its slot and then lock the captures: switch it only
    // with the captures unlocked.
    drop(caps);
    update_switches(&modes);
}

/// Ends the innermost capture and returns its graph. Ops still open (a failure left them so)
/// are closed; the graph keeps their error nodes.
pub fn end_graph_capture() -> Result<Graph> {
    let mut caps = CAPTURES.lock();
    let cap = caps.pop().ok_or_else(|| {
        MeshError::GraphCapture(
            "end_graph_capture without begin_graph_capture: no capture is open; call begin_graph_capture(RunMode::Normal or RunMode::NoDispatch) first".into(),
        )
    })?;
    let modes: Vec<RunMode> = caps.iter().map(|c| c.mode).collect();
    drop(caps);
    update_switches(&modes);
    Ok(cap.finish())
}

/// True while a capture is open (a program should end it before it exits).
pub fn is_capturing() -> bool {
    CAPTURING.load(Ordering::Acquire)
}

/// What a program should print at exit when captures are still open (their graphs are lost,
/// and under NO_DISPATCH nothing ran): `None` when none is.
pub fn capture_left_open_warning() -> Option<String> {
    let caps = CAPTURES.lock();
    let innermost = caps.last()?.mode;
    Some(format!(
        "warning: {} graph capture(s) still open at exit (innermost {}): begin_graph_capture without end_graph_capture, so the graph is lost{}; end every capture with end_graph_capture or end_graph_capture_to_file",
        caps.len(),
        match innermost {
            RunMode::Normal => "NORMAL",
            RunMode::NoDispatch => "NO_DISPATCH",
        },
        if caps.iter().any(|c| c.mode == RunMode::NoDispatch) {
            " and nothing ran since NO_DISPATCH began"
        } else {
            ""
        }
    ))
}

/// The mode of the innermost open capture.
pub fn current_run_mode() -> Option<RunMode> {
    CAPTURES.lock().last().map(|c| c.mode)
}

fn update_switches(modes: &[RunMode]) {
    let on = !modes.is_empty();
    CAPTURING.store(on, Ordering::Release);
    observe::set_no_dispatch(modes.contains(&RunMode::NoDispatch));
    observe::set_observer(if on { Some(Arc::new(Observer)) } else { None });
}

pub fn enable_stack_traces() {
    STACK_TRACES.store(true, Ordering::Relaxed);
}
pub fn disable_stack_traces() {
    STACK_TRACES.store(false, Ordering::Relaxed);
}
pub fn is_stack_trace_enabled() -> bool {
    STACK_TRACES.load(Ordering::Relaxed)
}
/// Buffer pages (per-page placement of L1 buffers) in reports of captures begun after this.
pub fn enable_buffer_pages() {
    BUFFER_PAGES.store(true, Ordering::Relaxed);
}
pub fn disable_buffer_pages() {
    BUFFER_PAGES.store(false, Ordering::Relaxed);
}

fn stack_trace() -> Option<Vec<String>> {
    if !is_stack_trace_enabled() {
        return None;
    }
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    Some(
        bt.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("at "))
            .map(str::to_string)
            .collect(),
    )
}

fn begin_frame(kind: FrameKind, inputs: &[TensorInfo], arguments: Vec<String>) {
    let st = stack_trace();
    for c in CAPTURES.lock().iter_mut() {
        c.begin_frame(kind.clone(), inputs, arguments.clone(), st.clone());
    }
}

fn end_frame(outputs: &[TensorInfo], error: Option<(&str, String)>) {
    for c in CAPTURES.lock().iter_mut() {
        c.end_frame(outputs, error.clone());
    }
}

/// Runs one mesh op inside a device-operation frame (named after the chips' launches unless
/// `name` is given). Costs one atomic load when no capture is open.
pub(crate) fn device_operation(
    name: Option<&'static str>,
    inputs: &[&MeshTensor],
    body: impl FnOnce() -> Result<MeshTensor>,
) -> Result<MeshTensor> {
    if !is_capturing() {
        return body();
    }
    let infos: Vec<TensorInfo> = inputs.iter().filter_map(|t| TensorInfo::of(t)).collect();
    let arguments = vec![
        format!("operation_attributes_t({})", name.unwrap_or("")),
        format!(
            "{{{}}}",
            infos
                .iter()
                .map(describe::tensor_repr)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    begin_frame(FrameKind::DeviceOp(name), &infos, arguments);
    let out = body();
    match &out {
        Ok(t) => end_frame(&TensorInfo::of(t).into_iter().collect::<Vec<_>>(), None),
        Err(e) => end_frame(
            &[],
            Some((name.unwrap_or("device operation"), e.to_string())),
        ),
    }
    out
}

/// Runs a mesh tensor allocation inside a `create_device_tensor` frame (with TT-NN's five
/// arguments: shape, dtype, layout, device, memory config).
pub(crate) fn create_device_tensor(
    mesh: &MeshDevice,
    spec: &TensorSpec,
    body: impl FnOnce() -> Result<MeshTensor>,
) -> Result<MeshTensor> {
    if !is_capturing() {
        return body();
    }
    let arguments = describe::create_device_tensor_arguments(spec, device_pointer(mesh));
    begin_frame(FrameKind::CreateDeviceTensor, &[], arguments);
    let out = body();
    match &out {
        Ok(t) => end_frame(&TensorInfo::of(t).into_iter().collect::<Vec<_>>(), None),
        Err(e) => end_frame(
            &[],
            Some(("tt::tt_metal::create_device_tensor", e.to_string())),
        ),
    }
    out
}

/// Records an error met outside an op (a synchronize that timed out, ...) in every open
/// capture, and passes the result through.
pub(crate) fn record_error<T>(operation: &str, r: Result<T>) -> Result<T> {
    if let Err(e) = &r {
        if is_capturing() {
            let msg = e.to_string();
            for c in CAPTURES.lock().iter_mut() {
                c.error(operation, &msg);
            }
        }
    }
    r
}
