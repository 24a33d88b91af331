//! The crate's one error type. Every segment error starts with the segment's name so the
//! monitor can print it as one self-explaining line.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum MonitorError {
    #[error("monitor: {what} is {requested}, but a segment holds at most {max}; publish fewer or raise the limit in ttmesh-monitor")]
    TooMany {
        what: &'static str,
        requested: usize,
        max: usize,
    },
    #[error("monitor: {what} index {index} is out of range (this segment has {count})")]
    IndexOutOfRange {
        what: &'static str,
        index: usize,
        count: usize,
    },
    #[error("monitor: cannot hand out a writer for chip {chip}: {why}")]
    HandleConflict { chip: usize, why: &'static str },
    #[error("monitor: rank {rank} of {ranks} is not a rank of a mesh; a mesh spans at least 1 rank, numbered from 0 (ProcessInfo::for_rank)")]
    BadRank { rank: u32, ranks: u32 },
    #[error("monitor: process info is {len} bytes as JSON, at most {max} fit; shorten the program name or topology")]
    InfoTooLarge { len: usize, max: usize },
    #[error("monitor: could not {action} shared-memory segment {name}: {source}{hint}")]
    Os {
        action: &'static str,
        name: String,
        source: nix::errno::Errno,
        hint: &'static str,
    },
    #[error("monitor: this process already publishes {count} segments (/ttmesh-<pid>-<n>); close a mesh first")]
    TooManySegments { count: usize },
    #[error("{name}: mode is {mode:04o} after creation, expected 0600 (owner only); check the umask and /dev/shm's mount options")]
    BadMode { name: String, mode: u32 },
    #[error("{name}: not a valid segment name: {why}")]
    BadName { name: String, why: &'static str },
    #[error("{name}: vanished (the process exited or removed it)")]
    Vanished { name: String },
    #[error("{name}: permission denied (owned by another user; run the monitor as that user)")]
    PermissionDenied { name: String },
    #[error("{name}: truncated ({actual} of {expected} bytes)")]
    Truncated {
        name: String,
        actual: u64,
        expected: u64,
    },
    #[error(
        "{name}: not a ttmesh monitor segment (magic {found:#018x}, expected {expected:#018x})"
    )]
    BadMagic {
        name: String,
        found: u64,
        expected: u64,
    },
    #[error(
        "{name}: not initialised yet (its process is still creating it, or died while creating it)"
    )]
    NotInitialised { name: String },
    #[error("{name}: stale ({}, before it finished creating the segment); `ttmesh monitor --cleanup` removes it", why.describe(*pid))]
    StaleUninitialised {
        name: String,
        pid: u32,
        why: crate::data::Staleness,
    },
    #[error("{name}: layout version {found}, this monitor reads version {supported}; use a ttmesh built from the same release as the watched program")]
    WrongVersion {
        name: String,
        found: u32,
        supported: u32,
    },
    #[error("{name}: corrupt: {detail}")]
    Corrupt { name: String, detail: String },
    #[error("{name}: is being updated too fast to read consistently ({slot}); try again")]
    TooFast { name: String, slot: String },
    #[error("{name}: {slot} is stuck mid-update (its writer thread stopped while writing)")]
    StuckSlot { name: String, slot: String },
    #[error("monitor: no ttmesh process with pid {pid}; {available}")]
    ProcessNotFound { pid: u32, available: String },
    #[error("monitor: --interval {ms} ms is out of range; use 10 to 3600000 ms")]
    BadInterval { ms: u64 },
    #[error("monitor: writing output failed: {0}")]
    Output(#[from] std::io::Error),
    #[error("monitor: JSON encoding failed: {0}")]
    Json(#[from] serde_json::Error),
}

impl MonitorError {
    pub(crate) fn os(action: &'static str, name: &str, source: nix::errno::Errno) -> Self {
        let hint = match source {
            nix::errno::Errno::ENOSPC | nix::errno::Errno::ENOMEM => {
                " (/dev/shm is full; remove stale segments with `ttmesh monitor --cleanup` or set TTMESH_MONITOR=0)"
            }
            nix::errno::Errno::ENOENT | nix::errno::Errno::ENOSYS => {
                " (no POSIX shared memory here: is /dev/shm mounted? set TTMESH_MONITOR=0 to run without the monitor)"
            }
            _ => "",
        };
        MonitorError::Os {
            action,
            name: name.to_string(),
            source,
            hint,
        }
    }
}
