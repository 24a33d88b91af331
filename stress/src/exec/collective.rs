//! A collective case: inputs, the collectives (untraced, or captured and replayed with new
//! inputs), the fault, every chip's queue result, the outputs against the host reference.

use std::time::{Duration, Instant};

use ttmesh::ccl::{self, CclArgs};
use ttmesh::{CqId, Layout, MeshDevice, MeshError, MeshTensor};
use ttmesh_chip::ChipError;

use super::faults::{inject, judge_errors, resolve_fault, stall_chip, Expect};
use super::probe::finish_all;
use super::ranks::share_errors;
use super::{
    errors_of, inputs, memory_config, rank_wait, read, CaseResult, PerChip, Probe, Verdict,
};
use crate::cases::Case;
use crate::reference;
use crate::spec::OpKind;

/// The expected per-chip outputs of a collective case.
fn expected(case: &Case, mesh: &MeshDevice, values: &[Vec<f32>]) -> (Vec<Vec<f32>>, u32) {
    let s = mesh.shape();
    let mut data = values.to_vec();
    let mut shape = case.shape.clone();
    let mut roundings = 0;
    for step in &case.steps {
        let lines = reference::lines(s.rows, s.cols, step.axis);
        data = match step.op {
            OpKind::AllGather => {
                let d = reference::all_gather(&data, &shape, step.dim, &lines);
                shape[step.dim] *= step.chips;
                d
            }
            OpKind::ReduceScatter => {
                roundings += 1;
                let d = reference::reduce_scatter(&data, &shape, step.dim, &lines, case.dtype);
                shape[step.dim] /= step.chips;
                d
            }
            _ => {
                roundings += 1;
                reference::all_reduce(&data, &lines, case.dtype)
            }
        };
    }
    (data, roundings)
}

/// Enqueues the case's collectives on `x`; every output is kept (a trace replays into them).
fn launch(
    case: &Case,
    x: &MeshTensor,
    keep: &mut Vec<MeshTensor>,
) -> Result<MeshTensor, MeshError> {
    let mut cur = x.clone();
    for step in &case.steps {
        let args = CclArgs {
            cluster_axis: step.axis,
            num_links: case.num_links,
            memory_config: Some(memory_config(case)),
            ..Default::default()
        };
        cur = match step.op {
            OpKind::AllGather => ccl::all_gather(&cur, step.dim as isize, &args)?,
            OpKind::ReduceScatter => ccl::reduce_scatter(&cur, step.dim as isize, &args)?,
            _ => ccl::all_reduce(&cur, &args)?,
        };
        keep.push(cur.clone());
    }
    Ok(cur)
}

