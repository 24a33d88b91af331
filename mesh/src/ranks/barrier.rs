//! The host-side barrier of a mesh over MPI ranks, where the mesh synchronises
//! (`synchronize_device`, `finish`): every rank tells the others how its chips ended (the
//! first error, whether its fabric stopped, whether every queue is idle) and which trace calls
//! it made since the last barrier, in one host exchange. Every rank then reaches the same
//! verdict from the same states, so the program goes on the same way everywhere: the same
//! error on every rank, and a fabric stopped by a failed collective reset on every rank
//! together.
//!
//! Why the reset takes a second exchange: a rank drains its own channels when it resets, and
//! what it drains towards another rank's chips leaves after its first message. Each rank
//! resets, then they exchange again (MPI keeps each pair's order, so every late delivery has
//! landed once the second exchange is through), then each resets once more, which only zeroes
//! what those late deliveries counted.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use ttmesh_chip::ChipError;

use super::MeshRanks;
use crate::device::pick_error;
use crate::error::{invalid, MeshError, Result};
use crate::lockstep::{compare_replay_logs, ReplayLog};
use crate::MeshDevice;

/// One rank's word at a barrier.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankState {
    /// The first error of its chips' queues, with its causes.
    pub error: Option<String>,
    /// Why its fabric stopped, if it did.
    pub fabric_failure: Option<String>,
    /// Every queue of its chips has run all it was given (a reset may go ahead).
    pub idle: bool,
    pub traces: ReplayLog,
}

/// What every rank concludes from every rank's state.
#[derive(Debug, PartialEq)]
pub(crate) struct Verdict {
    /// The ranks' trace calls differ: the error, the same on every rank.
    pub divergence: Option<String>,
    /// A fabric stopped somewhere and every queue everywhere is idle: reset on every rank.
    pub reset: bool,
    /// The first other rank's error (its rank and text), for a rank whose own chips are fine.
    pub other_error: Option<(u32, String)>,
}

/// The verdict of `states` (by rank) for rank `me`.
pub(crate) fn judge(states: &[RankState], me: u32) -> Verdict {
    let logs: Vec<ReplayLog> = states.iter().map(|s| s.traces.clone()).collect();
    let stopped = states.iter().any(|s| s.fabric_failure.is_some());
    let other_error = states
        .iter()
        .enumerate()
        .filter(|(r, _)| *r as u32 != me)
        .find_map(|(r, s)| {
            s.error
                .clone()
                .or_else(|| s.fabric_failure.clone())
                .map(|e| (r as u32, e))
        });
    Verdict {
        divergence: compare_replay_logs(&logs).err(),
        reset: stopped && states.iter().all(|s| s.idle),
        other_error,
    }
}

/// The barrier: `results` are this rank's chips' waits, `idle` whether a reset may go ahead
/// here. Returns the same verdict on every rank: this rank's own error first, else another
/// rank's, else the fabric's failure if one was reset.
pub(crate) fn barrier(
    mesh: &MeshDevice,
    ranks: &MeshRanks,
    results: Vec<(u32, std::result::Result<(), ChipError>)>,
    idle: bool,
) -> Result<()> {
    let fabric = mesh.fabric();
    let failure = fabric.and_then(|f| f.failure());
    let local = pick_error(results);
    let state = RankState {
        error: local.as_ref().err().map(|e| crate::error_chain(e)),
        fabric_failure: failure.as_ref().map(|e| crate::error_chain(e)),
        idle,
        traces: mesh.inner.trace_calls.lock().take(),
    };
    let timeout = barrier_timeout(mesh);
    let bytes = serde_json::to_vec(&state).unwrap_or_default();
    let all = ranks.exchange("synchronize", bytes, timeout)?;
    let states = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            serde_json::from_slice::<RankState>(b).map_err(|e| {
                invalid(
                    "synchronize across ranks",
                    format!(
                        "rank {r} sent a state that does not parse ({e}): another ttmesh version?"
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let verdict = judge(&states, ranks.rank());
    // Reset even when the ranks diverged: the error says why, and the mesh stays usable.
    if let (true, Some(f)) = (verdict.reset, fabric) {
        let reset_timeout = timeout / 2;
        let first = f.recover(reset_timeout);
        let word = vec![first.is_ok() as u8];
        let all = ranks.exchange("synchronize: resetting the fabric", word, timeout)?;
        let second = first.and_then(|()| f.recover(reset_timeout));
        let not_reset = all.iter().position(|w| w.first() != Some(&1));
        let reset_error = match (second, not_reset) {
            (Err(e), _) => Some(e.to_string()),
            (Ok(()), Some(r)) => Some(format!("rank {r} could not reset its fabric")),
            _ => None,
        };
        if let Some(e) = reset_error {
            let first = verdict
                .divergence
                .clone()
                .or(local.as_ref().err().map(|e| e.to_string()))
                .or(verdict.other_error.map(|(r, e)| format!("rank {r}: {e}")))
                .unwrap_or_default();
            return Err(MeshError::Config(format!(
                "{first}; then {e}: close and reopen the mesh"
            )));
        }
    }
    if let Some(d) = verdict.divergence {
        return Err(invalid("synchronize", d));
    }
    local?;
    if let Some((r, e)) = verdict.other_error {
        return Err(MeshError::Config(format!("rank {r}: {e}")));
    }
    match failure {
        // Reported by an earlier wait, but say why the fabric had stopped.
        Some(f) if verdict.reset => Err(MeshError::Fabric(f)),
        _ => Ok(()),
    }
}

/// How long a rank waits for the others at a barrier: each may still spend its queues' wait
/// and one more for a stalled peer (`MeshDevice::synchronize_device`); a rank that died is
/// named sooner, by its silence.
fn barrier_timeout(mesh: &MeshDevice) -> Duration {
    mesh.operation_timeout() * 2 + Duration::from_secs(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(error: Option<&str>, stopped: bool, idle: bool) -> RankState {
        RankState {
            error: error.map(String::from),
            fabric_failure: stopped.then(|| "link 3 down".to_string()),
            idle,
            traces: ReplayLog::default(),
        }
    }

    #[test]
    fn every_rank_resets_only_when_a_fabric_stopped_and_all_are_idle() {
        let fine = [state(None, false, true), state(None, false, true)];
        assert_eq!(
            judge(&fine, 0),
            Verdict {
                divergence: None,
                reset: false,
                other_error: None
            }
        );
        let stopped = [
            state(None, false, true),
            state(Some("chip 20: timeout"), true, true),
        ];
        let v = judge(&stopped, 0);
        assert!(v.reset);
        assert_eq!(v.other_error, Some((1, "chip 20: timeout".into())));
        assert_eq!(judge(&stopped, 1).other_error, None);
        let busy = [state(None, true, true), state(None, true, false)];
        let v = judge(&busy, 1);
        assert!(
            !v.reset,
            "a rank with a busy queue defers the reset everywhere"
        );
        assert_eq!(v.other_error, Some((0, "link 3 down".into())));
    }

    #[test]
    fn states_cross_as_bytes() {
        let mut s = state(Some("e"), true, false);
        s.traces.record(crate::lockstep::TraceEvent {
            released: false,
            chip: 4,
            trace: 1,
            address: Some(0x40),
        });
        let back: RankState = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
