//! `Fabric`: builds the lines, channels and routers from a `FabricSpec`, and offers
//! semaphores, link statistics, fault injection and shutdown.

use crate::channel::{Channel, Wake};
use crate::config::*;
use crate::inner::{Hop, Inner, LineRt};
use crate::memory::ChipMemory;
use crate::route::Routing;
use crate::router::{Router, Turn};
use crate::sender::FabricSender;
use crate::FabricError;
use crate::NocAddr;
use parking_lot::Mutex;
use std::collections::HashSet;

/// Checks a semaphore wait makes before sleeping; every `SEM_YIELD_EVERY`-th yields the core.
fn sem_spin() -> u32 {
    ttmesh_settings::settings().sem_spin
}
const SEM_YIELD_EVERY: u32 = 16;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, FabricError>;

/// Router threads do little on their own stack.
const ROUTER_STACK: usize = 256 * 1024;

pub struct Fabric {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("config", &self.inner.spec.config)
            .field("num_chips", &self.inner.spec.num_chips)
            .field("routers", &self.router_count())
            .finish()
    }
}

fn invalid(msg: String) -> FabricError {
    FabricError::InvalidSpec(msg)
}

fn validate(spec: &FabricSpec, memories: usize) -> Result<()> {
    let n = spec.num_chips;
    if n == 0 || n > u16::MAX as u32 {
        return Err(invalid(format!(
            "num_chips is {n}; it must be in 1..=65535"
        )));
    }
    if memories != n as usize {
        return Err(invalid(format!(
            "{memories} chip memories given for {n} chips; register exactly one per chip"
        )));
    }
    if spec.channel_slots == 0 {
        return Err(invalid(
            "channel_slots is 0; every channel needs at least one slot".into(),
        ));
    }
    if spec.timeout.is_zero() {
        return Err(invalid(
            "timeout is zero; give every wait a positive timeout".into(),
        ));
    }
    let p = &spec.params;
    let sane = p.bandwidth_bytes_per_s.is_finite()
        && p.bandwidth_bytes_per_s > 0.0
        && p.efficiency > 0.0
        && p.efficiency <= 1.0
        && p.hop_latency_ns.is_finite()
        && p.hop_latency_ns >= 0.0;
    if !sane {
        return Err(invalid(format!(
            "link params {p:?}: bandwidth must be positive, efficiency in (0, 1], hop latency >= 0"
        )));
    }
    if p.default_payload_bytes == 0
        || p.default_payload_bytes > p.max_payload_bytes
        || p.max_payload_bytes > u16::MAX as usize
    {
        return Err(invalid(format!(
            "payload sizes default {} B / max {} B: need 1 <= default <= max <= 65535",
            p.default_payload_bytes, p.max_payload_bytes
        )));
    }
    let mut ports = HashSet::new();
    for (i, l) in spec.links.iter().enumerate() {
        for (chip, port) in [l.a, l.b] {
            if chip >= n {
                return Err(invalid(format!(
                    "link {i} ({l}) names chip {chip}, but there are {n} chips"
                )));
            }
            if !ports.insert((chip, port)) {
                return Err(invalid(format!(
                    "link {i} ({l}) reuses chip {chip} port {port}; each port carries one link"
                )));
            }
        }
        if l.a.0 == l.b.0 {
            return Err(invalid(format!(
                "link {i} ({l}) joins chip {} to itself",
                l.a.0
            )));
        }
    }
    for (ai, axis) in spec.axes.iter().enumerate() {
        let mut seen = HashSet::new();
        for &c in &axis.chips {
            if c >= n {
                return Err(invalid(format!(
                    "axis {ai} names chip {c}, but there are {n} chips"
                )));
            }
            if !seen.insert(c) {
                return Err(invalid(format!(
                    "axis {ai} lists chip {c} twice; a line visits a chip once"
                )));
            }
        }
        let k = axis.chips.len();
        let mut pairs: Vec<(u32, u32)> = axis.chips.windows(2).map(|w| (w[0], w[1])).collect();
        if axis.is_ring && k >= 3 && spec.config == FabricConfig::Fabric1DRing {
            pairs.push((axis.chips[k - 1], axis.chips[0]));
        }
        for (x, y) in pairs {
            if !spec.links.iter().any(|l| l.joins(x, y)) {
                return Err(invalid(format!(
                    "axis {ai}: chips {x} and {y} are neighbours but no ethernet link joins them"
                )));
            }
        }
    }
    Ok(())
}