pub(super) fn run_collective(
    mesh: &MeshDevice,
    case: &Case,
    timeout: Duration,
    probe: &Probe,
) -> Result<CaseResult, MeshError> {
    let n = mesh.num_devices();
    let fabric = mesh.fabric().expect("stress meshes have a fabric").clone();
    probe.stage("writing inputs");
    let (parts, values) = inputs(case, n, 0);
    let x = MeshTensor::from_host(
        &parts[0],
        mesh,
        &PerChip(parts.clone()),
        Layout::Tile,
        memory_config(case),
        CqId(0),
    )?;
    let mut keep = Vec::new();
    let mut values_used = values;
    // The trace this rank replays, and every trace captured (released at the end).
    let mut trace = None;
    let mut captured = Vec::new();
    let out = if case.traced {
        // Compile and check untraced first (capture needs every program compiled), then
        // capture, then new inputs so the replay must recompute.
        probe.stage("the untraced run before capture");
        let warm = launch(case, &x, &mut keep)?;
        mesh.synchronize_device()?;
        let (want, roundings) = expected(case, mesh, &values_used);
        let got = read(&warm)?;
        let wrong = reference::count_wrong(&got, &want, case.dtype, roundings);
        if wrong > 0 {
            let mut r = CaseResult::new(
                case,
                Verdict::Wrong,
                "the untraced run before capture was wrong".into(),
            );
            r.wrong = wrong;
            return Ok(r);
        }
        probe.stage("capturing");
        let tid = mesh.begin_trace_capture(CqId(0))?;
        let out = launch(case, &x, &mut keep);
        mesh.end_trace_capture(tid, CqId(0))?;
        let out = out?;
        trace = Some(tid);
        captured.push(tid);
        if let Some(rank) = ttmesh_settings::settings().test_diverge_rank {
            // Test only (TTMESH_TEST_DIVERGE_RANK): every rank captures the same collectives
            // a second time, and that rank replays this twin in place of the first trace.
            let twin = mesh.begin_trace_capture(CqId(0))?;
            let twin_out = launch(case, &x, &mut keep);
            mesh.end_trace_capture(twin, CqId(0))?;
            twin_out?;
            captured.push(twin);
            if mesh.rank() == Some(rank) {
                trace = Some(twin);
            }
            // The twin's buffers took memory the first trace freed during its capture: the
            // sanitizer would refuse the first trace's replay before the barrier could see
            // the ranks diverge.
            mesh.set_replay_sanitizer(false);
        }
        let (parts, values) = inputs(case, n, 1);
        values_used = values;
        x.copy_from_host(&parts[0], &PerChip(parts.clone()), CqId(0))?;
        mesh.synchronize_device()?;
        Some(out)
    } else {
        None
    };

    let (links, expect) = resolve_fault(mesh, case);
    let stall = stall_chip(mesh, case, timeout)?;
    let injector = inject(&fabric, &links, &case.fault);
    probe.stage("running the op");
    let t0 = Instant::now();
    let out = match (out, trace) {
        (Some(out), Some(tid)) => {
            mesh.execute_trace(tid, CqId(0), false)?;
            out
        }
        _ => launch(case, &x, &mut keep)?,
    };
    probe.stage("waiting for every chip's queue");
    let results = finish_all(mesh, probe);
    let time_us = t0.elapsed().as_secs_f64() * 1e6;
    if let Some(h) = injector {
        let _ = h.join();
    }
    for &l in &links {
        let _ = fabric.clear_fault(l);
    }
    let stall_timed_out = match &expect {
        Expect::StalledChip { index, id } => {
            matches!(&results[*index], Err(e @ ChipError::Timeout { .. }) if e.to_string().contains(&format!("chip {id} ")))
        }
        _ => false,
    };
    drop(stall);
    let errors = errors_of(&results, mesh);
    probe.stage("sharing the errors with the other ranks");
    let (errors, stall_timed_out) =
        share_errors(mesh, errors, stall_timed_out, rank_wait(timeout))?;
    probe.stage("resetting the mesh after the op");
    let sync = mesh.synchronize_device();
    for tid in captured {
        let _ = mesh.release_trace(tid);
    }
    mesh.set_replay_sanitizer(true);
    if let Err(e @ MeshError::Invalid { .. }) = sync {
        // The ranks' barrier found them diverged: that outranks what any chip reported.
        return Err(e);
    }
    let mut r = CaseResult::new(case, Verdict::Passed, String::new());
    r.time_us = time_us;
    if let Some((v, d)) = judge_errors(&expect, &errors, stall_timed_out) {
        r.verdict = v;
        r.detail = d;
        return Ok(r);
    }
    sync?;
    probe.stage("reading the outputs");
    let (want, roundings) = expected(case, mesh, &values_used);
    let got = read(&out)?;
    r.wrong = reference::count_wrong(&got, &want, case.dtype, roundings);
    if r.wrong > 0 {
        r.verdict = Verdict::Wrong;
        r.detail = format!(
            "{} of {} elements differ from the host reference",
            r.wrong,
            want.iter().map(Vec::len).sum::<usize>()
        );
    }
    Ok(r)
}
