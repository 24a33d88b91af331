//! The progress thread: the one thread of this process that calls MPI.
//!
//! Why one thread and not `MPI_THREAD_MULTIPLE`: a big mesh's deliveries start on many
//! threads (routers, senders delivering on their own thread, dispatchers), and OpenMPI's
//! multi-threaded mode serialises them on its own locks anyway, while a blocked receive on
//! one thread cannot be bounded by a timeout. One thread that owns MPI (initialised
//! `MPI_THREAD_FUNNELED` from it) sends each rank's outbox (`outbox.rs`: fabric traffic
//! queued in the order it was given, so a write and the semaphore increment after it leave in
//! that order) as one message, and MPI keeps the order of messages between two ranks, so they
//! land in that order too. Other requests (host exchanges, attaching a mesh, finalize) come
//! on a channel. It never blocks in MPI: sends and receives are immediate and tested (a
//! receive only once a probe matched its message), so every wait here is the caller's,
//! bounded by its timeout, and a rank that dies mid-message cannot hold this thread.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::links::Incoming;
use crate::outbox::Outboxes;
use crate::wire::{self, Message, TAG_FABRIC, TAG_HEARTBEAT, TAG_HOST};

/// What the rest of the process asks of the progress thread (fabric traffic comes through
/// the outboxes instead: see `outbox.rs`).
pub(crate) enum Cmd {
    /// Look at the outboxes and the waits (rung by `Outboxes`).
    Wake,
    /// Deliver incoming fabric traffic of this mesh generation here from now on.
    Attach(Arc<Incoming>),
    /// Stop delivering traffic of this generation (the mesh closed).
    Detach(u32),
    /// This rank's part of a host exchange; every rank's comes back on `reply`.
    Exchange {
        data: Vec<u8>,
        reply: Sender<Result<Vec<Vec<u8>>, String>>,
        arrived: Arc<parking_lot::Mutex<Vec<bool>>>,
    },
    /// Complete every send (up to the deadline), then finalise MPI and end the thread.
    Finalize {
        deadline: Instant,
        done: Sender<bool>,
    },
    /// End the whole job (`MPI_Abort`) with this code.
    Abort(i32),
    /// Time OpenMPI's own `MPI_Allreduce` (f32 sum) of `bytes` per rank: the mean of `iters`
    /// calls after one warm-up, this rank's, in seconds. Every rank must ask, after a host
    /// exchange showed they are all here (the call blocks in MPI).
    TimeAllreduce {
        bytes: usize,
        iters: usize,
        reply: Sender<f64>,
    },
    /// Time OpenMPI's own `MPI_Barrier`: the mean of `iters` calls after one warm-up, this
    /// rank's, in seconds. Asked as [`Cmd::TimeAllreduce`] is (it blocks in MPI too).
    TimeBarrier { iters: usize, reply: Sender<f64> },
}

/// A send in flight: its request and the buffer MPI reads from until it completes.
struct InFlight {
    req: Request<'static, [u8], StaticScope>,
    buf: Vec<u8>,
}

impl InFlight {
    fn start(world: &SimpleCommunicator, to: u32, tag: i32, buf: Vec<u8>) -> Self {
        // SAFETY: MPI reads the buffer until the request completes; the Vec's heap block does
        // not move when the Vec does, and it is neither changed nor freed before `finish`
        // saw the request complete (or the job is aborted).
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr(), buf.len()) };
        let req = world
            .process_at_rank(to as i32)
            .immediate_send_with_tag(StaticScope, bytes, tag);
        InFlight { req, buf }
    }

    /// The buffer back if the send is done, else the send still in flight.
    fn finish(self) -> Result<Vec<u8>, InFlight> {
        match self.req.test() {
            Ok(_) => Ok(self.buf),
            Err(req) => Err(InFlight { req, buf: self.buf }),
        }
    }
}

/// A receive in flight: a message matched from one rank whose bytes MPI is still copying
/// into `buf` (a large message is pulled from the sender once matched; if the sender dies
/// meanwhile, the copy never ends, so it is tested, never waited for: a blocking receive
/// here once held this thread, and with it the silence check, forever).
struct Receiving {
    req: Request<'static, [u8], StaticScope>,
    buf: Vec<u8>,
    len: usize,
    tag: i32,
}