/// Builds the hop from position `p` to its neighbour in one direction, if there is one.
fn build_hop(
    spec: &FabricSpec,
    chips: &[u32],
    ring: bool,
    p: usize,
    forward: bool,
    all: &mut Vec<Arc<Channel>>,
) -> Option<Arc<Hop>> {
    let n = chips.len();
    let q = match (forward, ring) {
        (true, _) if p + 1 < n => p + 1,
        (true, true) => 0,
        (false, _) if p > 0 => p - 1,
        (false, true) => n - 1,
        _ => return None,
    };
    let (from, to) = (chips[p], chips[q]);
    let links: Vec<usize> = (0..spec.links.len())
        .filter(|&i| spec.links[i].joins(from, to))
        .collect();
    let vcs = if ring { 2 } else { 1 };
    let wake = Arc::new(Wake::default());
    let chans = links
        .iter()
        .map(|&l| {
            (0..vcs)
                .map(|_| {
                    let a_to_b = spec.links[l].a.0 == from;
                    let ch = Arc::new(Channel::new(
                        spec.channel_slots,
                        spec.params.max_payload_bytes,
                        l,
                        a_to_b,
                        to,
                        wake.clone(),
                    ));
                    all.push(ch.clone());
                    ch
                })
                .collect()
        })
        .collect();
    let dateline = ring && ((forward && p == n - 1) || (!forward && p == 0));
    Some(Arc::new(Hop {
        wake,
        links,
        chans,
        dateline,
    }))
}

impl Fabric {
    /// Builds the fabric and starts one router thread per chip, line and direction.
    pub fn new(spec: FabricSpec, memories: Vec<Arc<dyn ChipMemory>>) -> Result<Fabric> {
        Self::build(spec, memories, None)
    }

    /// A fabric some of whose chips another process holds (`remote`; see [`RemoteChips`](crate::RemoteChips)):
    /// their `memories` are the transport's, which forward writes to that process.
    pub fn with_remote(
        spec: FabricSpec,
        memories: Vec<Arc<dyn ChipMemory>>,
        remote: Arc<dyn crate::RemoteChips>,
    ) -> Result<Fabric> {
        Self::build(spec, memories, Some(remote))
    }

    fn build(
        spec: FabricSpec,
        memories: Vec<Arc<dyn ChipMemory>>,
        remote: Option<Arc<dyn crate::RemoteChips>>,
    ) -> Result<Fabric> {
        validate(&spec, memories.len())?;
        let (plans, routing) = Routing::plan(&spec)?;
        let mut channels = Vec::new();
        let mut lines = Vec::new();
        for plan in plans {
            let n = plan.chips.len();
            let mut fwd = Vec::with_capacity(n);
            let mut bwd = Vec::with_capacity(n);
            for p in 0..n {
                fwd.push(build_hop(
                    &spec,
                    &plan.chips,
                    plan.ring,
                    p,
                    true,
                    &mut channels,
                ));
                bwd.push(build_hop(
                    &spec,
                    &plan.chips,
                    plan.ring,
                    p,
                    false,
                    &mut channels,
                ));
            }
            lines.push(LineRt {
                chips: plan.chips,
                ring: plan.ring,
                fwd,
                bwd,
            });
        }
        let mut routers = Vec::new();
        for (li, line) in lines.iter().enumerate() {
            for pos in 0..line.chips.len() {
                for forward in [true, false] {
                    let Some(prev) = line.step(pos, !forward, 1) else {
                        continue;
                    };
                    let Some(inb) = line.hop_from(prev, forward) else {
                        continue;
                    };
                    let inbound: Vec<(Arc<Channel>, usize)> = inb
                        .chans
                        .iter()
                        .flat_map(|vcs| vcs.iter().enumerate().map(|(vc, c)| (c.clone(), vc)))
                        .collect();
                    let outbound = line.hop_from(pos, forward).cloned();
                    let chip = line.chips[pos];
                    // Where a 2D route turning here goes on: the crossing line's hops.
                    let turn = routing.crossing(chip, li).map(|(cl, cp)| {
                        Box::new(Turn {
                            line: cl,
                            pos: cp,
                            hops: [false, true].map(|f| lines[cl].hop_from(cp, f).cloned()),
                        })
                    });
                    let wake = inb.wake.clone();
                    let r = Arc::new(Router::new(
                        chip, li, forward, pos, prev, inbound, outbound, turn, wake,
                    ));
                    for (c, _) in &r.inbound {
                        let _ = c.router.set(Arc::downgrade(&r));
                    }
                    routers.push(r);
                }
            }
        }
        let inner = Arc::new(Inner::new(spec, memories, lines, routing, channels, remote));
        let fabric = Fabric {
            inner: inner.clone(),
            threads: Mutex::new(Vec::new()),
        };
        for r in routers {
            let name = format!(
                "fabric-c{}-a{}{}",
                r.chip,
                r.line,
                if r.forward { '+' } else { '-' }
            );
            let inn = inner.clone();
            let r2 = r.clone();
            let h = thread::Builder::new()
                .name(name.clone())
                .stack_size(ROUTER_STACK)
                .spawn(move || {
                    ttmesh_placement::place_current_thread(
                        ttmesh_placement::ThreadRole::Router,
                        r2.chip,
                    );
                    r2.run(inn)
                })
                .map_err(|e| invalid(format!("cannot start router thread {name}: {e}")))?;
            // Set before `new` returns, so no packet can be published to an unknown consumer.
            let _ = r.wake.thread.set(h.thread().clone());
            inner.router_threads.lock().push(h.thread().clone());
            fabric.threads.lock().push(h);
        }
        Ok(fabric)
    }

