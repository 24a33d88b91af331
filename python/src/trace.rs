//! Metal Trace and events on a mesh: TT-NN's `begin_trace_capture`, `end_trace_capture`,
//! `execute_trace`, `release_trace`, `create_event`, `record_event`, `wait_for_event`,
//! `event_synchronize`.

use std::sync::Arc;

use pyo3::prelude::*;
use ttmesh::{CqId, MeshEvent, MeshTraceId};

use crate::device::{Device, DeviceState};
use crate::errors::{chip_work, value_error};

/// `ttnn.MeshTraceId`: what `begin_trace_capture` returns (compares equal to its int).
#[pyclass(module = "ttnn", frozen, from_py_object)]
#[derive(Clone, Copy)]
pub struct MeshTraceId_ {
    #[pyo3(get)]
    pub id: u32,
}

#[pymethods]
impl MeshTraceId_ {
    fn __int__(&self) -> u32 {
        self.id
    }
    fn __index__(&self) -> u32 {
        self.id
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        trace_id(other).map(|i| i == self.id).unwrap_or(false)
    }
    fn __hash__(&self) -> u64 {
        self.id as u64
    }
    fn __repr__(&self) -> String {
        format!("MeshTraceId({})", self.id)
    }
}

fn trace_id(v: &Bound<'_, PyAny>) -> PyResult<u32> {
    if let Ok(t) = v.cast::<MeshTraceId_>() {
        return Ok(t.get().id);
    }
    v.extract::<u32>().map_err(|_| {
        crate::errors::type_error(format!(
            "trace_id must be what ttnn.begin_trace_capture returned, not {}",
            crate::memory::type_name(v)
        ))
    })
}

#[pyfunction]
pub fn begin_trace_capture(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    cq_id: u8,
) -> PyResult<MeshTraceId_> {
    let mesh = device.get().live("begin_trace_capture")?;
    let t = chip_work(py, || mesh.begin_trace_capture(CqId(cq_id)))?;
    Ok(MeshTraceId_ { id: t.0 })
}

#[pyfunction]
pub fn end_trace_capture(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    trace_id: &Bound<'_, PyAny>,
    cq_id: u8,
) -> PyResult<()> {
    let mesh = device.get().live("end_trace_capture")?;
    let tid = MeshTraceId(self::trace_id(trace_id)?);
    chip_work(py, || mesh.end_trace_capture(tid, CqId(cq_id)))
}

#[pyfunction]
pub fn execute_trace(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    trace_id: &Bound<'_, PyAny>,
    cq_id: u8,
    blocking: bool,
) -> PyResult<()> {
    let mesh = device.get().live("execute_trace")?;
    let tid = MeshTraceId(self::trace_id(trace_id)?);
    chip_work(py, || mesh.execute_trace(tid, CqId(cq_id), blocking))
}

#[pyfunction]
pub fn release_trace(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    trace_id: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let mesh = device.get().live("release_trace")?;
    let tid = MeshTraceId(self::trace_id(trace_id)?);
    chip_work(py, || mesh.release_trace(tid))
}

/// `ttnn.MeshEvent`: one event per chip of the device it was created on.
#[pyclass(module = "ttnn", frozen, name = "MeshEvent")]
pub struct Event {
    pub event: MeshEvent,
    pub state: Arc<DeviceState>,
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        format!("MeshEvent(on {})", self.state.label())
    }
}

#[pyfunction]
pub fn create_event(device: &Bound<'_, Device>) -> PyResult<Event> {
    let mesh = device.get().live("create_event")?;
    Ok(Event {
        event: mesh.create_event(),
        state: device.get().state.clone(),
    })
}

fn event_mesh<'a>(
    what: &str,
    event: &'a Event,
    device: Option<&Bound<'_, Device>>,
) -> PyResult<&'a ttmesh::MeshDevice> {
    if let Some(d) = device {
        if !Arc::ptr_eq(&d.get().state, &event.state) {
            return Err(value_error(format!(
                "{what}: the event was created on {}, not on {}; create it with ttnn.create_event(device) on the device you record it on",
                event.state.label(),
                d.get().state.label()
            )));
        }
    }
    event.state.live(what)
}

#[pyfunction]
#[pyo3(signature = (cq_id, event, device = None))]
pub fn record_event(
    py: Python<'_>,
    cq_id: u8,
    event: &Bound<'_, Event>,
    device: Option<&Bound<'_, Device>>,
) -> PyResult<()> {
    let e = event.get();
    let mesh = event_mesh("record_event", e, device)?;
    chip_work(py, || mesh.record_event(CqId(cq_id), &e.event))
}

#[pyfunction]
pub fn wait_for_event(py: Python<'_>, cq_id: u8, event: &Bound<'_, Event>) -> PyResult<()> {
    let e = event.get();
    let mesh = event_mesh("wait_for_event", e, None)?;
    chip_work(py, || mesh.wait_for_event(CqId(cq_id), &e.event))
}

#[pyfunction]
pub fn event_synchronize(py: Python<'_>, event: &Bound<'_, Event>) -> PyResult<()> {
    let e = event.get();
    let mesh = event_mesh("event_synchronize", e, None)?;
    chip_work(py, || mesh.event_synchronize(&e.event))
}

/// Per-chip replay time of the last lockstep replay and the skew, in microseconds.
#[pyfunction]
pub fn last_replay(device: &Bound<'_, Device>) -> Option<(Vec<f64>, f64)> {
    device
        .get()
        .state
        .mesh
        .last_replay()
        .map(|r| (r.per_chip_us, r.skew_us))
}

/// Each chip's view of a trace: (address, size) or None where the chip does not hold it.
#[pyfunction]
pub fn trace_info(
    device: &Bound<'_, Device>,
    trace_id: &Bound<'_, PyAny>,
) -> PyResult<Vec<Option<(u64, u64)>>> {
    let tid = MeshTraceId(self::trace_id(trace_id)?);
    Ok(device
        .get()
        .state
        .mesh
        .trace_info(tid)
        .into_iter()
        .map(|i| i.map(|i| (i.address, i.buffer_size)))
        .collect())
}
