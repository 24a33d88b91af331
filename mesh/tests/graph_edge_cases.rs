//! Graph capture's edge cases: a trace's command bytes do not depend on the capture mode
//! (NO_DISPATCH, NORMAL, none), a replay under NO_DISPATCH does nothing and does not fail, and
//! a capture left open is named at exit. Captures are process-wide, so these tests take turns.

mod common;

use std::sync::Arc;

use common::*;
use parking_lot::Mutex;
use ttmesh::graph::{self, RunMode};
use ttmesh::*;
use ttmesh_chip::observe::{ChipObserver, Submission};

static TURN: Mutex<()> = parking_lot::const_mutex(());

fn n300() -> MeshDevice {
    open_with(MeshConfig {
        topology: "n300".into(),
        fabric_config: FabricConfig::Fabric1D,
        trace_region_size: 1 << 20,
        ..Default::default()
    })
}

/// The run block (column-parallel up + gelu, row-parallel down + all_reduce): compiled once,
/// then captured as a trace, whose id it returns.
fn mlp_block_trace(mesh: &MeshDevice) -> ttmesh::Result<MeshTraceId> {
    let mlp = ttmesh::models::TpMlp::new(mesh, 256, 512, 3)?;
    let spec = TensorSpec::new(
        vec![1, 1, 32, 256],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
    );
    let x = MeshTensor::allocate(mesh, &spec)?;
    drop(mlp.forward(&x)?);
    let tid = mesh.begin_trace_capture(CqId(0))?;
    let y = mlp.forward(&x)?;
    mesh.end_trace_capture(tid, CqId(0))?;
    // The block's buffers stay alive as long as the trace is replayed.
    std::mem::forget((mlp, x, y));
    Ok(tid)
}

/// Collects the bytes each submission put into a trace being captured.
#[derive(Default)]
struct CapturedBytes(Mutex<Vec<u8>>);

impl ChipObserver for CapturedBytes {
    fn submitted(&self, s: &Submission<'_>) {
        if s.captured {
            self.0.lock().extend_from_slice(s.bytes());
        }
    }
}

/// Per chip: the bytes captured into the block's trace, and the trace's command size, with
/// the block run under `mode` (or no capture) on a fresh n300; under NORMAL and no capture,
/// the trace as read back from the chip's DRAM too.
fn trace_bytes(mode: Option<RunMode>) -> Vec<(Vec<u8>, u64, Option<Vec<u8>>)> {
    let mesh = n300();
    let observers: Vec<Arc<CapturedBytes>> = mesh
        .chips()
        .iter()
        .map(|c| {
            let o = Arc::new(CapturedBytes::default());
            c.add_observer(o.clone());
            o
        })
        .collect();
    if let Some(m) = mode {
        graph::begin_graph_capture(m);
    }
    let tid = mlp_block_trace(&mesh);
    if mode.is_some() {
        graph::end_graph_capture().unwrap();
    }
    let tid = tid.unwrap();
    let out = mesh
        .chips()
        .iter()
        .zip(mesh.trace_info(tid))
        .zip(&observers)
        .map(|((c, info), o)| {
            let info = info.expect("every chip holds the trace");
            let stored =
                (mode != Some(RunMode::NoDispatch)).then(|| c.read_trace_commands(&info).unwrap());
            c.remove_observer(&(o.clone() as Arc<dyn ChipObserver>));
            (o.0.lock().clone(), info.command_bytes, stored)
        })
        .collect();
    mesh.close().unwrap();
    out
}

#[test]
fn a_traces_command_bytes_are_the_same_under_no_dispatch_normal_and_no_capture() {
    let _turn = TURN.lock();
    let none = trace_bytes(None);
    let normal = trace_bytes(Some(RunMode::Normal));
    let no_dispatch = trace_bytes(Some(RunMode::NoDispatch));
    for (chip, ((a, b), c)) in none.iter().zip(&normal).zip(&no_dispatch).enumerate() {
        assert!(!a.0.is_empty(), "chip {chip}: nothing captured");
        assert_eq!(a.0, b.0, "chip {chip}: NORMAL capture changed the trace");
        assert_eq!(a.0, c.0, "chip {chip}: NO_DISPATCH changed the trace");
        assert_eq!((a.1, b.1), (c.1, c.1), "chip {chip}: command sizes");
        // What the chip stored is what was captured, plus the closing EXEC_BUF_END.
        for stored in [&a.2, &b.2] {
            let stored = stored.as_ref().unwrap();
            assert_eq!(stored.len() as u64, a.1);
            assert!(stored.len() > a.0.len() && stored.starts_with(&a.0));
        }
    }
}

#[test]
fn a_replay_under_no_dispatch_does_nothing_and_does_not_fail() {
    let _turn = TURN.lock();
    let mesh = n300();
    graph::begin_graph_capture(RunMode::NoDispatch);
    let tid = mlp_block_trace(&mesh).unwrap();
    mesh.execute_trace(tid, CqId(0), false).unwrap();
    mesh.execute_trace(tid, CqId(0), true).unwrap();
    mesh.synchronize_device().unwrap();
    let g = graph::end_graph_capture().unwrap();
    assert!(!g.nodes.iter().any(|n| n.node_type == "error"));
    for c in mesh.chips() {
        assert_eq!(c.dispatch_stats().launches, 0, "chip {} ran", c.id());
        assert_eq!(c.memory().resident_bytes(), 0, "chip {} wrote", c.id());
    }
    // Outside NO_DISPATCH the same trace cannot replay: its commands were never written to
    // DRAM. It is refused with that cause (no hang, nothing runs) and told to capture again.
    let e = mesh
        .execute_trace(tid, CqId(0), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("captured during a NO_DISPATCH graph capture") && e.contains("capture it again"),
        "{e}"
    );
    for c in mesh.chips() {
        assert_eq!(c.dispatch_stats().launches, 0, "chip {} ran", c.id());
    }
    mesh.release_trace(tid).unwrap();
    mesh.close().unwrap();
}

#[test]
fn a_capture_left_open_is_named_and_none_after_it_ends() {
    let _turn = TURN.lock();
    assert_eq!(graph::capture_left_open_warning(), None);
    graph::begin_graph_capture(RunMode::Normal);
    graph::begin_graph_capture(RunMode::NoDispatch);
    let w = graph::capture_left_open_warning().unwrap();
    assert!(
        w.starts_with("warning: 2 graph capture(s) still open at exit (innermost NO_DISPATCH)"),
        "{w}"
    );
    assert!(w.contains("nothing ran since NO_DISPATCH began"), "{w}");
    graph::end_graph_capture().unwrap();
    let w = graph::capture_left_open_warning().unwrap();
    assert!(
        w.contains("1 graph capture(s) still open at exit (innermost NORMAL)"),
        "{w}"
    );
    assert!(!w.contains("NO_DISPATCH"), "{w}");
    graph::end_graph_capture().unwrap();
    assert_eq!(graph::capture_left_open_warning(), None);
    assert!(graph::end_graph_capture().is_err());
}