impl Receiving {
    fn start(msg: mpi::point_to_point::Message, tag: i32, mut buf: Vec<u8>, len: usize) -> Self {
        if buf.len() < len {
            buf.resize(len, 0);
        }
        // SAFETY: MPI writes the buffer until the request completes; the Vec's heap block
        // does not move when the Vec does, and it is neither read, changed nor freed before
        // `finish` saw the request complete (or the job is aborted).
        let bytes: &'static mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), len) };
        let req = msg.immediate_matched_receive_into(StaticScope, bytes);
        Receiving { req, buf, len, tag }
    }

    /// The tag, the buffer and the message's length (its first bytes) if the receive is done.
    fn finish(self) -> Result<(i32, Vec<u8>, usize), Receiving> {
        match self.req.test() {
            Ok(_) => Ok((self.tag, self.buf, self.len)),
            Err(req) => Err(Receiving { req, ..self }),
        }
    }
}

/// A host exchange under way.
struct Exchange {
    parts: Vec<Option<Vec<u8>>>,
    reply: Sender<Result<Vec<Vec<u8>>, String>>,
    arrived: Arc<parking_lot::Mutex<Vec<bool>>>,
}

/// How long after the last traffic (in or out), or the last wait begun here, the progress
/// thread polls without sleeping, yielding the core between polls: a timed sleep costs at
/// least the kernel's timer slack (~50 us) per hop, which small collectives feel.
const HOT: Duration = Duration::from_millis(1);

/// Past `HOT`, how long it sleeps between polls while a thread here waits for another rank
/// or a send is incomplete. With nothing awaited it sleeps until a heartbeat is due or its
/// bell rings.
const ATTENTIVE: Duration = Duration::from_micros(50);

/// How long after fabric traffic last came in the thread stays attentive though nobody here
/// waits: the sender's credits wait for this rank's confirmation, and a stream's next
/// batch usually follows within it. Past it, a resumed stream's first confirmation may
/// wait for the next heartbeat.
const WARM: Duration = Duration::from_millis(10);

/// How often a rank tells each other rank it is alive, when it sent it nothing else.
const HEARTBEAT: Duration = Duration::from_millis(100);

/// Send buffers kept for reuse (a large transfer's batches would otherwise fault in fresh
/// pages for every one).
const SPARE_BUFFERS: usize = 8;

/// The progress thread's state between passes.
struct Progress {
    world: SimpleCommunicator,
    me: u32,
    size: u32,
    out: Arc<Outboxes>,
    sends: Vec<InFlight>,
    spare: Vec<Vec<u8>>,
    /// Per rank: a message whose bytes are still arriving, and the buffer reused for the next.
    receiving: Vec<Option<Receiving>>,
    recv_bufs: Vec<Vec<u8>>,
    attached: Option<Arc<Incoming>>,
    /// Fabric traffic for a mesh this rank has not opened yet (another rank got there
    /// first): each message alone, with its sender.
    early: Vec<(u32, Vec<u8>)>,
    host_inbox: Vec<VecDeque<Vec<u8>>>,
    exchange: Option<Exchange>,
    next_seq: u32,
    last_heard: Vec<Instant>,
    last_sent: Vec<Instant>,
    /// Per rank: fabric messages taken from it, and how many of those it was told of.
    taken: Vec<u64>,
    told: Vec<u64>,
    /// When fabric traffic last came in (see `WARM`).
    last_fabric_in: Instant,
    /// The mesh generation a silent rank was last reported to, per rank (once per mesh).
    reported: Vec<Option<u32>>,
    silence: Duration,
}

