//! `Fabric`: builds the lines, channels and routers from a `FabricSpec`, answers route
//! questions, hands out senders and shuts down. Beside it: semaphores (`semaphores.rs`), a
//! chip's own memory (`local.rs`), aborts, recovery and fault injection (`faults.rs`) and
//! link statistics (`stats.rs`).

mod faults;
mod local;
mod semaphores;
mod stats;

use crate::channel::{Channel, Wake};
use crate::config::*;
use crate::inner::{Hop, Inner, LineRt};
use crate::memory::ChipMemory;
use crate::route::Routing;
use crate::router::{Router, Turn};
use crate::sender::FabricSender;
use crate::FabricError;
use parking_lot::Mutex;
use std::collections::HashSet;

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
    if spec.channel_slots == 0 || spec.remote_channel_slots == 0 {
        return Err(invalid(format!(
            "channel_slots is {} and remote_channel_slots {}; every channel needs at least one \
             slot",
            spec.channel_slots, spec.remote_channel_slots
        )));
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
    held_elsewhere: &dyn Fn(u32) -> bool,
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
                    // Deeper where this process's packets cross to another's (see
                    // `FabricSpec::remote_channel_slots`); between two chips held elsewhere
                    // only routes passing through use them.
                    let slots = if held_elsewhere(to) && !held_elsewhere(from) {
                        spec.remote_channel_slots
                    } else {
                        spec.channel_slots
                    };
                    let ch = Arc::new(Channel::new(
                        slots,
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
        let held_elsewhere = |chip: u32| remote.as_ref().is_some_and(|r| r.is_remote(chip));
        let mut channels = Vec::new();
        let mut lines = Vec::new();
        for plan in plans {
            let n = plan.chips.len();
            let mut fwd = Vec::with_capacity(n);
            let mut bwd = Vec::with_capacity(n);
            for p in 0..n {
                fwd.push(build_hop(
                    &spec,
                    &held_elsewhere,
                    &plan.chips,
                    plan.ring,
                    p,
                    true,
                    &mut channels,
                ));
                bwd.push(build_hop(
                    &spec,
                    &held_elsewhere,
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

    /// True if `chip` is held by another process (see [`crate::RemoteChips`]).
    pub fn is_remote(&self, chip: u32) -> bool {
        self.inner.held_elsewhere.get(chip as usize).copied() == Some(true)
    }

    /// The process holding some chips here confirmed taking more of what was sent to it
    /// ([`crate::RemoteChips::confirmed`] grew): returns the credits that waited for it, waking
    /// the senders that wait for them.
    pub fn confirmations_arrived(&self) {
        for ch in &self.inner.channels {
            self.inner.release_confirmed(ch);
        }
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
