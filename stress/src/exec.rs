//! Runs one case on an open mesh: inputs, the op (untraced, or captured and replayed), the
//! fault, every chip's queue result, the check against the host reference.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::{
    CqId, FabricConfig, HostTensor, Layout, MemoryConfig, MeshConfig, MeshDevice, MeshError,
    MeshMapper, MeshShape, MeshTensor, TensorSpec,
};
use ttmesh_chip::ChipError;
use ttmesh_fabric::{Fabric, Fault, NocAddr};

use crate::cases::{Case, FaultPlan};
use crate::reference;
use crate::spec::{FaultKind, OpKind, TopologyChoice};

/// The semaphore a send's last packet raises on its destination (far above the collectives').
pub const SEND_SEMAPHORE: u32 = 0x5EED_0000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Right data (no fault, a fault off the path, a slow link, or a fault that missed).
    Passed,
    /// The fault's error, naming its link or chip, within the timeout.
    ExpectedError,
    Wrong,
    Hang,
    UnexpectedError,
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub index: u64,
    pub case: String,
    pub topology: String,
    pub op: &'static str,
    pub dtype: &'static str,
    pub fault: String,
    pub verdict: Verdict,
    /// nccl-tests' size: bytes per chip (an all_gather's output, the others' input).
    pub size: u64,
    pub count: u64,
    /// Time of the op (launch to every chip idle; a traced case: its replay), microseconds.
    pub time_us: f64,
    pub chips: usize,
    pub wrong: u64,
    /// The error seen, or what was wrong or still waiting.
    pub detail: String,
    pub elapsed_ms: f64,
}

impl CaseResult {
    pub fn failed(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::Wrong | Verdict::Hang | Verdict::UnexpectedError
        )
    }
    pub fn new(case: &Case, verdict: Verdict, detail: String) -> CaseResult {
        let n = case.steps.iter().map(|s| s.chips).product::<usize>().max(1);
        let gathers = case.op == OpKind::AllGather;
        CaseResult {
            index: case.index,
            case: case.to_string(),
            topology: case.topology.name(),
            op: case.op.name(),
            dtype: crate::spec::dtype_name(case.dtype),
            fault: case.fault.to_string(),
            verdict,
            size: case.input_bytes() * if gathers { n as u64 } else { 1 },
            count: case.elements() * if gathers { n as u64 } else { 1 },
            time_us: 0.0,
            chips: if case.op == OpKind::Send { 2 } else { n },
            wrong: 0,
            detail,
            elapsed_ms: 0.0,
        }
    }
}

/// What a running case is doing, read by the watchdog when it reports a hang.
#[derive(Default)]
pub struct Probe {
    pub stage: Mutex<String>,
    /// Per mesh index: its queue has reached the end of the case.
    pub done: Mutex<Vec<bool>>,
    pub mesh: Mutex<Option<MeshDevice>>,
}

impl Probe {
    fn stage(&self, s: &str) {
        *self.stage.lock() = s.to_string();
    }
    /// Chips still waiting and semaphores holding counts, for a hang report.
    pub fn describe(&self) -> String {
        let mut out = format!("stuck while {}", self.stage.lock());
        let Some(mesh) = self.mesh.lock().clone() else {
            return out;
        };
        let done = self.done.lock().clone();
        let waiting: Vec<String> = mesh
            .chips()
            .iter()
            .enumerate()
            .filter(|(i, _)| !done.get(*i).copied().unwrap_or(false))
            .map(|(_, c)| format!("chip {} CQ 0", c.id()))
            .collect();
        if !waiting.is_empty() {
            out += &format!("; queues not finished: {}", waiting.join(", "));
        }
        if let Some(f) = mesh.fabric() {
            let mut sems = Vec::new();
            for c in mesh.chips() {
                let ids = (0..ttmesh_ccl::SEM_SLOT_BASE + 128).chain([SEND_SEMAPHORE]);
                for s in ids {
                    if let Ok(v) = f.semaphore_value(c.id(), s) {
                        if v > 0 {
                            sems.push(format!("chip {} semaphore {s} = {v}", c.id()));
                        }
                    }
                }
            }
            if !sems.is_empty() {
                out += &format!("; semaphores holding counts: {}", sems.join(", "));
            }
            if let Some(e) = f.failure() {
                out += &format!("; fabric stopped: {e}");
            }
        }
        out
    }
}

