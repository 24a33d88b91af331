//! ttmesh-profile: the device-time model and the profiler.
//!
//! Owns: the calibrated model of what a kernel, a fabric transfer and a dispatch would take on
//! the hardware ([`model`], [`calibration`]), the recorder that watches every chip's
//! submissions ([`recorder`]), the modeled timeline with a clock per chip and command queue
//! ([`timeline`]), and its writers: tt-metal's ops report CSV, a Perfetto trace, an SVG
//! picture and a summary ([`report`]), and the prediction of a traced token from a captured
//! step alone ([`predict`]: what `ttmesh plan decode --predict` prints).
//!
//! Must not touch: how chips run commands. It only observes (through the chip's
//! `ChipObserver`) and reads what kernels declare (`Kernel::cost`); it knows no mesh.

pub mod calibration;
pub mod error;
pub mod model;
pub mod predict;
pub mod recorder;
pub mod report;
pub mod timeline;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use calibration::Calibration;
pub use error::{ProfileError, Result};
pub use model::{DeviceModel, KernelTime};
pub use predict::{OpShare, TokenPrediction};
pub use recorder::Recorder;
pub use report::summary::Summary;
pub use timeline::{HostModel, Timeline};
use ttmesh_chip::{ArchSpec, Chip};

/// The files a profile folder receives.
pub const OPS_REPORT: &str = "ops_perf_results.csv";
pub const TRACE_JSON: &str = "trace.json";
pub const TIMELINE_SVG: &str = "timeline.svg";
pub const CALIBRATION_TOML: &str = "calibration.toml";
pub const SUMMARY_JSON: &str = "summary.json";

/// Creates `dir` if needed and proves it writable, before anything runs.
pub fn check_dir(dir: &Path) -> Result<()> {
    let unwritable = |source| ProfileError::Unwritable {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    let probe = dir.join(".ttmesh-profile-probe");
    std::fs::write(&probe, b"").map_err(unwritable)?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// A profiling session over some chips: records while the program runs, then models and
/// writes the reports.
pub struct Profiler {
    dir: PathBuf,
    model: DeviceModel,
    host_model: HostModel,
    arch: ArchSpec,
    recorder: Arc<Recorder>,
    chips: Vec<Arc<Chip>>,
}

impl Drop for Profiler {
    /// A run that fails before `finish` leaves no recorder on the chips.
    fn drop(&mut self) {
        self.recorder.detach(&self.chips);
    }
}

/// What [`Profiler::finish`] wrote and found.
pub struct ProfileOutput {
    pub timeline: Timeline,
    pub summary: Summary,
    pub files: Vec<PathBuf>,
}

impl Profiler {
    /// Checks the folder, loads the calibration (the arch's defaults when `calibration` is
    /// `None`) and starts recording `chips`.
    pub fn start(
        dir: &Path,
        calibration: Option<&Path>,
        host_model: HostModel,
        arch: &ArchSpec,
        chips: &[Arc<Chip>],
    ) -> Result<Profiler> {
        check_dir(dir)?;
        let cal = match calibration {
            Some(p) => Calibration::load(arch, p)?,
            None => Calibration::for_arch(arch),
        };
        let recorder = Recorder::new();
        recorder.attach(chips);
        Ok(Profiler {
            dir: dir.to_path_buf(),
            model: DeviceModel::new(cal),
            host_model,
            arch: arch.clone(),
            recorder,
            chips: chips.to_vec(),
        })
    }

    pub fn model(&self) -> &DeviceModel {
        &self.model
    }

    /// Stops recording, models the timeline and writes the reports. The summary counts one
    /// iteration per replay, and `untraced_iterations` when nothing was traced.
    pub fn finish(self, untraced_iterations: usize) -> Result<ProfileOutput> {
        self.recorder.detach(&self.chips);
        let timeline = timeline::build(&self.recorder.events(), &self.model, self.host_model);
        let summary = Summary::of(&timeline, untraced_iterations);
        let workers = self.arch.num_compute_cores();
        let json = report::chrome::trace(&timeline);
        let files = [
            (
                OPS_REPORT,
                report::csv::ops_report(
                    &timeline,
                    self.arch.name,
                    self.model.cal.clock_hz,
                    workers,
                ),
            ),
            (TRACE_JSON, json.to_string()),
            (TIMELINE_SVG, report::svg::picture(&timeline)),
            (CALIBRATION_TOML, self.model.cal.to_toml()),
            (
                SUMMARY_JSON,
                serde_json::to_string_pretty(&summary.to_json()).unwrap_or_default(),
            ),
        ];
        let mut written = Vec::new();
        for (name, text) in files {
            let path = self.dir.join(name);
            std::fs::write(&path, text).map_err(|source| ProfileError::Write {
                path: path.clone(),
                source,
            })?;
            written.push(path);
        }
        Ok(ProfileOutput {
            timeline,
            summary,
            files: written,
        })
    }
}
