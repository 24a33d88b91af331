//! The progress thread: the one thread of this process that calls MPI.
//!
//! Why one thread and not `MPI_THREAD_MULTIPLE`: a big mesh's deliveries start on many
//! threads (routers, senders delivering on their own thread, dispatchers), and OpenMPI's
//! multi-threaded mode serialises them on its own locks anyway, while a blocked receive on
//! one thread cannot be bounded by a timeout. One thread that owns MPI (initialised
//! `MPI_THREAD_FUNNELED` from it) takes commands from a channel in the order they were given,
//! so a write and the semaphore increment after it leave in that order, and MPI keeps the
//! order of messages between two ranks, so they land in that order too. It never blocks in
//! MPI: sends are immediate and tested, receives are probed, so every wait here is the
//! caller's, bounded by its timeout.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::Communicator;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::links::Incoming;
use crate::wire::{Message, TAG_FABRIC, TAG_HEARTBEAT, TAG_HOST};

/// What the rest of the process asks of the progress thread.
pub(crate) enum Cmd {
    /// Send fabric bytes to a rank.
    Fabric { to: u32, bytes: Vec<u8> },
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
}

/// A send in flight: its request and the buffer MPI reads from until it completes.
struct InFlight {
    req: Request<'static, [u8], StaticScope>,
    buf: *mut [u8],
}

impl InFlight {
    fn start(world: &mpi::topology::SimpleCommunicator, to: u32, tag: i32, bytes: Vec<u8>) -> Self {
        // MPI reads the buffer until the request completes; it is leaked here and taken back
        // in `finish`, after the request is complete.
        let buf: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
        let ptr: *mut [u8] = buf;
        let req = world
            .process_at_rank(to as i32)
            .immediate_send_with_tag(StaticScope, &*buf, tag);
        InFlight { req, buf: ptr }
    }

    /// Ok if done (the buffer freed), else the send still in flight.
    fn finish(self) -> Result<(), InFlight> {
        match self.req.test() {
            Ok(_) => {
                // SAFETY: `buf` came from `Box::leak` in `start`, and the only request that
                // read it has completed.
                drop(unsafe { Box::from_raw(self.buf) });
                Ok(())
            }
            Err(req) => Err(InFlight { req, buf: self.buf }),
        }
    }
}

/// A host exchange under way.
struct Exchange {
    parts: Vec<Option<Vec<u8>>>,
    reply: Sender<Result<Vec<Vec<u8>>, String>>,
    arrived: Arc<parking_lot::Mutex<Vec<bool>>>,
}

/// Started by `Transport::init`: reports (rank, size), or None if MPI would not start, on
/// `ready`, then serves `cmds` until finalised.
/// How long after its last message in or out the progress thread keeps polling instead of
/// sleeping between polls.
const HOT: Duration = Duration::from_millis(1);

/// How often a rank tells each other rank it is alive, when it sent it nothing else.
const HEARTBEAT: Duration = Duration::from_millis(100);