/// Started by `Transport::start`: reports (rank, size) and the outboxes, or None if MPI would
/// not start, on `ready`, then serves `cmds` until finalised.
pub(crate) fn run(
    cmds: Receiver<Cmd>,
    bell: Sender<Cmd>,
    ready: Sender<Option<(u32, u32, Arc<Outboxes>)>>,
    silence: Duration,
) {
    precise_sleeps();
    let Some((universe, _level)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
        let _ = ready.send(None);
        return;
    };
    let world = universe.world();
    let (me, size) = (world.rank() as u32, world.size() as u32);
    let out = Arc::new(Outboxes::new(size, bell));
    let _ = ready.send(Some((me, size, out.clone())));
    let start = Instant::now();
    let mut p = Progress {
        world,
        me,
        size,
        out,
        sends: Vec::new(),
        spare: Vec::new(),
        receiving: (0..size).map(|_| None).collect(),
        recv_bufs: vec![Vec::new(); size as usize],
        attached: None,
        early: Vec::new(),
        host_inbox: vec![VecDeque::new(); size as usize],
        exchange: None,
        next_seq: 0,
        last_heard: vec![start; size as usize],
        last_sent: vec![start; size as usize],
        reported: vec![None; size as usize],
        taken: vec![0; size as usize],
        told: vec![0; size as usize],
        last_fabric_in: start,
        silence,
    };
    let mut last_traffic = Instant::now();
    let mut waits_seen = 0u64;
    loop {
        let waits = p.out.waits_begun();
        if waits != waits_seen {
            waits_seen = waits;
            last_traffic = Instant::now();
        }
        let attentive = p.out.someone_waits()
            || p.in_flight()
            || p.exchange.is_some()
            || p.out.unconfirmed()
            || p.last_fabric_in.elapsed() < WARM;
        let first = if last_traffic.elapsed() < HOT {
            std::thread::yield_now();
            cmds.try_recv().ok()
        } else if attentive {
            wait_for(&cmds, ATTENTIVE)
        } else if p.out.may_sleep() {
            let got = wait_for(&cmds, p.until_heartbeat());
            p.out.awake();
            got
        } else {
            cmds.try_recv().ok()
        };
        let mut busy = false;
        let mut first = first;
        // Commands first, then what was queued: a burst of deliveries goes out before we look
        // for replies.
        while let Some(cmd) = first.take().or_else(|| cmds.try_recv().ok()) {
            match cmd {
                Cmd::Wake => {}
                Cmd::Finalize { deadline, done } => return p.finalize(deadline, done, universe),
                cmd => p.command(cmd),
            }
            busy = true;
        }
        busy |= p.send_queued();
        busy |= p.receive();
        // Confirmations of what was just taken leave at once.
        p.send_queued();
        p.serve_exchange();
        p.heartbeats();
        p.complete_sends();
        if busy {
            last_traffic = Instant::now();
        }
    }
}

/// Asks the kernel to end this thread's timed sleeps within about a microsecond of their
/// time: with Linux's default slack (50 us) an `ATTENTIVE` sleep lasted 104-124 us, and an
/// incoming message waits that long to be seen. Costs no CPU (a rank that arrived first at a
/// barrier left it 156-213 us after the last rank, 105-133 us with this; docs/ranks.md).
fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

/// The next command, waiting up to `t`; a closed channel (the transport went away) is a
/// finalize.
fn wait_for(cmds: &Receiver<Cmd>, t: Duration) -> Option<Cmd> {
    match cmds.recv_timeout(t) {
        Ok(c) => Some(c),
        Err(RecvTimeoutError::Timeout) => None,
        Err(RecvTimeoutError::Disconnected) => Some(Cmd::Finalize {
            deadline: Instant::now() + Duration::from_secs(5),
            done: crossbeam_channel::bounded(1).0,
        }),
    }
}