/// Opens the mesh a topology choice runs on.
pub fn open_mesh(t: &TopologyChoice, timeout: Duration) -> Result<MeshDevice, MeshError> {
    let (name, (rows, cols), ring) = t.mesh_key();
    let shape = match t {
        TopologyChoice::File { .. } => None,
        _ => Some(MeshShape::new(rows, cols)),
    };
    MeshDevice::open(MeshConfig {
        topology: name,
        mesh_shape: shape,
        trace_region_size: 4 << 20,
        fabric_config: if ring {
            FabricConfig::Fabric1DRing
        } else {
            FabricConfig::Fabric1D
        },
        operation_timeout: Some(timeout),
        ..Default::default()
    })
}

/// Gives each chip its own host tensor.
struct PerChip(Vec<HostTensor>);

impl MeshMapper for PerChip {
    fn map(&self, _host: &HostTensor, _shape: MeshShape) -> ttmesh::Result<Vec<HostTensor>> {
        Ok(self.0.clone())
    }
}

/// Every error in a chain, joined: a fault's link may be named by a source.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s += ": ";
            s += &t;
        }
        cur = c.source();
    }
    s
}

/// What a case expects, resolved against the mesh.
enum Expect {
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

/// The chip-id pairs the op's packets cross.
fn path_pairs(mesh: &MeshDevice, case: &Case) -> Vec<(u32, u32)> {
    let fabric = mesh.fabric().expect("stress meshes have a fabric");
    let mut pairs = Vec::new();
    if let Some((a, b)) = case.send {
        let (src, dst) = (mesh.chips()[a].id(), mesh.chips()[b].id());
        if let Ok(route) = fabric.route(src, dst) {
            let line = &fabric.spec().axes[route.line.axis].chips;
            let n = line.len();
            let mut p = line.iter().position(|&c| c == src).unwrap_or(0);
            for _ in 0..route.hops {
                let q = match route.line.dir {
                    ttmesh_fabric::Dir::Forward => (p + 1) % n,
                    ttmesh_fabric::Dir::Backward => (p + n - 1) % n,
                };
                pairs.push((line[p], line[q]));
                p = q;
            }
        }
        return pairs;
    }
    for step in &case.steps {
        for (line, _) in mesh.ccl_lines(step.axis).unwrap_or_default() {
            let n = line.chips.len();
            let ring = line.is_ring && n > 2 && fabric.config() == FabricConfig::Fabric1DRing;
            for p in 0..n {
                if p + 1 < n || ring {
                    let pair = (line.chips[p], line.chips[(p + 1) % n]);
                    if !pairs.contains(&pair) {
                        pairs.push(pair);
                    }
                }
            }
        }
    }
    pairs
}

/// Spec indices of the links a fault plan hits and its expectation.
fn resolve_fault(mesh: &MeshDevice, case: &Case) -> (Vec<usize>, Expect) {
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
fn inject(
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

fn memory_config(case: &Case) -> MemoryConfig {
    if case.l1 {
        MemoryConfig::L1
    } else {
        MemoryConfig::DRAM
    }
}

/// Every chip's input of round `round`, as host tensors and as the reference's values.
fn inputs(case: &Case, chips: usize, round: u64) -> (Vec<HostTensor>, Vec<Vec<f32>>) {
    let n: usize = case.shape.iter().product();
    let values: Vec<Vec<f32>> = (0..chips)
        .map(|i| reference::input_values(case.data_seed() ^ round, i, n))
        .collect();
    let hosts = values
        .iter()
        .map(|v| {
            HostTensor::from_f32(case.shape.clone(), case.dtype, v.clone())
                .expect("a stress input converts")
        })
        .collect();
    (hosts, values)
}

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

/// Waits for every chip's queue at once; each result is its own.
fn finish_all(mesh: &MeshDevice, probe: &Probe) -> Vec<Result<(), ChipError>> {
    *probe.done.lock() = vec![false; mesh.num_devices()];
    thread::scope(|s| {
        let hs: Vec<_> = mesh
            .chips()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                s.spawn(move || {
                    let r = c.finish(CqId(0));
                    probe.done.lock()[i] = true;
                    r
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ChipError::Closed(u32::MAX)))
            })
            .collect()
    })
}

/// What a run ended with: every chip's error (mesh index, text), or none.
type Errors = Vec<(usize, String)>;

fn errors_of(results: &[Result<(), ChipError>], mesh: &MeshDevice) -> Errors {
    results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.as_ref()
                .err()
                .map(|e| (i, format!("chip {}: {}", mesh.chips()[i].id(), chain(e))))
        })
        .collect()
}