pub(crate) fn run(cmds: Receiver<Cmd>, ready: Sender<Option<(u32, u32)>>, silence: Duration) {
    let Some((universe, _level)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
        let _ = ready.send(None);
        return;
    };
    let world = universe.world();
    let (me, size) = (world.rank() as u32, world.size() as u32);
    let _ = ready.send(Some((me, size)));
    let mut sends: Vec<InFlight> = Vec::new();
    let mut attached: Option<Arc<Incoming>> = None;
    // Fabric traffic for a mesh this rank has not opened yet (another rank got there first).
    let mut early: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut host_inbox: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); size as usize];
    let mut exchange: Option<Exchange> = None;
    let mut next_seq = 0u32;
    let mut idle_since = Instant::now();
    let start = Instant::now();
    let mut last_heard = vec![start; size as usize];
    let mut last_sent = vec![start; size as usize];
    // The mesh generation a silent rank was last reported to, per rank (once per mesh).
    let mut reported: Vec<Option<u32>> = vec![None; size as usize];
    loop {
        let mut busy = false;
        // Commands first: a burst of deliveries goes out before we look for replies. Incoming
        // messages wake nobody (MPI progresses only inside our calls), so while traffic is
        // recent the loop polls, yielding the core between polls; a timed sleep costs at
        // least the kernel's timer slack (~50 us) per hop, which small collectives feel.
        // Idle longer, it sleeps up to 1 ms between polls.
        let idle = idle_since.elapsed();
        let first = if idle < HOT {
            std::thread::yield_now();
            cmds.try_recv().map_err(|e| match e {
                crossbeam_channel::TryRecvError::Empty => RecvTimeoutError::Timeout,
                crossbeam_channel::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            })
        } else {
            cmds.recv_timeout(Duration::from_millis(1))
        };
        let mut first = match first {
            Ok(c) => Some(c),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Cmd::Finalize {
                deadline: Instant::now() + Duration::from_secs(5),
                done: crossbeam_channel::bounded(1).0,
            }),
        };
        while let Some(cmd) = first.take().or_else(|| cmds.try_recv().ok()) {
            busy = true;
            match cmd {
                Cmd::Fabric { to, bytes } => {
                    last_sent[to as usize] = Instant::now();
                    sends.push(InFlight::start(&world, to, TAG_FABRIC, bytes))
                }
                Cmd::Attach(inc) => {
                    let g = inc.generation;
                    early.retain(|(from, b)| {
                        let mine =
                            matches!(Message::decode(b), Some(m) if generation_of(&m) == Some(g));
                        if mine {
                            inc.deliver(*from, b);
                        }
                        !mine
                    });
                    attached = Some(inc);
                }
                Cmd::Detach(g) => {
                    if attached.as_ref().is_some_and(|a| a.generation == g) {
                        attached = None;
                    }
                }
                Cmd::Exchange {
                    data,
                    reply,
                    arrived,
                } => {
                    let seq = next_seq;
                    next_seq += 1;
                    for r in (0..size).filter(|&r| r != me) {
                        let bytes = Message::Host { seq, data: &data }.encode();
                        sends.push(InFlight::start(&world, r, TAG_HOST, bytes));
                    }
                    let mut parts = vec![None; size as usize];
                    arrived.lock()[me as usize] = true;
                    parts[me as usize] = Some(data);
                    exchange = Some(Exchange {
                        parts,
                        reply,
                        arrived,
                    });
                }
                Cmd::Finalize { deadline, done } => {
                    while !sends.is_empty() && Instant::now() < deadline {
                        sends = sends.into_iter().filter_map(|s| s.finish().err()).collect();
                        // Keep taking what others send meanwhile, so their sends complete.
                        while let Some(probed) = world.any_process().immediate_matched_probe() {
                            let _ = probed.matched_receive_vec::<u8>();
                        }
                    }
                    let all_sent = sends.is_empty();
                    if !all_sent {
                        // A send that never completes cannot be dropped safely: end the job.
                        let _ = done.send(false);
                        world.abort(1);
                    }
                    drop(world);
                    drop(universe);
                    let _ = done.send(true);
                    return;
                }
                Cmd::Abort(code) => world.abort(code),
            }
        }
        // Then everything that arrived, in the order each rank sent it.
        while let Some(probed) = world.any_process().immediate_matched_probe() {
            busy = true;
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            let from = status.source_rank() as u32;
            last_heard[from as usize] = Instant::now();
            match status.tag() {
                TAG_HEARTBEAT => {}
                TAG_HOST => host_inbox[from as usize].push_back(bytes),
                _ => match (&attached, Message::decode(&bytes)) {
                    (Some(inc), Some(m)) if generation_of(&m) == Some(inc.generation) => {
                        inc.deliver(from, &bytes)
                    }
                    (_, Some(m)) if generation_of(&m) > attached.as_ref().map(|a| a.generation) => {
                        early.push((from, bytes))
                    }
                    // A closed mesh's leftovers (or bytes no rank of this version sends).
                    _ => {}
                },
            }
        }
        if let Some(x) = exchange.as_mut() {
            for (r, inbox) in host_inbox.iter_mut().enumerate() {
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
                let x = exchange.take().unwrap();
                let _ = x
                    .reply
                    .send(Ok(x.parts.into_iter().map(Option::unwrap).collect()));
            }
        }
        let now = Instant::now();
        for r in (0..size).filter(|&r| r != me) {
            let i = r as usize;
            if now - last_sent[i] >= HEARTBEAT {
                last_sent[i] = now;
                sends.push(InFlight::start(&world, r, TAG_HEARTBEAT, Vec::new()));
            }
            let quiet = now - last_heard[i];
            // An exchange waiting for a rank that went silent ends now, naming it.
            if let Some(x) = exchange.take_if(|x| quiet >= silence && x.parts[i].is_none()) {
                let _ = x.reply.send(Err(format!(
                    "rank {r} has sent nothing for {:.1} s (killed, stopped or hung)",
                    quiet.as_secs_f64()
                )));
            }
            if let Some(inc) = attached.as_ref().filter(|_| quiet >= silence) {
                if reported[i] != Some(inc.generation) {
                    reported[i] = Some(inc.generation);
                    inc.rank_silent(r, quiet);
                }
            }
        }
        if !sends.is_empty() {
            sends = sends.into_iter().filter_map(|s| s.finish().err()).collect();
        }
        if busy {
            idle_since = Instant::now();
        }
    }
}

/// The mesh generation a fabric message belongs to.
fn generation_of(m: &Message<'_>) -> Option<u32> {
    match *m {
        Message::Write { generation, .. }
        | Message::SemInc { generation, .. }
        | Message::Abort { generation, .. } => Some(generation),
        Message::Host { .. } => None,
    }
}