impl Progress {
    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Attach(inc) => {
                let g = inc.generation;
                self.early.retain(|(from, b)| {
                    match Message::decode(b).filter(|m| m.generation() == Some(g)) {
                        Some(m) => {
                            inc.deliver(*from, m);
                            false
                        }
                        None => true,
                    }
                });
                self.attached = Some(inc);
            }
            Cmd::Detach(g) => {
                if self.attached.as_ref().is_some_and(|a| a.generation == g) {
                    self.attached = None;
                }
            }
            Cmd::Exchange {
                data,
                reply,
                arrived,
            } => {
                // Fabric traffic queued before the exchange leaves before it.
                self.send_queued();
                let seq = self.next_seq;
                self.next_seq += 1;
                for r in self.others() {
                    let bytes = Message::Host { seq, data: &data }.encode();
                    self.send(r, TAG_HOST, bytes);
                }
                let mut parts = vec![None; self.size as usize];
                arrived.lock()[self.me as usize] = true;
                parts[self.me as usize] = Some(data);
                self.exchange = Some(Exchange {
                    parts,
                    reply,
                    arrived,
                });
            }
            Cmd::Abort(code) => self.world.abort(code),
            Cmd::TimeAllreduce {
                bytes,
                iters,
                reply,
            } => {
                let _ = reply.send(self.time_allreduce(bytes, iters));
            }
            Cmd::TimeBarrier { iters, reply } => {
                let _ = reply.send(self.time_barrier(iters));
            }
            Cmd::Wake | Cmd::Finalize { .. } => {}
        }
    }

    /// See [`Cmd::TimeAllreduce`]. As `scripts/mpi/allreduce_timing.c` times it, but out of
    /// place (rsmpi has no `MPI_IN_PLACE`).
    fn time_allreduce(&self, bytes: usize, iters: usize) -> f64 {
        use mpi::collective::{CommunicatorCollectives, SystemOperation};
        let n = bytes / 4;
        let send: Vec<f32> = (0..n)
            .map(|i| ((self.me as usize + i) % 7) as f32 * 0.25)
            .collect();
        let mut recv = vec![0f32; n];
        self.world
            .all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum());
        self.world.barrier();
        let start = Instant::now();
        for _ in 0..iters.max(1) {
            self.world
                .all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum());
        }
        start.elapsed().as_secs_f64() / iters.max(1) as f64
    }

    /// See [`Cmd::TimeBarrier`].
    fn time_barrier(&self, iters: usize) -> f64 {
        use mpi::collective::CommunicatorCollectives;
        self.world.barrier();
        let start = Instant::now();
        for _ in 0..iters.max(1) {
            self.world.barrier();
        }
        start.elapsed().as_secs_f64() / iters.max(1) as f64
    }

    /// Every rank but this one.
    fn others(&self) -> impl Iterator<Item = u32> + use<> {
        let me = self.me;
        (0..self.size).filter(move |&r| r != me)
    }

    fn send(&mut self, to: u32, tag: i32, bytes: Vec<u8>) {
        self.last_sent[to as usize] = Instant::now();
        self.sends
            .push(InFlight::start(&self.world, to, tag, bytes));
    }

    /// Sends each rank's outbox as one message; true if anything went.
    fn send_queued(&mut self) -> bool {
        if !self.out.take_pending() {
            return false;
        }
        let mut sent = false;
        for r in self.others() {
            let mut spare = self.spare.pop().unwrap_or_default();
            match self.out.take(r, &mut spare) {
                Some(batch) => {
                    self.send(r, TAG_FABRIC, batch);
                    sent = true;
                }
                None => self.spare.push(spare),
            }
        }
        sent
    }

    /// Takes everything that arrived, in the order each rank sent it; true if anything did.
    /// A message whose bytes are still on their way (a large one, copied in by the receiver
    /// once matched) stays in flight, and that rank's later messages wait behind it.
    fn receive(&mut self) -> bool {
        let mut any = false;
        for r in self.others() {
            let i = r as usize;
            if let Some(rv) = self.receiving[i].take() {
                if !self.complete(r, rv) {
                    continue;
                }
                any = true;
            }
            while let Some((msg, status)) = self
                .world
                .process_at_rank(r as i32)
                .immediate_matched_probe()
            {
                let n = status.count(u8::equivalent_datatype()).max(0) as usize;
                let buf = std::mem::take(&mut self.recv_bufs[i]);
                if !self.complete(r, Receiving::start(msg, status.tag(), buf, n)) {
                    break;
                }
                any = true;
            }
        }
        self.confirm_taken();
        any
    }

    /// Takes rank `from`'s message if its receive is done (true), else keeps it in flight.
    fn complete(&mut self, from: u32, rv: Receiving) -> bool {
        let i = from as usize;
        match rv.finish() {
            Ok((tag, buf, len)) => {
                self.take_message(from, tag, &buf[..len]);
                self.recv_bufs[i] = buf;
                true
            }
            Err(rv) => {
                self.receiving[i] = Some(rv);
                false
            }
        }
    }

    /// Files one whole message from rank `from`.
    fn take_message(&mut self, from: u32, tag: i32, bytes: &[u8]) {
        self.last_heard[from as usize] = Instant::now();
        match tag {
            TAG_HEARTBEAT => {}
            TAG_HOST => self.host_inbox[from as usize].push_back(bytes.to_vec()),
            _ => {
                self.last_fabric_in = Instant::now();
                let now = self.attached.as_ref().map(|a| a.generation);
                let mut confirmed = false;
                for m in wire::batch(bytes).map_while(|m| m) {
                    if let Message::Taken { upto } = m {
                        self.out.confirm(from, upto);
                        confirmed = true;
                        continue;
                    }
                    self.taken[from as usize] += 1;
                    match (&self.attached, m.generation()) {
                        (Some(inc), g) if g == now => inc.deliver(from, m),
                        (_, g) if g > now => self.early.push((from, m.encode())),
                        // A closed mesh's leftovers.
                        _ => {}
                    }
                }
                if let (true, Some(inc)) = (confirmed, &self.attached) {
                    inc.confirmations_arrived();
                }
            }
        }
    }

    /// Tells each rank that sent fabric messages since the last call how many were taken.
    fn confirm_taken(&mut self) {
        for r in self.others() {
            let i = r as usize;
            if self.taken[i] > self.told[i] {
                self.told[i] = self.taken[i];
                self.out.push_taken(r, self.taken[i]);
            }
        }
    }

    /// Completes the host exchange under way once every rank's part is here.
    fn serve_exchange(&mut self) {
        let Some(x) = self.exchange.as_mut() else {
            return;
        };
        for (r, inbox) in self.host_inbox.iter_mut().enumerate() {
            if x.parts[r].is_none() {
                if let Some(b) = inbox.pop_front() {
                    if let Some(Message::Host { data, .. }) = Message::decode(&b) {
                        x.parts[r] = Some(data.to_vec());
                        x.arrived.lock()[r] = true;
                    }
                }
            }
        }
        if x.parts.iter().all(Option::is_some) {
            let x = self.exchange.take().unwrap();
            let _ = x
                .reply
                .send(Ok(x.parts.into_iter().map(Option::unwrap).collect()));
        }
    }

    /// Tells ranks sent nothing lately that this one is alive, and reports ranks silent too
    /// long (ending the exchange or the mesh's waits, naming them).
    fn heartbeats(&mut self) {
        let now = Instant::now();
        for r in self.others() {
            let i = r as usize;
            if now - self.last_sent[i] >= HEARTBEAT {
                self.send(r, TAG_HEARTBEAT, Vec::new());
            }
            let quiet = now - self.last_heard[i];
            if quiet < self.silence {
                continue;
            }
            // An exchange waiting for a rank that went silent ends now, naming it.
            // Named as a mesh's waits name it (a chip it holds, the links to it), if a mesh
            // is open.
            if let Some(x) = self.exchange.take_if(|x| x.parts[i].is_none()) {
                let named = self
                    .attached
                    .as_ref()
                    .and_then(|m| m.silence_error(r, quiet));
                let _ = x.reply.send(Err(named.map_or_else(
                    || {
                        format!(
                            "rank {r} has sent nothing for {:.1} s (killed, stopped or hung)",
                            quiet.as_secs_f64()
                        )
                    },
                    |e| e.to_string(),
                )));
            }
            if let Some(inc) = self.attached.as_ref() {
                if self.reported[i] != Some(inc.generation) {
                    self.reported[i] = Some(inc.generation);
                    inc.rank_silent(r, quiet);
                }
            }
        }
    }

    /// How long until the next heartbeat is due (at least 1 ms).
    fn until_heartbeat(&self) -> Duration {
        let oldest = self.others().map(|r| self.last_sent[r as usize]).min();
        oldest.map_or(HEARTBEAT, |t| {
            (t + HEARTBEAT)
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        })
    }

    /// Frees the buffers of completed sends, keeping a few for the next batches.
    fn complete_sends(&mut self) {
        if self.sends.is_empty() {
            return;
        }
        let mut still = Vec::with_capacity(self.sends.len());
        for s in std::mem::take(&mut self.sends) {
            match s.finish() {
                Ok(buf) if self.spare.len() < SPARE_BUFFERS && buf.capacity() > 0 => {
                    self.spare.push(buf)
                }
                Ok(_) => {}
                Err(s) => still.push(s),
            }
        }
        self.sends = still;
    }

    /// True while a send or a receive is incomplete.
    fn in_flight(&self) -> bool {
        !self.sends.is_empty() || self.receiving.iter().any(Option::is_some)
    }

    /// Completes every send (up to `deadline`), then finalises MPI.
    fn finalize(
        mut self,
        deadline: Instant,
        done: Sender<bool>,
        universe: mpi::environment::Universe,
    ) {
        self.send_queued();
        // Keep taking what others send meanwhile, so their sends complete.
        self.attached = None;
        while self.in_flight() && Instant::now() < deadline {
            self.complete_sends();
            self.receive();
        }
        if self.in_flight() {
            // A send or receive that never completes cannot be dropped safely: end the job.
            let _ = done.send(false);
            self.world.abort(1);
        }
        drop(self.world);
        drop(universe);
        let _ = done.send(true);
    }
}
