//! `--profile DIR` for run and decode: the flags, and the glue between a command and
//! ttmesh-profile (check the folder before anything runs, attach, write and print at the end).

use std::path::PathBuf;

use ttmesh::MeshDevice;
use ttmesh_profile::{HostModel, ProfileOutput, Profiler};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ProfileArgs {
    /// Write a modeled device profile here: ops_perf_results.csv (tt-metal's columns, for
    /// tt-perf-report) and profile_log_device.csv (with it, a performance report
    /// ttnn-visualizer opens), trace.json (Perfetto), timeline.svg, calibration.toml,
    /// summary.json.
    #[arg(long, value_name = "DIR")]
    pub profile: Option<PathBuf>,
    /// The device-time model's constants (TOML; a profile folder's calibration.toml is a template).
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub calibration: Option<PathBuf>,
    /// Host side of the timeline: cpp (tt-metal's C++ dispatch cost per op), python (TT-NN's),
    /// or measured (this host's own time).
    #[arg(long, default_value = "cpp", requires = "profile")]
    pub host_model: String,
}

impl ProfileArgs {
    /// Refuses a bad host model or an unwritable folder before the mesh opens.
    pub fn check(&self) -> Result<(), String> {
        if let Some(dir) = &self.profile {
            HostModel::parse(&self.host_model).map_err(|e| e.to_string())?;
            ttmesh_profile::check_dir(dir).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Starts recording every chip of `mesh` (nothing without `--profile`).
    pub fn start(&self, mesh: &MeshDevice) -> Result<Option<Profiler>, String> {
        let Some(dir) = &self.profile else {
            return Ok(None);
        };
        let host = HostModel::parse(&self.host_model).map_err(|e| e.to_string())?;
        Profiler::start(
            dir,
            self.calibration.as_deref(),
            host,
            mesh.arch(),
            mesh.chips(),
        )
        .map(Some)
        .map_err(|e| e.to_string())
    }
}

/// Models and writes the profile (`untraced_iterations` counts only when nothing was traced).
pub fn finish(
    profiler: Option<Profiler>,
    untraced_iterations: usize,
) -> Result<Option<ProfileOutput>, String> {
    profiler
        .map(|p| p.finish(untraced_iterations))
        .transpose()
        .map_err(|e| e.to_string())
}

/// The summary and the files written, as JSON.
pub fn to_json(out: &ProfileOutput) -> serde_json::Value {
    let mut v = out.summary.to_json();
    if let Some(p) = &out.predicted {
        v["predicted"] = p.to_json(ttmesh_profile::predict::TOP_OPS);
    }
    v["files"] = out
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .into();
    v
}

/// The summary and the files written, for a person.
pub fn print(out: &ProfileOutput) {
    print!("{}", out.summary);
    if let Some(p) = &out.predicted {
        print!("{}", p.describe(5));
    }
    for f in &out.files {
        println!("  wrote {}", f.display());
    }
}