    pub fn config(&self) -> FabricConfig {
        self.inner.spec.config
    }

    pub fn spec(&self) -> &FabricSpec {
        &self.inner.spec
    }

    pub fn num_chips(&self) -> u32 {
        self.inner.spec.num_chips
    }

    /// Router threads running (one per chip, line and direction with an inbound link).
    pub fn router_count(&self) -> usize {
        self.threads.lock().len()
    }

    fn check_chip(&self, chip: u32) -> Result<()> {
        let n = self.inner.spec.num_chips;
        if chip >= n {
            return Err(FabricError::NoSuchChip { chip, num_chips: n });
        }
        Ok(())
    }

    /// A handle for kernels running on `chip`.
    pub fn sender(&self, chip: u32) -> Result<FabricSender> {
        self.check_chip(chip)?;
        Ok(FabricSender::new(self.inner.clone(), chip))
    }

    /// The line and direction of the first hop and the hop count of the route from `src`
    /// to `dst` (on a 2D fabric the route may turn onto a row later: see `route_chips`).
    pub fn route(&self, src: u32, dst: u32) -> Result<RouteInfo> {
        let p = self.path(src, dst)?;
        let dir = if p.forward {
            Dir::Forward
        } else {
            Dir::Backward
        };
        Ok(RouteInfo {
            line: LineDir { axis: p.line, dir },
            hops: p.hops,
        })
    }

    /// Every chip a packet from `src` to `dst` passes, `src` first and `dst` last.
    pub fn route_chips(&self, src: u32, dst: u32) -> Result<Vec<u32>> {
        let p = self.path(src, dst)?;
        let inner = &self.inner;
        let mut chips = vec![src];
        let start = (p.line, p.pos, p.forward);
        inner
            .routing
            .walk(&inner.lines, start, p.route, |_, _, _, c, _| chips.push(c));
        Ok(chips)
    }

    fn path(&self, src: u32, dst: u32) -> Result<crate::route::Path> {
        self.check_chip(src)?;
        self.check_chip(dst)?;
        if self.inner.spec.config == FabricConfig::Disabled {
            return Err(FabricError::Disabled { chip: src });
        }
        if src == dst {
            return Err(FabricError::InvalidArgument(format!(
                "chip {src} to itself crosses no link: there is no route to show"
            )));
        }
        self.inner.path(src, dst)
    }

    /// Modeled device time to move `bytes` from `src` to `dst` in default-size packets.
    pub fn modeled_transfer_ns(&self, src: u32, dst: u32, bytes: usize) -> Result<f64> {
        let p = &self.inner.spec.params;
        let hops = if src == dst {
            0
        } else {
            self.route(src, dst)?.hops
        };
        Ok(p.transfer_ns(bytes, hops, p.default_payload_bytes))
    }

    /// Waits until semaphore `sem` on `chip` reaches `at_least`, then subtracts `at_least`
    /// (so the same semaphore serves every replay of a trace). Fails early, naming the link,
    /// if an increment of this semaphore was lost on the way.
    pub fn wait_semaphore(
        &self,
        chip: u32,
        sem: u32,
        at_least: u64,
        timeout: Duration,
    ) -> Result<()> {
        self.wait_semaphore_spinning(chip, sem, at_least, timeout, sem_spin())
    }

