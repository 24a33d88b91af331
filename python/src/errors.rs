//! Rust errors as Python exceptions, and the one door every chip call goes through.
//!
//! TT-NN raises `RuntimeError` for what tt-metal refuses (a trace region too small, out of
//! memory, a write during capture); bad arguments found here are `TypeError` / `ValueError`
//! naming the argument and the fix. A panic (a bug) never crosses into the interpreter: it is
//! caught and raised as a `RuntimeError` saying so.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The error's message followed by every source the message does not already contain, so the
/// chain (tt-metal's words, then our hint, then what a collective met on a link) prints whole.
pub fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str("\ncaused by: ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

pub fn runtime(e: &(dyn std::error::Error + 'static)) -> PyErr {
    PyRuntimeError::new_err(chain_text(e))
}

pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

pub fn type_error(msg: impl Into<String>) -> PyErr {
    PyTypeError::new_err(msg.into())
}

/// A mesh-level argument check (a mapper's dim that does not split, a tensor of another mesh)
/// is a `ValueError`; everything else, as in TT-NN, a `RuntimeError`.
fn classify<E: std::error::Error + 'static>(e: &E) -> PyErr {
    match (e as &dyn std::any::Any).downcast_ref::<ttmesh::MeshError>() {
        Some(ttmesh::MeshError::Invalid { .. }) => PyValueError::new_err(chain_text(e)),
        _ => runtime(e),
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Held by every host call into the chips, and by the drop of a device tensor: a mesh op
/// allocates on its chips one after another, so two Python threads issuing ops (or freeing
/// tensors) at once would give the chips' allocators different orders and the mesh's lockstep
/// addresses would diverge. One lock for the process: threads then take turns on the host,
/// while the chips still run in parallel on their own threads.
pub static CHIP_CALLS: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// Runs chip work: first lets a pending Ctrl-C surface as `KeyboardInterrupt` (so a program
/// stops between ops), then runs `f` with the GIL released (other Python threads go on while
/// the chips work) and [`CHIP_CALLS`] held, catching a panic.
pub fn chip_work<T, E, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    E: std::error::Error + Send + 'static,
    F: FnOnce() -> Result<T, E> + Send,
{
    py.check_signals()?;
    let out = py.detach(|| {
        let _turn = CHIP_CALLS.lock();
        catch_unwind(AssertUnwindSafe(f))
    });
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(&e)),
        Err(p) => Err(PyRuntimeError::new_err(format!(
            "internal error in ttmesh (a bug; please report it with the program that met it): {}",
            panic_text(p.as_ref())
        ))),
    }
}