/// Judges errors against the expectation: Some(verdict, detail) when errors decide the case.
fn judge_errors(
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

/// Runs one case; an error the case does not expect (setting up, or from the op) is an
/// UnexpectedError result. Sets `dirty` when the mesh should not be reused (a stall, an
/// unexpected error).
pub fn run_case(
    mesh: &MeshDevice,
    case: &Case,
    timeout: Duration,
    probe: &Probe,
    dirty: &AtomicBool,
) -> CaseResult {
    let started = Instant::now();
    let mut r = match if case.op == OpKind::Send {
        run_send(mesh, case, timeout, probe)
    } else {
        run_collective(mesh, case, timeout, probe)
    } {
        Ok(r) => r,
        Err(e) => CaseResult::new(case, Verdict::UnexpectedError, chain(&e)),
    };
    if r.verdict == Verdict::UnexpectedError || matches!(case.fault, FaultPlan::Stall { .. }) {
        dirty.store(true, Ordering::Relaxed);
    }
    r.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    r
}

fn run_collective(
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
    let mut trace = None;
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
    probe.stage("resetting the mesh after the op");
    let sync = mesh.synchronize_device();
    if let Some(tid) = trace {
        let _ = mesh.release_trace(tid);
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

/// Blocks the stalled chip's dispatcher past its finish timeout; dropping the sender ends it.
fn stall_chip(
    mesh: &MeshDevice,
    case: &Case,
    timeout: Duration,
) -> Result<Option<std::sync::mpsc::Sender<()>>, MeshError> {
    let FaultPlan::Stall { chip } = case.fault else {
        return Ok(None);
    };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Longer than a chip's finish waits (the timeout, a quarter more, half a second).
    let hold = timeout + timeout / 2 + Duration::from_secs(1);
    let c = &mesh.chips()[chip];
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

fn read(t: &MeshTensor) -> Result<Vec<Vec<f32>>, MeshError> {
    Ok(t.to_host_shards(CqId(0))?
        .into_iter()
        .map(|h| h.to_f32_vec())
        .collect())
}

/// A point-to-point write of one tensor from chip `src` into chip `dst`'s buffer over the
/// fabric, page by page on one link, its last packet raising a semaphore on `dst`.
fn run_send(
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
    probe.stage("sending");
    let t0 = Instant::now();
    let sent = (|| -> Result<(), ttmesh_fabric::FabricError> {
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
        fabric.wait_semaphore(dst, SEND_SEMAPHORE, 1, timeout)
    })();
    let time_us = t0.elapsed().as_secs_f64() * 1e6;
    if let Some(h) = injector {
        let _ = h.join();
    }
    for &l in &links {
        let _ = fabric.clear_fault(l);
    }
    let errors: Errors = match &sent {
        Ok(()) => vec![],
        Err(e) => {
            // Forget the losses and the semaphore the failed send left (no kernel runs).
            let _ = fabric.recover(timeout);
            vec![(
                b,
                format!("send from chip {src} to chip {dst}: {}", chain(e)),
            )]
        }
    };
    let mut r = CaseResult::new(case, Verdict::Passed, String::new());
    r.time_us = time_us;
    if let Some((v, d)) = judge_errors(&expect, &errors, false) {
        r.verdict = v;
        r.detail = d;
        return Ok(r);
    }
    probe.stage("reading the destination");
    let got = target.shards()[b]
        .to_host(CqId(0))
        .map_err(chip_err(dst))?
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
