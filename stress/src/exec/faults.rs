//! Where a case's fault lands and what the op must end with: the links its packets cross
//! (from the fabric's own routes, 1D or 2D), the fault injected on them (now or after a delay),
//! a stalled dispatcher, and the judgement of the errors every chip reported.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use ttmesh::{CqId, MeshDevice, MeshError};
use ttmesh_fabric::{Fabric, Fault};

use super::{Errors, Verdict};
use crate::cases::{Case, FaultPlan};
use crate::spec::FaultKind;

/// What a case expects, resolved against the mesh.
pub(super) enum Expect {
    Right,
    /// Fails naming one of these links (`must`), or may also be right.
    LinkError {
        names: Vec<String>,
        must: bool,
    },
    /// The chip at this mesh index reports a timeout naming it.
    StalledChip {
        index: usize,
        id: u32,
    },
}

/// The chip-id pairs the op's packets cross, each once: a send's route as the fabric takes it
/// (`Fabric::route_chips`: along a line in 1D; the source's column, then the destination's row
/// in 2D), and for collectives the route between each pair of neighbours on the lines they run
/// on (one link), as the collectives choose them: a whole-mesh collective on a 2D fabric runs
/// along both axes (`ttmesh::ccl::whole_mesh_axes`), and a ring's closing pair is crossed only
/// when the line runs as a ring (`ttmesh_ccl::resolve_topology`: a 1D ring fabric, or a torus
/// closing that axis).
fn path_pairs(mesh: &MeshDevice, case: &Case) -> Vec<(u32, u32)> {
    let fabric = mesh.fabric().expect("stress meshes have a fabric");
    let mut hops: Vec<(u32, u32)> = Vec::new();
    let mut walk = |src: u32, dst: u32| {
        for w in fabric.route_chips(src, dst).unwrap_or_default().windows(2) {
            if !hops.contains(&(w[0], w[1])) {
                hops.push((w[0], w[1]));
            }
        }
    };
    if let Some((a, b)) = case.send {
        walk(mesh.chips()[a].id(), mesh.chips()[b].id());
        return hops;
    }
    let auto = ttmesh_ccl::CclConfig::default();
    for step in &case.steps {
        let axes: Vec<Option<usize>> =
            match ttmesh::ccl::whole_mesh_axes(mesh, step.axis, ttmesh::ccl::REDUCE_AXES) {
                Some(both) => both.into_iter().map(Some).collect(),
                None => vec![step.axis],
            };
        for axis in axes {
            for (line, _) in mesh.ccl_lines(axis).unwrap_or_default() {
                let n = line.chips.len();
                let ring = ttmesh_ccl::resolve_topology("stress", &line, fabric, &auto)
                    .is_ok_and(|t| t == ttmesh::Topology::Ring);
                for p in 0..n {
                    if p + 1 < n || ring {
                        walk(line.chips[p], line.chips[(p + 1) % n]);
                    }
                }
            }
        }
    }
    hops
}

/// Spec indices of the links a fault plan hits and its expectation.
pub(super) fn resolve_fault(mesh: &MeshDevice, case: &Case) -> (Vec<usize>, Expect) {
    let fabric = mesh.fabric().expect("stress meshes have a fabric");
    let links = &fabric.spec().links;
    let joining = |(a, b): (u32, u32)| -> Vec<usize> {
        (0..links.len()).filter(|&i| links[i].joins(a, b)).collect()
    };
    match &case.fault {
        FaultPlan::None => (vec![], Expect::Right),
        FaultPlan::Stall { chip } => (
            vec![],
            Expect::StalledChip {
                index: *chip,
                id: mesh.chips()[*chip].id(),
            },
        ),
        FaultPlan::Link { on_path, hop, .. } => {
            let path = path_pairs(mesh, case);
            let on = |x: u32, y: u32| {
                path.iter()
                    .any(|&(a, b)| (a, b) == (x, y) || (a, b) == (y, x))
            };
            let candidates: Vec<(u32, u32)> = if *on_path {
                path.clone()
            } else {
                let ids: Vec<u32> = mesh.chips().iter().map(|c| c.id()).collect();
                let mut v: Vec<(u32, u32)> = links
                    .iter()
                    .map(|l| (l.a.0, l.b.0))
                    .filter(|&(a, b)| ids.contains(&a) && ids.contains(&b) && !on(a, b))
                    .collect();
                v.dedup();
                v
            };
            if candidates.is_empty() {
                return (vec![], Expect::Right);
            }
            let idx = joining(candidates[hop % candidates.len()]);
            let names = idx.iter().map(|&i| links[i].to_string()).collect();
            let expect = if case.fault.may_fail() {
                Expect::LinkError {
                    names,
                    must: case.fault.must_fail(),
                }
            } else {
                Expect::Right
            };
            (idx, expect)
        }
    }
}

