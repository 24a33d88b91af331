//! The device profile and graph-report import from Python: the libraries `bin` uses for
//! `--profile DIR` and `ttmesh report import` (ttmesh-profile, ttmesh-report), bound as they
//! are; the command-line glue in `bin` is only argument parsing around the same calls.

use parking_lot::Mutex;
use pyo3::prelude::*;
use ttmesh_profile::{HostModel, Profiler};

use crate::device::Device;
use crate::errors::{chip_work, runtime, value_error};

/// A modeled device profile being recorded on a device's chips (`ttmesh.profile(...)`).
#[pyclass(module = "ttmesh", frozen)]
pub struct Profile {
    profiler: Mutex<Option<Profiler>>,
}

/// Starts recording every chip of `device` for a profile written to `dir` (checked now).
#[pyfunction]
#[pyo3(signature = (device, dir, calibration = None, host_model = "python"))]
pub fn profile_start(
    device: &Bound<'_, Device>,
    dir: std::path::PathBuf,
    calibration: Option<std::path::PathBuf>,
    host_model: &str,
) -> PyResult<Profile> {
    let mesh = device.get().live("ttmesh.profile")?;
    let host = HostModel::parse(host_model).map_err(|e| value_error(e.to_string()))?;
    let p = Profiler::start(
        &dir,
        calibration.as_deref(),
        host,
        mesh.arch(),
        mesh.chips(),
    )
    .map_err(|e| runtime(&e))?;
    Ok(Profile {
        profiler: Mutex::new(Some(p)),
    })
}

#[pymethods]
impl Profile {
    /// Stops recording, models the timeline and writes the folder. Returns (summary as JSON
    /// text, summary for a person, files written); the JSON's "predicted" holds the captured
    /// trace replayed back to back as the hardware would (as `plan decode --predict`), when
    /// the block captured one. `untraced_iterations` divides an untraced
    /// run's figures per iteration (a traced run counts its replays).
    #[pyo3(signature = (untraced_iterations = 1))]
    fn finish(
        &self,
        py: Python<'_>,
        untraced_iterations: usize,
    ) -> PyResult<(String, String, Vec<String>)> {
        let p = self.profiler.lock().take().ok_or_else(|| {
            value_error("this profile was already finished; start another with ttmesh.profile(...)")
        })?;
        let out = chip_work(py, || p.finish(untraced_iterations.max(1)))?;
        let mut json = out.summary.to_json();
        let mut text = out.summary.to_string();
        if let Some(p) = &out.predicted {
            json["predicted"] = p.to_json(ttmesh_profile::predict::TOP_OPS);
            text.push_str(&p.describe(5));
        }
        Ok((
            json.to_string(),
            text,
            out.files.iter().map(|f| f.display().to_string()).collect(),
        ))
    }

    /// Stops recording without writing anything.
    fn cancel(&self) {
        self.profiler.lock().take();
    }
}

/// `ttmesh report import REPORT OUT_DIR [--svg] [--replace]`: the folder ttnn-visualizer
/// opens. Returns (operations, tensors, errors, files written).
#[pyfunction]
#[pyo3(signature = (report, out_dir, svg = false, replace = false))]
pub fn import_report(
    py: Python<'_>,
    report: std::path::PathBuf,
    out_dir: std::path::PathBuf,
    svg: bool,
    replace: bool,
) -> PyResult<(usize, usize, usize, Vec<String>)> {
    let options = ttmesh_report::ImportOptions { svg, replace };
    let s = chip_work(py, || ttmesh_report::import(&report, &out_dir, options))?;
    Ok((s.operations, s.tensors, s.errors, s.files))
}
