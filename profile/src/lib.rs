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
pub const DEVICE_LOG: &str = "profile_log_device.csv";
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
    /// When the program captured a trace: the programs it captured (per chip and queue, in
    /// order) replayed back to back as the hardware would, the same prediction `plan decode
    /// --predict` makes of a decode step.
    pub predicted: Option<TokenPrediction>,
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
        let events = self.recorder.events();
        let timeline = timeline::build(&events, &self.model, self.host_model);
        let summary = Summary::of(&timeline, untraced_iterations);
        let predicted = predict::traced_token(&events, &self.model);
        let files = write_reports(
            &self.dir,
            &timeline,
            &summary,
            predicted.as_ref(),
            &self.model,
            &self.arch,
        )?;
        Ok(ProfileOutput {
            timeline,
            summary,
            predicted,
            files,
        })
    }
}

/// Writes a modeled timeline's reports into `dir` (which [`check_dir`] accepted): the ops
/// report and the device log (together, a performance report ttnn-visualizer opens), the
/// Perfetto trace, the SVG, the calibration and the summary (with the predicted traced token,
/// when there is one). A profile and a
/// prediction write the same files, so TT-NN's tools read either.
pub fn write_reports(
    dir: &Path,
    timeline: &Timeline,
    summary: &Summary,
    predicted: Option<&TokenPrediction>,
    model: &DeviceModel,
    arch: &ArchSpec,
) -> Result<Vec<PathBuf>> {
    let mut summary_json = summary.to_json();
    if let Some(p) = predicted {
        summary_json["predicted"] = p.to_json(predict::TOP_OPS);
    }
    let workers = arch.num_compute_cores();
    let files = [
        (
            OPS_REPORT,
            report::csv::ops_report(timeline, arch.name, model.cal.clock_hz, workers),
        ),
        (
            DEVICE_LOG,
            report::device_log::device_log(timeline, arch.name, model.cal.clock_hz, workers),
        ),
        (TRACE_JSON, report::chrome::trace(timeline).to_string()),
        (TIMELINE_SVG, report::svg::picture(timeline)),
        (CALIBRATION_TOML, model.cal.to_toml()),
        (
            SUMMARY_JSON,
            serde_json::to_string_pretty(&summary_json).unwrap_or_default(),
        ),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| ProfileError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}