fn fault_of(plan: &FaultPlan) -> Option<Fault> {
    match plan {
        FaultPlan::Link { kind, param, .. } => Some(match kind {
            FaultKind::Down => Fault::Down,
            FaultKind::Slow => Fault::Slow {
                factor: *param as f64,
            },
            FaultKind::Drop => Fault::Drop { every_nth: *param },
            FaultKind::Corrupt => Fault::Corrupt { every_nth: *param },
            _ => return None,
        }),
        _ => None,
    }
}

/// Injects the fault now, or from a helper thread after its delay.
pub(super) fn inject(
    fabric: &Arc<Fabric>,
    links: &[usize],
    plan: &FaultPlan,
) -> Option<thread::JoinHandle<()>> {
    let fault = fault_of(plan)?;
    let delay = match plan {
        FaultPlan::Link { delay_us, .. } => *delay_us,
        _ => 0,
    };
    let (f, links) = (fabric.clone(), links.to_vec());
    let go = move || {
        for &l in &links {
            let _ = f.inject(l, fault);
        }
    };
    if delay == 0 {
        go();
        None
    } else {
        Some(thread::spawn(move || {
            thread::sleep(Duration::from_micros(delay));
            go()
        }))
    }
}

/// Judges errors against the expectation: Some(verdict, detail) when errors decide the case.
pub(super) fn judge_errors(
    expect: &Expect,
    errors: &Errors,
    stall_timed_out: bool,
) -> Option<(Verdict, String)> {
    match expect {
        Expect::StalledChip { id, index } => Some(if stall_timed_out {
            let own = errors.iter().find(|e| e.0 == *index).or(errors.first());
            (
                Verdict::ExpectedError,
                own.map(|e| e.1.clone()).unwrap_or_default(),
            )
        } else {
            (
                Verdict::UnexpectedError,
                format!("chip {id} was stalled past the operation timeout, but its queue did not report a timeout naming it: {errors:?}"),
            )
        }),
        _ if errors.is_empty() => match expect {
            Expect::LinkError { names, must: true } => Some((
                Verdict::UnexpectedError,
                format!(
                    "the fault on link {} should have failed the op, but it succeeded",
                    names.join(" / ")
                ),
            )),
            _ => None,
        },
        Expect::Right => Some((Verdict::UnexpectedError, errors[0].1.clone())),
        Expect::LinkError { names, .. } => {
            let bad = errors
                .iter()
                .find(|(_, e)| !names.iter().any(|n| e.contains(&format!("link {n}"))));
            Some(match bad {
                Some((_, e)) => (
                    Verdict::UnexpectedError,
                    format!(
                        "the error does not name the faulted link {}: {e}",
                        names.join(" / ")
                    ),
                ),
                None => (Verdict::ExpectedError, errors[0].1.clone()),
            })
        }
    }
}

/// Blocks the stalled chip's dispatcher past its finish timeout; dropping the sender ends it.
pub(super) fn stall_chip(
    mesh: &MeshDevice,
    case: &Case,
    timeout: Duration,
) -> Result<Option<std::sync::mpsc::Sender<()>>, MeshError> {
    let FaultPlan::Stall { chip } = case.fault else {
        return Ok(None);
    };
    let c = &mesh.chips()[chip];
    if !mesh.holds_chip(c.id()) {
        // Over MPI ranks: the rank that holds the chip stalls it.
        return Ok(None);
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Longer than a chip's finish waits (the timeout, a quarter more, half a second).
    let hold = timeout + timeout / 2 + Duration::from_secs(1);
    c.enqueue_host_callback(CqId(0), move || {
        let _ = rx.recv_timeout(hold);
        Ok(())
    })
    .map_err(|source| MeshError::Chip {
        chip: c.id(),
        source,
    })?;
    Ok(Some(tx))
}