    /// Checks a semaphore wait makes before it sleeps, unless the caller knows better
    /// (`TTMESH_SEM_SPIN` sets it; 256 by default).
    pub fn default_semaphore_spins() -> u32 {
        sem_spin()
    }

    /// `wait_semaphore`, checking up to `spins` times (yielding the core every 16th) before
    /// sleeping: a caller whose peers each have a core of their own may spin longer.
    pub fn wait_semaphore_spinning(
        &self,
        chip: u32,
        sem: u32,
        at_least: u64,
        timeout: Duration,
        spins: u32,
    ) -> Result<()> {
        self.check_chip(chip)?;
        let inner = &self.inner;
        let t = &inner.sems[chip as usize];
        let _announced = crate::remote::RemoteWait::begin(inner.remote.as_deref());
        // Spin (then yield) before sleeping on the condvar: a collective's increment usually
        // comes from a peer running on the other core within microseconds, and a sleep costs
        // a futex wake and a context switch on the critical path.
        for i in 0..spins {
            {
                let mut g = t.vals.lock();
                if let Some(v) = g.get_mut(&sem).filter(|v| **v >= at_least) {
                    *v -= at_least;
                    return Ok(());
                }
            }
            if inner.aborted.load(Relaxed) || inner.shutdown.load(Relaxed) {
                break;
            }
            if i % SEM_YIELD_EVERY == SEM_YIELD_EVERY - 1 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // The clock is read only once the spin found nothing (most waits end in it: no read).
        let start = Instant::now();
        let deadline = start + timeout;
        let mut g = t.vals.lock();
        loop {
            let v = g.get(&sem).copied().unwrap_or(0);
            if v >= at_least {
                if at_least > 0 {
                    g.insert(sem, v - at_least);
                }
                return Ok(());
            }
            let fail = |waited| FabricError::SemaphoreWait {
                sem,
                chip,
                wanted: at_least,
                saw: v,
                waited,
                cause: inner.loss_cause(chip),
            };
            if inner.shutdown.load(SeqCst) {
                return Err(FabricError::ShutDown);
            }
            if let Some(e) = inner.abort_error() {
                return Err(e);
            }
            if inner.take_lost_sem(chip, sem) {
                let ms = Duration::from_millis(start.elapsed().as_millis() as u64);
                return Err(fail(ms));
            }
            if Instant::now() >= deadline {
                return Err(fail(timeout));
            }
            t.cv.wait_until(&mut g, deadline);
        }
    }

    /// Reads `chip`'s own memory at `src`, as a kernel on `chip` would (no link is crossed):
    /// for a thread that runs `chip`'s part of an algorithm while `chip`'s kernel waits.
    pub fn read_local(&self, chip: u32, src: NocAddr, out: &mut [u8]) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .read(src, out)
            .map_err(FabricError::read_failed(chip, src))
    }

    /// Like [`Fabric::read_local`], handing the bytes to `f` in place (`ChipMemory::read_with`).
    pub fn read_local_with(
        &self,
        chip: u32,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .read_with(src, len, f)
            .map_err(FabricError::read_failed(chip, src))
    }

    /// [`Fabric::read_local_with`] that never waits for a lock (`ChipMemory::try_read_with`):
    /// Ok(false) when the bytes cannot be had at once. For a fill running under another
    /// chip's memory lock (`FabricSender::write_with_and_inc`).
    pub fn try_read_local_with(
        &self,
        chip: u32,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .try_read_with(src, len, f)
            .map_err(FabricError::read_failed(chip, src))
    }

    /// Hands `chip`'s `len` bytes at `dest` to `f` to fill in place (`ChipMemory::write_with`),
    /// as a kernel on `chip` computing its output straight into its memory would: the local
    /// counterpart of [`Fabric::read_local_with`] (no link is crossed, no packet counted).
    pub fn write_local_with(
        &self,
        chip: u32,
        dest: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .write_with(dest, len, f)
            .map_err(|source| FabricError::WriteFailed {
                chip,
                src: chip,
                addr: dest.to_string(),
                source,
            })
    }

