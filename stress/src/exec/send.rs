//! A send case: one tensor written from one chip into another's buffer over the fabric,
//! with the fault on its route.

use std::time::{Duration, Instant};

use ttmesh::{CqId, Layout, MeshDevice, MeshError, MeshTensor, TensorSpec};
use ttmesh_chip::ChipError;
use ttmesh_fabric::{FabricError, NocAddr};

use super::faults::{inject, judge_errors, resolve_fault};
use super::ranks::share_errors;
use super::{
    chain, inputs, memory_config, rank_wait, CaseResult, Errors, Probe, Verdict, SEND_SEMAPHORE,
};
use crate::cases::Case;
use crate::reference;

/// A point-to-point write of one tensor from chip `src` into chip `dst`'s buffer over the
/// fabric, page by page on one link, its last packet raising a semaphore on `dst`.
pub(super) fn run_send(
    mesh: &MeshDevice,
    case: &Case,
    timeout: Duration,
    probe: &Probe,
) -> Result<CaseResult, MeshError> {
    let fabric = mesh.fabric().expect("stress meshes have a fabric").clone();
    let (a, b) = case.send.expect("a send case has ends");
    let (src, dst) = (mesh.chips()[a].id(), mesh.chips()[b].id());
    probe.stage("preparing a send");
    *probe.done.lock() = vec![true; mesh.num_devices()];
    let spec = TensorSpec::new(
        case.shape.clone(),
        case.dtype,
        Layout::Tile,
        memory_config(case),
    );
    let target = MeshTensor::allocate(mesh, &spec)?;
    let (mut hosts, mut values) = inputs(case, b + 1, 0);
    let (host, want) = (
        hosts.pop().expect("one input"),
        values.pop().expect("one input"),
    );
    let chip_err = |chip: u32| move |source: ChipError| MeshError::Chip { chip, source };
    let bytes = ttmesh_chip::tensor::encode_pages(&spec, &host.data).map_err(chip_err(src))?;
    let pages = target.shards()[b].pages().map_err(chip_err(dst))?;
    let page = spec.page_size() as usize;
    let (links, expect) = resolve_fault(mesh, case);
    let link = case.num_links - 1;
    let injector = inject(&fabric, &links, &case.fault);
    // Over MPI ranks the rank holding `src` sends and the one holding `dst` waits.
    let (sends_here, receives_here) = (mesh.holds_chip(src), mesh.holds_chip(dst));
    probe.stage("sending");
    let t0 = Instant::now();
    // Packets this rank's fabric lost (down, dropped, or corrupted and refused), all links.
    let losses = || {
        fabric
            .link_stats()
            .iter()
            .map(|l| l.dropped + l.corrupted)
            .sum::<u64>()
    };
    let lost_before = losses();
    let sent = (|| -> Result<(), FabricError> {
        if sends_here {
            let sender = fabric.sender(src)?.with_link(link);
            let count = bytes.len() / page;
            for p in 0..count {
                let (bank, addr) = pages.location(p as u64);
                let at = if case.l1 {
                    NocAddr::l1(bank, addr)
                } else {
                    NocAddr::dram(bank, addr)
                };
                let chunk = &bytes[p * page..(p + 1) * page];
                if p + 1 == count {
                    sender.write_and_inc(dst, at, chunk, SEND_SEMAPHORE, 1)?;
                } else {
                    sender.unicast_write(dst, at, chunk, link)?;
                }
            }
            sender.flush_timeout(timeout)?;
            if !receives_here && losses() > lost_before {
                // The packets crossed this rank's fabric, which recorded the loss: a wait
                // for the far chip's increment names the link and fault at once.
                fabric.wait_semaphore(dst, SEND_SEMAPHORE, 1, Duration::ZERO)?;
            }
        }
        if receives_here {
            fabric.wait_semaphore(dst, SEND_SEMAPHORE, 1, timeout)?;
        }
        Ok(())
    })();
    let time_us = t0.elapsed().as_secs_f64() * 1e6;
    if let Some(h) = injector {
        let _ = h.join();
    }
    for &l in &links {
        let _ = fabric.clear_fault(l);
    }
    let over_ranks = mesh.rank().is_some();
    let errors: Errors = match &sent {
        Ok(()) => vec![],
        Err(e) => {
            if over_ranks {
                // The other end's rank stops waiting now; the barrier below resets every
                // rank's fabric together.
                fabric.abort(if sends_here { src } else { dst }, e.clone());
            } else {
                // Forget the losses and the semaphore the failed send left (no kernel runs).
                let _ = fabric.recover(timeout);
            }
            vec![(
                b,
                format!("send from chip {src} to chip {dst}: {}", chain(e)),
            )]
        }
    };
    let (errors, sync) = if over_ranks {
        probe.stage("sharing the errors with the other ranks");
        let (errors, _) = share_errors(mesh, errors, false, rank_wait(timeout))?;
        probe.stage("resetting the mesh after the send");
        (errors, mesh.synchronize_device())
    } else {
        (errors, Ok(()))
    };
    let mut r = CaseResult::new(case, Verdict::Passed, String::new());
    r.time_us = time_us;
    if let Some((v, d)) = judge_errors(&expect, &errors, false) {
        r.verdict = v;
        r.detail = d;
        return Ok(r);
    }
    sync?;
    probe.stage("reading the destination");
    let got = if over_ranks {
        // Every rank reads the destination from the rank that holds it.
        target.to_host_shards(CqId(0))?.swap_remove(b)
    } else {
        target.shards()[b].to_host(CqId(0)).map_err(chip_err(dst))?
    }
    .to_f32_vec();
    r.wrong = reference::count_wrong(&[got], &[want], case.dtype, 0);
    if r.wrong > 0 {
        r.verdict = Verdict::Wrong;
        r.detail = format!(
            "{} elements on chip {dst} differ from what chip {src} sent",
            r.wrong
        );
    }
    Ok(r)
}
