//! The profiler's errors.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read the calibration file {path}: {source}")]
    ReadCalibration {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the calibration file {path} is not valid TOML: {source}")]
    ParseCalibration {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("unknown key `{key}` in the calibration file {path}; known keys: {known}")]
    UnknownKey {
        path: PathBuf,
        key: String,
        known: String,
    },
    #[error("`{key}` in the calibration file {path} must be {what} (got {got}); {hint}")]
    BadValue {
        path: PathBuf,
        key: String,
        what: &'static str,
        got: String,
        hint: &'static str,
    },
    #[error("unknown host model `{0}`: use cpp (tt-metal's C++ dispatch), python (TT-NN from Python) or measured (this host's own time)")]
    UnknownHostModel(String),
    #[error("the profile folder {path} is not writable: {source}; pick another --profile folder")]
    Unwritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = ProfileError> = std::result::Result<T, E>;
