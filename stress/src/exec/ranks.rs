//! What a case's ranks share when its mesh is split over MPI ranks: the errors every rank's
//! chips ended with (so every rank judges the case on the same evidence and takes the same
//! path after it), and the verdict, checked equal on every rank. On a mesh wholly in this
//! process both are the identity.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use ttmesh::{MeshDevice, MeshError};

use super::{CaseResult, Errors, Verdict};

/// One rank's evidence: its chips' errors (mesh index, text) and whether its stalled chip's
/// queue reported the timeout.
#[derive(Serialize, Deserialize)]
struct Evidence {
    errors: Errors,
    stall_timed_out: bool,
}

fn exchange_json<T: Serialize + for<'de> Deserialize<'de>>(
    mesh: &MeshDevice,
    what: &str,
    mine: &T,
    timeout: Duration,
) -> Result<Vec<T>, MeshError> {
    let bytes = serde_json::to_vec(mine).map_err(|e| MeshError::Config(e.to_string()))?;
    ttmesh::ranks::exchange_bytes(mesh, what, bytes, timeout)?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            serde_json::from_slice(b).map_err(|e| {
                MeshError::Config(format!("{what}: rank {r} sent what does not parse: {e}"))
            })
        })
        .collect()
}

/// Every rank's errors, in rank order, and whether any rank's stalled chip timed out.
pub(super) fn share_errors(
    mesh: &MeshDevice,
    errors: Errors,
    stall_timed_out: bool,
    timeout: Duration,
) -> Result<(Errors, bool), MeshError> {
    if mesh.rank().is_none() {
        return Ok((errors, stall_timed_out));
    }
    let mine = Evidence {
        errors,
        stall_timed_out,
    };
    let all = exchange_json(mesh, "stress: the errors of a case", &mine, timeout)?;
    let stalled = all.iter().any(|e| e.stall_timed_out);
    let mut errors: Errors = all.into_iter().flat_map(|e| e.errors).collect();
    errors.sort_by_key(|e| e.0);
    Ok((errors, stalled))
}

/// The verdict every rank reached: this rank's result if they all agree, else an unexpected
/// error naming each rank's verdict (the ranks judged the same evidence and read the same
/// outputs, so they must agree).
pub(super) fn agree(
    mesh: &MeshDevice,
    r: CaseResult,
    timeout: Duration,
) -> Result<CaseResult, MeshError> {
    if mesh.rank().is_none() {
        return Ok(r);
    }
    let mine = (r.verdict, r.wrong, r.time_us);
    let all = exchange_json(mesh, "stress: the verdict of a case", &mine, timeout)?;
    let mut out = r;
    // The op's time is the slowest rank's: a send's time is its receiver's.
    out.time_us = all.iter().map(|v| v.2).fold(0.0, f64::max);
    if all.iter().all(|v| (v.0, v.1) == (mine.0, mine.1)) {
        return Ok(out);
    }
    let said: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(rank, (v, wrong, _))| format!("rank {rank}: {v:?} ({wrong} wrong)"))
        .collect();
    out.detail = format!(
        "the ranks disagree on this case ({}); {}",
        said.join(", "),
        out.detail
    );
    out.verdict = Verdict::UnexpectedError;
    Ok(out)
}