    /// Hints that `chip`'s `len` bytes at `src` will be read soon (`ChipMemory::prefetch`);
    /// an unknown chip is ignored, as the hint reads nothing.
    pub fn prefetch_local(&self, chip: u32, src: NocAddr, len: usize) {
        if let Some(m) = self.inner.mems.get(chip as usize) {
            m.prefetch(src, len);
        }
    }

    /// Writes `chip`'s own memory at `dest`, as a kernel on `chip` would (no link is crossed,
    /// no packet counted): the local counterpart of [`Fabric::read_local`].
    pub fn write_local(&self, chip: u32, dest: NocAddr, data: &[u8]) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .write(dest, data)
            .map_err(|source| FabricError::WriteFailed {
                chip,
                src: chip,
                addr: dest.to_string(),
                source,
            })
    }

    pub fn semaphore_value(&self, chip: u32, sem: u32) -> Result<u64> {
        self.check_chip(chip)?;
        Ok(self.inner.sems[chip as usize]
            .vals
            .lock()
            .get(&sem)
            .copied()
            .unwrap_or(0))
    }

    /// Zeroes every semaphore on `chip` and forgets packets lost on the way to it.
    pub fn reset_semaphores(&self, chip: u32) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.sems[chip as usize].vals.lock().clear();
        self.inner.clear_losses(chip);
        Ok(())
    }

    /// Stops the fabric taking new work after a collective failed on `chip` with `cause`
    /// (the first cause is kept; later ones are its consequences). Every running and later
    /// `wait_semaphore` and send fails at once with [`FabricError::Aborted`] naming it, so
    /// the other chips of the collective end now instead of at their timeouts, and nothing
    /// runs on semaphores and slots the failed collective left half used. Packets already in
    /// flight are still delivered or lost as usual. [`Fabric::recover`] ends the state.
    pub fn abort(&self, chip: u32, cause: FabricError) {
        if let (true, Some(r)) = (self.stop(chip, cause.clone()), &self.inner.remote) {
            r.aborted(chip, &cause);
        }
    }

    /// [`Fabric::abort`] at another process's word (a rank whose collective failed): stops
    /// this fabric the same way without telling the others again.
    pub fn abort_from_elsewhere(&self, chip: u32, cause: FabricError) {
        self.stop(chip, cause);
    }

    /// True if `chip` is held by another process (see [`crate::RemoteChips`]).
    pub fn is_remote(&self, chip: u32) -> bool {
        self.inner.held_elsewhere.get(chip as usize).copied() == Some(true)
    }

    /// Adds `by` to semaphore `sem` of `chip`, as a delivered increment does: what the
    /// transport calls for an increment another process sent to a chip held here.
    pub fn add_semaphore(&self, chip: u32, sem: u32, by: u64) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.sem_add(chip, sem, by);
        Ok(())
    }

    /// Sets the failure if none is set; true if this call set it.
    fn stop(&self, chip: u32, cause: FabricError) -> bool {
        let inner = &self.inner;
        let mut first = false;
        {
            let mut f = inner.failure.lock();
            if f.is_none() {
                let cause = match cause {
                    FabricError::Aborted { .. } => return false,
                    c => Box::new(c),
                };
                *f = Some(FabricError::Aborted { chip, cause });
                first = true;
            }
            inner.aborted.store(true, SeqCst);
        }
        for s in &inner.sems {
            let _g = s.vals.lock();
            s.cv.notify_all();
        }
        first
    }

    /// The error the fabric answers with while aborted (see [`Fabric::abort`]).
    pub fn failure(&self) -> Option<FabricError> {
        self.inner.abort_error()
    }

    /// Brings an aborted fabric back to a defined state: waits (up to `timeout`) until no
    /// packet is in flight and no router pass runs, then zeroes every chip's semaphores,
    /// forgets recorded losses and lifts the abort. The caller must make sure no kernel uses
    /// the fabric meanwhile (the mesh calls it once every chip's queues are idle). If packets
    /// are still in flight at the timeout, the fabric stays aborted and the error says so.
    pub fn recover(&self, timeout: Duration) -> Result<()> {
        let inner = &self.inner;
        let deadline = Instant::now() + timeout;
        loop {
            let busy = inner.channels.iter().filter(|c| c.len() > 0).count();
            if busy == 0 {
                break;
            }
            if inner.shutdown.load(SeqCst) {
                return Err(FabricError::ShutDown);
            }
            if Instant::now() >= deadline {
                return Err(FabricError::ResetFailed {
                    what: format!(
                        "{busy} channels still held packets after {timeout:?}{}",
                        inner.fault_note()
                    ),
                });
            }
            inner.wake_all();
            thread::sleep(Duration::from_millis(1));
        }
        // A pass that took the last packet may still be delivering it.
        for ch in &inner.channels {
            if let Some(r) = ch.router() {
                r.quiesce();
            }
        }
        for chip in 0..inner.spec.num_chips as usize {
            inner.sems[chip].vals.lock().clear();
            inner.clear_losses(chip as u32);
        }
        let mut f = inner.failure.lock();
        inner.aborted.store(false, SeqCst);
        *f = None;
        Ok(())
    }

    /// Counters of every link, both directions (a-to-b first), in spec order.
    pub fn link_stats(&self) -> Vec<LinkStats> {
        let inner = &self.inner;
        let mut out = Vec::with_capacity(inner.spec.links.len() * 2);
        for (i, link) in inner.spec.links.iter().enumerate() {
            for (d, direction) in [LinkDirection::AToB, LinkDirection::BToA]
                .into_iter()
                .enumerate()
            {
                let c = &inner.counters[i][d];
                let (packets, payload, slow_ps) = inner.link_chans[i][d]
                    .iter()
                    .map(|ch| ch.totals())
                    .fold((0, 0, 0), |a, t| (a.0 + t.0, a.1 + t.1, a.2 + t.2));
                let (from_chip, to_chip) = if d == 0 {
                    (link.a.0, link.b.0)
                } else {
                    (link.b.0, link.a.0)
                };
                out.push(LinkStats {
                    link_index: i,
                    link: *link,
                    direction,
                    from_chip,
                    to_chip,
                    packets,
                    bytes: payload + packets * inner.spec.params.header_bytes as u64,
                    payload_bytes: payload,
                    credit_stalls: c.credit_stalls.load(Relaxed),
                    dropped: c.dropped.load(Relaxed),
                    corrupted: c.corrupted.load(Relaxed),
                    busy_ns: inner.spec.params.busy_ns(packets, payload, slow_ps),
                    fault: inner.faults[i].get(),
                });
            }
        }
        out
    }

    fn check_link(&self, link_index: usize) -> Result<()> {
        let n = self.inner.spec.links.len();
        if link_index >= n {
            return Err(FabricError::InvalidArgument(format!(
                "link index {link_index} does not exist: the spec has {n} links (0..{n})"
            )));
        }
        Ok(())
    }

    /// Injects a fault on link `link_index` (index into `FabricSpec::links`), both directions.
    pub fn inject(&self, link_index: usize, fault: Fault) -> Result<()> {
        self.check_link(link_index)?;
        match fault {
            Fault::Slow { factor } if !(factor.is_finite() && factor >= 1.0) => {
                return Err(FabricError::InvalidArgument(format!(
                    "Fault::Slow factor {factor} must be a finite number >= 1"
                )))
            }
            Fault::Drop { every_nth: 0 } | Fault::Corrupt { every_nth: 0 } => {
                return Err(FabricError::InvalidArgument(
                    "every_nth is 0; use 1 to hit every packet".into(),
                ))
            }
            _ => {}
        }
        self.inner.faults[link_index].set(Some(fault));
        Ok(())
    }

    pub fn clear_fault(&self, link_index: usize) -> Result<()> {
        self.check_link(link_index)?;
        self.inner.faults[link_index].set(None);
        Ok(())
    }

    /// Stops the routers and waits for them (the operation timeout, kept within 1..=10 s);
    /// a router stuck in a `ChipMemory::write` is named and left detached.
    /// Idempotent; also run on drop.
    pub fn shutdown(&self) -> Result<()> {
        self.inner.shutdown.store(true, SeqCst);
        self.inner.wake_all();
        let mut threads = std::mem::take(&mut *self.threads.lock());
        let grace = self
            .inner
            .spec
            .timeout
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
        let deadline = Instant::now() + grace;
        while threads.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            self.inner.wake_all();
            thread::sleep(Duration::from_millis(1));
        }
        let (done, stuck): (Vec<_>, Vec<_>) = threads.drain(..).partition(|h| h.is_finished());
        for h in done {
            let _ = h.join();
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            let names: Vec<String> = stuck
                .iter()
                .map(|h| h.thread().name().unwrap_or("?").to_string())
                .collect();
            Err(FabricError::ShutdownTimeout(format!(
                "router threads {} did not stop",
                names.join(", ")
            )))
        }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
