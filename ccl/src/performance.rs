//! Where the time of a collective goes, measured with perf on a 2-core host: what each
//! change to the data path, the scheduling and the fabric bought, with the A/B figures, and
//! what was tried and dropped. Documentation only: the code it describes lives in
//! `kernels` and in ttmesh-fabric.
//!
//! Small collectives (decode's 32x576 bf16 all_reduce; `perf record -g` on `ttmesh run
//! --hidden 576 --ffn 256 --tokens 32`) spent their time in the scheduler, not on data:
//! context switches 24% (sched_yield 13%, futex waits 10%), waking threads 12%, sched_yield's
//! own work 6%, against 5% memcpy and 5% matmul. Each ring step woke two threads per chip:
//! the receiving chip's router (a futex wake per packet burst) and then the receiving
//! dispatcher, asleep on its semaphore's condvar; all_reduce ran two kernels (reduce_scatter
//! and all_gather, 2(n-1) steps and a handshake each), and 32x576 over 8 chips (18 tiles) did
//! not split into whole tiles, so it took the element-wise path (untilize, convert each value,
//! tilize). What changed, and why:
//!
//! - Senders run the receiving routers themselves (`ttmesh_fabric`'s "Threads"): a
//!   neighbour write lands in the neighbour's memory on the sending thread, no router thread
//!   wakes. Semaphore waits check a few hundred times (yielding every 16th) before sleeping.
//!   That leaves at most one wake per step: the receiver's, when it was asleep.
//! - bf16/f32 all_reduce is one kernel (`CollectiveKind::AllReduce`) on pages split as evenly
//!   as the line allows: one launch, one handshake, no element-wise path for any shape.
//! - Every step of a ring still needed every chip's dispatcher thread to run, so with n
//!   dispatchers on 2 cores a step cost about n/2 context switches. Now the algorithms are
//!   step lists per chip (`kernels/steps.rs`), and a small collective runs *together*
//!   (`kernels/together.rs`): each chip's kernel reads and decodes its input on its own
//!   thread, registers at the collective's meeting and sleeps; the last to arrive runs every
//!   chip's steps, each as soon as what it receives was sent, through the fabric senders
//!   (packets, credits, faults, link statistics unchanged; receives still wait for their
//!   semaphores), then wakes the others, which write their outputs. One sleep and one wake
//!   per chip instead of ~n/2 switches per step; the same step lists run either way, so the
//!   bits are the same (a test compares the two runners). Waits are bounded: a chip missing
//!   from the meeting fails it after the operation timeout naming that chip, an aborted
//!   fabric ends it at once, and a waiter gives up if the runner makes no progress for the
//!   timeout. Large collectives still run on their own threads: one thread doing n chips'
//!   copies loses both cores (1 MiB on 8 chips: 3x slower together), so the rule was input
//!   <= 6 KiB x n per chip then (`StepRunner`, `TTMESH_CCL_RUNNER=together|own` to force one;
//!   retuned after the deferred launch below: see `together::wanted`).
//! - `MeshDevice::finish` paid two wake-ups per chip, chip after chip (the host queued an
//!   event, the dispatcher woke to record it, the host woke to see it). A chip's `finish`
//!   on a queue whose dispatcher sleeps with nothing queued now returns at once. On a loaded
//!   2-core host this alone took the 36 KiB all_reduce on 8 chips from ~480 to ~260 us.
//! - Measured after (perf on 2000 x 36 KiB all_reduce, 8 chips, together): ~20 context
//!   switches per collective (8 dispatcher wakes at launch, 7 at the meeting, the rest the
//!   host's); futex wake and switch ~30% of CPU, the runner ~130 us of ~260 us wall (memcpy
//!   11%, `DeviceMemory::write` 6%, the f32 add 6%, zeroing fresh scratch chunks 3-4%). On
//!   32 chips the runner's per-step overhead dominates (`DeviceMemory::write`'s locking and
//!   chunk lookup 10%, router passes 5%) along with ~100 switches per collective. Next
//!   gains: launching the line's programs with one deferred wake (as lockstep replays do),
//!   scratch kept across collectives (no zeroing), and a second runner thread for the other
//!   core.
//! - Measured next (perf on `ccl_one all_reduce t3k|galaxy 36864`, 32x576 bf16, 2-core host
//!   shared with other work): ~20 switches per collective on 8 chips and ~85 on 32 are at the
//!   floor of this design: every chip's dispatcher wakes once to run its kernel (it must: it
//!   orders the kernel after the chip's earlier commands) and every waiter once more to write
//!   its output; the host adds ~4 (its launches preempted by the dispatchers they wake) and one
//!   or two in `finish`. The runner's wakes of the 7 waiters cost ~10% of CPU on 8 chips.
//!   Tried and dropped, each measured A/B in one build: launching a line with wakes held back
//!   until the last launch, woken by the host or by the mesh's waker thread (no faster; the
//!   waker thread 10-20% slower); a second runner (a waiting chip's thread driving half the
//!   line, spinning on the other half's sends): no gain on 8 chips (more switches: yields),
//!   none measurable on 32 with the second core busy; SCHED_BATCH threads: 2-5x slower. Done:
//!   fabric waits read the clock only once their spin found nothing. What would pay: a kernel
//!   that completes after its dispatcher returns (the chip waits for it before the queue's next
//!   command or in `finish`), with the runner writing every chip's output, so waiters need no
//!   wake and the host itself can run the line when the queues are idle (0 switches); that
//!   needs the page kernels split into prologue / steps / epilogue. On 32 chips ~1 us per step:
//!   `DeviceMemory::write` (bank lock, chunk lookup; the zeroing of pooled chunks a 4 KiB
//!   slot only partly covers, 10% of CPU then, is gone: see the valid-bytes mark below) and
//!   the router pass.
//! - Done next: that deferred completion. A small all_reduce's kernel reads its input, hands
//!   its part to the meeting and returns (`Launched::Deferred`) unless it is the last to
//!   arrive; the last runs every chip's steps, and the steps write every chip's output (through
//!   `Fabric::write_local`), so no chip needs its thread back. The chip runs nothing after the
//!   kernel until the meeting is done (its next record, or `finish`, waits for it, bounded by
//!   the timeout, and reports its error). The kernel declares it never waits at launch
//!   (`Kernel::hands_off`), so the host runs it on its own thread when the chip's queue is
//!   idle: an untraced all_reduce on an idle mesh is then one thread's work end to end. perf
//!   stat on `ccl_one all_reduce t3k 36864 3000`: context switches 58,544 -> 845 (19.5 -> 0.3
//!   per collective), 1.12 -> 0.99 CPUs busy, wall 295 -> 166 us per collective; galaxy 36 KiB
//!   ~1.5 ms -> 1.06-1.34 ms. What is left is the runner's own work, ~1 us per step: memcpy
//!   19%, `DeviceMemory::write` 12% (bank lock, SipHash chunk lookup), the step bookkeeping
//!   10%, the fabric's transmit / router pass / send path ~12%. Inside a trace replay the
//!   queue's next record still waits for the line (a sleep and a wake per chip), as it must.
//!   With no switch left, one thread doing the line's work wins far further up: an all_reduce
//!   now runs together up to 256 KiB of input per chip (with two threads, below: 2 MiB on
//!   lines of 2 to 4 chips, 4 MiB on 5 to 8 and on 32, later 1 and 2 MiB; the A/B figures, re-measured after
//!   each change to the data path, are at `together::wanted`). The page reduce_scatter, and the all_gather whose
//!   blocks are runs of output pages, now write their outputs in steps and defer like the
//!   all_reduce; an all_gather with data above the gathered dim writes its output after the
//!   steps on each chip's thread, so its launches still wait and it keeps the old rule.
//!   From 64 KiB per chip a line runs on two threads (`kernels/pair.rs`): the meeting's
//!   and a helper thread, each taking whichever part has a step ready (a part is locked while
//!   one runs it), so the second core works too, still with no switch per step. The helper
//!   was first a worker of rayon's shared pool, whose wake-up woke a second worker that spun
//!   yielding on the line's cores (~40 context switches per collective); it is now a thread
//!   of ccl's own that spins 200 us after each job, then sleeps (`kernels/helper.rs`: 0.3
//!   switches per collective, line-2 1 MiB ~520 -> ~420 us on a host short of memory
//!   bandwidth). The widening and add loops run as AVX2 where the host has it
//!   (`ttmesh_chip::format::{widen_bf16, add_f32}`: they were 15% of a small all_reduce as
//!   SSE2), and later as AVX-512 where it has that (the bf16 add was ~20% of a 16 MiB
//!   all_reduce's CPU: t3k 27.2 -> 25.1 ms).
//! - Measured after all of this (`ttmesh bench ccl`, 2-core host, quiet): all_reduce 36 KiB
//!   on 8 chips ~135-150 us (was 266-292), on 32 chips ~850-1070 us (was ~1.6-1.8 ms);
//!   256 KiB on 8 chips 360-380 us (was 616-836). What is left per step is the emulation
//!   itself: the piece's copy into the neighbour's memory (memcpy and the bank lock, ~25%),
//!   the fabric's credit, packet and router bookkeeping (~15%), the sums (~15%). The runner reads slots and inputs in place through the
//!   fabric (`Fabric::read_local_with`), like a chip's own kernel, instead of copying them.
//!
//! Large collectives (16 MiB bf16 all_reduce on a T3K ring; `ccl_one` example under perf).
//! Before: memcpy 44%, page-fault work and zeroing ~15% (scratch chunks re-zeroed at every
//! collective), the element loops ~20%. Host passes per chip per collective: the input was
//! copied out of its pages (16 MiB) and decoded into f32 chunks of the whole tensor (32 MiB
//! written); each of the 7 reduce hops wrote the f32 chunk into the neighbour's slot (4 MiB),
//! copied the slot out (4 MiB) and added it into a chunk (read + write); each of the 7 gather
//! hops wrote the neighbour's slot, copied it out, and the output was written from those
//! copies at the end: ~370 MiB of memory traffic per chip, ~3 host copies per wire byte.
//! What changed:
//!
//! - The reduction is fused (`Step::Reduce`): per piece of 256 KiB of f32 sums, the input is
//!   decoded in place from its pages, the received partial sums are added in place from the
//!   slot (`DeviceMemory::read_in_place`, no copy), and the sum is sent on from a buffer still
//!   in cache. Only the chip's own chunk is ever held whole. Gather pieces are written to the
//!   output as they land. Per wire byte: one write into the neighbour's memory and one read
//!   there (two host passes); ~140 MiB of traffic per chip.
//! - Pieces are separate messages and semaphore increments, so the ring pipelines: a chip
//!   adds piece 0 while piece 1 is on the wire (`kernels/lists.rs`). Later measured: from 4
//!   chips on, each piece's wait costs more than the pipelining gives (the chips' threads
//!   already outnumber the cores), so chunks there move in at most two pieces, one from 16
//!   chips (`pages::piece_bytes`): t3k 16 MiB 32.7 -> 28.9 ms, galaxy 16 MiB 142 -> 126 ms.
//! - Memory reused from the pool is not zeroed up front: a chunk's valid-bytes mark reads
//!   the rest as zero, and transfers write front to back.
//! - Formats: partial sums stayed f32 on the wire then (twice a bf16 input's bytes), rounded
//!   once at the end; now they travel in the tensor's format, as tt-metal's do (see
//!   "Reduction order" and below). The gather moves the output format.
//!
//! Measured after (same host, 2 cores): CPU per 16 MiB all_reduce on 8 chips 148 -> ~113 ms
//! (`perf stat`, 40 iterations less setup), wall 62-64 ms (was 64-67): the element loops
//! and the neighbour writes are memory-bound streams (the decode and add loops stall on
//! their loads; 35% of CPU), and the ring's chips, 8 threads on 2 cores, now wait on each
//! other's pieces (1.6-1.7 CPUs busy of 2). OpenMPI on the same host moves half our reduce
//! bytes (f32 data, no f32 widening of bf16) in 20.6 ms. Next steps, measured estimates:
//! keeping bf16 partials as tt-metal does would cut reduce traffic from ~10 to ~6 MiB per
//! hop; running the whole line's pieces on one worker per core (as the small-collective
//! runner does with one) would keep both cores busy and the pieces in cache.
//!
//! Then, formats and passes (`ccl_one`, old and new binaries alternated on the same host):
//!
//! - Partial sums travel in the tensor's format: a bf16 hop is the input's bytes as they
//!   are plus what arrived, added in f32 and rounded once (`chip::format::add_bf16`, AVX2),
//!   never widened into memory. Reduce traffic per hop: input 2 + slot 2 + neighbour 2 bytes
//!   per element, was 2 + 4 + 4.
//! - The all_reduce's gather moves each piece from this chip's output straight into the
//!   neighbour's (`Step::PassOutput`), in one write per DRAM bank run of pages; it was
//!   neighbour slot, then a copy out into the work, then the output: 4 passes per byte
//!   instead of 12. Every write names the slot's semaphore and only the last adds to it, so a
//!   lost write still fails the wait.
//! - The own chunk is encoded piece by piece right after its last add, while in cache; for
//!   a bf16 output that last add is itself in bf16 and writes the output (`ReduceOut`), so
//!   the own chunk is never widened to f32 in memory (a line's middle position, joining two
//!   partial sums, keeps the f32 path).
//! - reduce_scatter on pages runs the same fused steps (chunks are page runs per slice
//!   above the scattered dim, read in place) and writes its output in steps, so a small one
//!   defers like the all_reduce.
//!
//! all_reduce t3k 16 MiB: 50-54 -> 30-36 ms; 1 MiB 2.6 -> 1.6-1.7 ms (1.8-2.0 in `bench
//! ccl`'s sequence); line-4 1 MiB ~1.0 -> 0.8-0.95 ms; galaxy 36 KiB 920-934 -> 775-781 us.
//! line-2 1 MiB went 492-528 -> 314-365 us, then back to 394-418 with `ReduceOut`: its two
//! dispatchers now reach the gather's wait sooner and switch more (10.5 vs 7.3 per
//! collective; longer spins make it worse). The cause, found later: the two threads parked
//! on each other's bank locks (below). reduce_scatter t3k 16 MiB 34-44 -> 29-30 ms, 1 MiB 2.3-2.5 -> 1.4-1.5 ms. perf
//! on the 16 MiB all_reduce now: memcpy 24%, the bf16 add 12% (its loads: the slot's bytes
//! come from memory), `DeviceMemory::write` 11% (its lock release waits for the copy's
//! stores), 1.7 of 2 CPUs busy: the passes are memory-bound. The same output-to-output
//! gather for all_gather was tried then and dropped: on line-2 it was faster (16 MiB: 3.9-4.9
//! vs 4.3-5.8 ms) but on the T3K ring slower (16 MiB: 28-41 vs 18.5-23 ms): the slot path's
//! large messages went to memory in a few big copies per chunk, the per-bank runs in
//! packet-sized ones, each copied into a channel slot and again into memory. Since messages
//! of two packets or more are lent to the first hop (one copy), it is back
//! (`pages::all_gather_direct`, when nothing lies above the gathered dim), and its launches
//! defer. A/B, medians of 5-7: line-2 36 KiB 40 -> 12 us, line-4 1 MiB 295 -> 228 us, t3k
//! 36 KiB 248 -> 228 us; t3k 3 MiB (decode's logits) 3.40 / 3.45 ms, 1 MiB and 16 MiB and
//! line-2 16 MiB within the noise of a busy host (t3k 16 MiB 20.1 / 21.2 ms). Sending this piece's gather right
//! after its encode (instead of in gather order) measured slower on line-2.
//!
//! Locks per packet: the slot's mutex (uncontended: one producer, one consumer), per
//! delivered write the bank's RwLock and one hash lookup per 16 KiB chunk, per semaphore
//! increment the chip's semaphore-table mutex and a condvar notify. The bank lock was held
//! for a whole call: a chip's thread adding a 256 KiB slot in place held its bank for the
//! whole piece, so the neighbour's thread delivering into that bank parked, two context
//! switches each on a 2-core host (perf, line-2 1 MiB on own threads: 12% of CPU in the lock's
//! park and wake paths, 1.2 of 2 CPUs busy). Chip memory now takes the lock per chunk:
//! line-2 on own threads 1 MiB 378-386 -> 301-319 us, 2 MiB 792 -> 561 us, 16 MiB 9.7-11.1
//! -> 7.6-8.1 ms; one-thread runs unchanged.
//!
//! Scratch footprint: slots are one per step, so a ring writes ~n slots per chip that no later
//! step reads (8 MiB more for the cache at 256 KiB on 32 chips; a timing-only run with every
//! slot aliased to two measured galaxy 256 KiB -14%, t3k 1 MiB -9%). A ring that runs together
//! now shares its slots' memory four ways (`together::alias_slots`): every slot write goes the
//! same way round, so each chip's slots have one writer, and the runner holds a write back
//! until the slots it would overwrite were read. galaxy 256 KiB 2900 -> 2580 us, 1 MiB 13.3
//! -> 12.0 ms. Own threads keep a slot per step: sharing there needs a credit back per slot,
//! one more wait per piece, and each wait costs (see `pages::piece_bytes`). Once the fabric
//! delivered one-hop messages directly, rings of more than 8 chips on one thread share at
//! every size (`together::ALIAS_LONG_ALONE`): galaxy 36 KiB 890 -> 791 us, 16 KiB 593 -> 557
//! us (medians of 5).
//!
//! Input reads (perf on all_reduce t3k 1 MiB: copying the input into the partial-sum buffer
//! was 19% of CPU, stalled on its loads). An input's consecutive pages sit in different DRAM
//! banks, each its own host allocation, so the CPU's prefetchers lose the stream every page.
//! On lines whose inputs reach 8 MiB in all (32 MiB since the sums are computed where they
//! land, below), input reads hint the cache four pages ahead
//! (`pages::prefetches_input`; below that the inputs come from the cache and the hints cost
//! more than they save). Reading the pages bank by bank instead, one stream per bank, gained
//! less (t3k 1 MiB about 5%). The fabric now lends every message of two or more packets to
//! the first hop, so the gather's per-bank runs (10-20 KiB) are one copy into the neighbour,
//! not a copy into the channel's slots and another out of them. `bench ccl`, the session's
//! first binary and its last alternated, two runs each: t3k 16 MiB efficiency 0.38 / 0.43
//! -> 0.40 / 0.40 (within the host's noise), galaxy 256 KiB 2847 / 3046 -> 2490 / 2336 us,
//! line-4 256 KiB 192 / 185 -> 195 / 164 us, line-2 256 KiB 89 / 91 -> 87 / 83 us.
//!
//! Step order on a line (a timeline of each step's start and end, line-2 1 MiB on own
//! threads: half of the two threads' CPU was spent waiting). The right end's list added its
//! own chunk (waiting for the left's sums) before it sent the left its sums, so the two chips
//! ran one after the other. A line's lists are now ordered by when each piece can be had
//! (`lists::line_reduce_steps`): each end sends its farthest chunk first and every position
//! takes pieces from both sides in arrival order; the gather likewise takes the left's and
//! the right's blocks as they come. A unit-time model of the lists (`lists` tests) gives the
//! busiest chip's steps plus the chains' fill; the old order took 2-4 units more. Sums are
//! unchanged (each chunk's order of adds is fixed). A/B, medians of 5: all_reduce line-2 1 MiB
//! 248 -> 188 us, 4 MiB 959 -> 729 us, 16 MiB 5.96 -> 4.40 ms; line-4 256 KiB 178 -> 137 us,
//! 1 MiB 553 -> 405 us; all_gather line-4 256 KiB 81 -> 73 us. A line of 2 now runs together
//! only up to 256 KiB (`together::wanted`), and from 64 KiB on two threads (256 KiB 78 -> 48
//! us), up to 1.5 MiB.
//!
//! Where a 16 MiB all_reduce on the T3K ring stands (the same timeline, 8 own threads): a
//! 1 MiB `Reduce` step takes ~210 us once its thread runs, so each chip's steps are ~5 ms and
//! the line's ~40 ms of work needs ~20 ms of two cores; collectives took 22-33 ms from the
//! first chip's start to the last one's end, with ~0.2 ms between them. `perf stat`: ~50 ms
//! of CPU per collective on own threads, ~46 ms with the pair runner (27.5 vs 28.3 ms wall),
//! 70% of it moving bytes (memmove, the bf16 add, the store drain at each write's unlock,
//! reads, cache hints). Measured and dropped: adding each piece 16 or 64 KiB at a time while
//! its input copy is in L1 (t3k 16 MiB 27.2 -> 29.8 / 28.6 ms: the whole-piece copy streams
//! better), and semaphore spins from 0 to 2048 (no difference at this size).
//!
//! On a host starved of memory bandwidth the picture is the bytes alone. One such host
//! (`perf bench mem memcpy`: 5-6 GB/s at 64 MB, 7 GB/s at 4 MB, 23 GB/s at 1 MB, so no L3
//! to speak of; the bench's M 11.4 GB/s for two threads): all_reduce t3k 16 MiB took 42-82
//! ms against OpenMPI's 31-48 ms there, line-2 1 MiB 429-577 us on own threads (paired,
//! median of 5: 619 us) against 205 us (the host above: t3k 16 MiB about even with OpenMPI
//! measured in the same hour, line-2 1 MiB 1.4-2.7x its time). perf: memmove, the bf16 add
//! and the stores drained at each write's unlock are ~55% of CPU. Each reduced byte crosses
//! memory about five times (input read, slot write and read, output write, the gather's
//! read), MPI's about three; the staging buffers (a piece's partial sums, a gather run) stay
//! in L2. Fewer passes need writes computed straight into another buffer of chip memory (an
//! output page from input and slot, a neighbour's slot from input and partials), with the
//! bank locks of two chips or two banks taken in one fixed order.
//!
//! A bf16 hop's sums are now written once (`Endpoint::input_plus_slot`): the received slot
//! is copied out 16 KiB at a time into an L1-sized block and the input read in place beside
//! it, `sums = input + slot` in one pass (`chip::format::sum_bf16`, the same bits as the add
//! it replaces). Before, the input was copied into the piece's buffer and the slot added
//! there, so a piece (1 MiB on a T3K at 16 MiB) was written, read and written again, mostly
//! beyond the L2. Alternated, medians of 5-7: all_reduce t3k 16 MiB 67.7 -> 57.5 ms, line-2
//! 16 MiB 10.8 -> 9.9 ms, galaxy 1 MiB 16.1 -> 15.0 ms; 1 MiB on line-2 and t3k, line-4 4 MiB
//! and the small sizes even. The input's cache hints now run a second cursor ahead instead
//! of listing the spans in a Vec: with one list per 16 KiB block, malloc's arena lock put
//! the pair runner's two threads to sleep (70% of its context switches). Tried and dropped:
//! sending each piece in parts of 16, 64 or 256 KiB as they are summed, the semaphore raised
//! by the last, so the sums are still in cache when the fabric copies them (t3k 16 MiB 52-54
//! ms every way, t3k 4 MiB 8.8 against 7.9 ms whole).
//!
//! A bf16 chunk's last add (`ReduceOut`) now writes its sums straight into the output's
//! memory (`DeviceMemory::write_with`, through the fabric as `Fabric::write_local_with` when
//! a runner does the chip's steps): each input page is copied into L1 and `input + slot`
//! computed in place in the output page, instead of into a piece buffer that `write_output`
//! then copied out (skipping that copy altogether, as an upper bound, took line-2 1 MiB from
//! 371 to 305 us). Alternated, medians of 7: line-2 1 MiB 398 -> 370 us, 256 KiB 106 -> 101
//! us, 16 MiB 8.57 -> 8.02 ms; line-4 1 MiB 992 -> 944 us (5); t3k and galaxy even (their
//! own chunk is one of 8 or 32).
//!
//! A line's middle positions (Fabric1D; decode's T3K is one) hold their own chunk in f32,
//! joining the left's and the right's partial sums. A bf16 input and the left's sums now go
//! into the f32 chunk in one pass (`sum_bf16_to_f32`; it was a decode and then an add over
//! the chunk), and the right's sums are added, rounded and written into the output in place
//! (`Step::AddPartialOut`; it was an add, an encode into a block and a copy of the block).
//! Alternated, medians of 7: line-4 256 KiB 288 -> 265 us, 1 MiB 907 -> 871 us, line-8 1 MiB
//! 2022 -> 1945 us; line-8 36 KiB and line-4 16 MiB within the noise.
//!
//! Launch: each chip's program key hashed the chip list, the chunk order and both specs
//! (SipHash, ~3% of a small collective; on 32 chips 32 such hashes per collective). The line's
//! part is now hashed once and each chip's key is (line key, position): galaxy 4 KiB
//! all_reduce 230 -> 209 us, t3k 36 KiB 207 -> 177 us (medians of 7, alternated). Program
//! keys are now hashed with foldhash (`ttmesh_chip::program::program_key`): a chip's untraced
//! dispatch gained 15%, a small collective nothing measurable (line-2 4 KiB, t3k and galaxy
//! 36 KiB, 5 alternated runs each: within the host's noise). What is left
//! of a small collective's launch on 32 chips (galaxy 4 KiB, perf): the steps ~45%, the
//! lockstep output and scratch allocation and the scratch's free at the end (~8%: TT-NN
//! frees it too, and the allocator must match its addresses), command encoding and dispatch,
//! and malloc/free (~6%, spread over the meeting's bookkeeping).
//!
//! The fabric's send path per step (perf, `ccl_one all_reduce t3k 36864`, together): the
//! send was 43% of the time, of which the delivery's memory write 15%; the other ~28% was
//! the slot, the credit, the header and the receiving router's pass that the sending thread
//! ran itself. A one-hop message of up to a channel's worth of packets to an idle router now
//! skips all that (the fabric's direct delivery: see ttmesh-fabric's docs), keeping the link
//! statistics, the order and the fault behaviour. Alternated, medians of 5 (us): t3k 36 KiB
//! 184 -> 144 and, in a slower hour, 222 -> 185; galaxy 36 KiB 1152 -> 889 (of 3); line-2
//! 36 KiB 30.3 -> 26.5; line-4 256 KiB 256 -> 243 (of 3); t3k 256 KiB 634 -> 524 (of 3).
//! Sizes past a channel's worth per message (t3k 1 MiB, 16 MiB, line-2 16 MiB) are even.
//! Decode on t3k (24 tokens, same tokens): median step 83-89 -> 75-84 ms. The fabric then
//! found each send's route in a table built once instead of searching the lines (~2% of
//! galaxy 36 KiB in perf): medians of 5, 1010 -> 970 us. Its semaphore tables hash ids with
//! FxHash instead of SipHash (every increment and every wait's check hashes): medians of 5,
//! galaxy 36 KiB 962 -> 850 us, t3k 36 KiB 171.7 -> 159.1 us.
//!
//! Against same-host OpenMPI at large sizes (`allreduce_timing`, 2 and 8 ranks, in the same
//! hour): MPI's in-place all_reduce moves fewer bytes than TT-NN semantics allow, since it
//! reads and writes one buffer; an out-of-place MPI_Allreduce (a new output, as TT-NN's
//! all_reduce makes) took 2 ranks 16 MiB 4.0-4.6 ms against 3.0-3.6 in place, 8 ranks 16 MiB
//! 33-38 ms against 27. The bf16 chunk's last hop into its owner is now added at delivery
//! (`kernels/into.rs`): the sender adds its sums to the owner's input and writes the owner's
//! output through the fabric's computed write, instead of writing the owner's slot for the
//! owner to read back, add and write out. A timing-only build that skipped the slot's write
//! and read (wrong sums) bounded the gain first: line-2 16 MiB 6.6-8.0 -> 3.5-4.9 ms, 1 MiB
//! 327-336 -> 213-231 us. As built, alternated with the previous binary (`ccl_one`, medians
//! of 5): line-2 16 MiB 6720 -> 4904 us, 4 MiB 1428 -> 1258 us; line-4 16 MiB even (its middle
//! positions join two sides in f32 and keep their slots); 3 runs each: t3k 1 MiB 1.47-1.85 ->
//! 1.39-1.42 ms, line-2 1 MiB, t3k 36 KiB to 16 MiB, galaxy 36 KiB and line-2 4 KiB within
//! the noise. The owner's input is read per page on the sender's thread without cache hints:
//! hints four spans ahead in chunk order named pages the next read did not want (13% of CPU
//! until they were dropped there).
//!
//! Messages no longer than a channel. perf on the t3k 16 MiB all_reduce then: a `Reduce`
//! hop summed a whole piece (up to 1 MiB, past the L2) into a buffer and sent it as one
//! message, which the fabric lends to the first hop as packets (slots, credits, the router's
//! pass: ~8% of CPU in `Router::pass` under `Inner::reserve`); the gather's `PassOutput`
//! staged bank runs of up to ~90 KiB the same way. Both now go a message of at most 32 KiB
//! at a time (`steps::message_bytes`, bounded by `FabricSender::direct_message_bytes`):
//! summed into or read into an L1-sized buffer, then delivered on the sending thread with
//! one copy; every part names the slot's semaphore and the last raises it. Sending parts
//! was tried before the fabric delivered one-hop messages directly and gained nothing then
//! (above). A/B, medians of 5 in one build: t3k 16 MiB 44.5 -> 40.1 ms, 1 MiB 1.61 -> 1.44
//! ms; line-2 16 MiB 5.99 -> 4.81 ms; line-4 1 MiB 785 -> 751 us; line-2 1 MiB 353 -> 345
//! us; medians of 3: galaxy 1 MiB 10.6 -> 10.0 ms, reduce_scatter t3k 16 MiB 35.2 -> 32.1
//! ms, t3k 36 KiB and 256 KiB and all_gather t3k 1 MiB even. The slot path's blocks
//! (`SendBlock`: an all_gather with data above its dim) and f32 partial sums now go the same
//! way; all_gather of the benchmark's `[1, 1, rows, 1024]`, medians of 5: t3k 16 MiB 39.2 ->
//! 36.3 ms, 1 MiB 1504 -> 1400 us; line-2 16 MiB 6.21 -> 5.88 ms, 1 MiB 360 -> 344 us;
//! line-4 1 MiB 717 -> 670 us.
//!
//! At a line's end a `ReduceInto` has no slot: its sums are its input as it is. They were
//! copied whole into the piece buffer and then page by page beside the neighbour's input;
//! now each page of both inputs is read in one walk over the spans (the inputs sit at one
//! address; since then a whole bank run at once, below). Alternated, medians of 7: line-2 1 MiB 349 -> 318 us;
//! line-2 256 KiB (76.4 / 76.4 us) and line-4 4 MiB even.
//!
//! Tried and dropped: the output-to-output gather for an all_gather with data above its dim
//! (the benchmark's `[1, 1, rows, 1024]` gathered on the last dim: a block is 4 tiles of
//! every tile row on 8 chips). Its pages of one bank are never back to back, so every page
//! (2 KiB) was a message of its own. 3 runs each, slot path / direct: t3k 16 MiB 34.0 /
//! 31.4 ms, 1 MiB 1474 / 1202 us, 36 KiB 326 / 298 us; line-4 1 MiB 799 / 724 us; but line-2
//! 16 MiB 5.27 / 6.11 ms, where the slot path moves each block as one 8 MiB message. A
//! message that carries several runs (a scatter write) would serve both.
//! Also dropped: writing each received block into the output as it is taken (in 32 KiB
//! parts, from L1) instead of assembling the output after the steps, which let those
//! launches defer. Medians of 5 against the change above: t3k 1 MiB 1400 -> 1192 us, but t3k
//! 16 MiB 36.3 -> 42.6 ms, line-2 1 MiB 344 -> 483 us, line-4 1 MiB 670 -> 777 us (the line
//! then ran on the meeting's threads instead of each chip's own).
//!
//! A line's middle position (bf16 partials and output) no longer keeps its own chunk in f32
//! between its two adds: the `Reduce` of input plus the left's sums becomes a wait (`Hold`),
//! and when the right's piece arrives `JoinOut` adds input, left and right in that order a
//! block of 8192 elements at a time in L1 and writes the rounded sums into the output (the
//! same f32 adds, so the same bits). Per element of the own chunk that is 8 bytes of memory
//! traffic instead of 16 (the f32 sums' write and read). Alternated, medians of 7: line-4 16
//! MiB 20.6 -> 19.5 ms, 4 MiB 4.69 -> 4.11 ms, line-8 16 MiB 42.2 / 43.6 ms (the noise);
//! medians of 5: line-4 1 MiB 749 -> 721 us, line-8 1 MiB, line-4 256 KiB and line-8 36 KiB
//! even.
//!
//! Bank locks per page, and a gather's second pass. perf on reduce_scatter line-2 16 MiB: a
//! third of the input reads at a delivered sum (`ReduceInto`) was the bank's shared lock,
//! taken and dropped per 2 KiB page (its atomics, and the store drain they wait for). The
//! pages of one output run lie back to back in one bank, and so do their inputs, so they are
//! now read as one span per chip (`chip_io::copy_input_pages`). Alternated, medians of 5:
//! all_reduce line-2 1 MiB 264 -> 206 us, 4 MiB 952 -> 771 us, 16 MiB 3.64 -> 2.89 ms,
//! 256 KiB 71 -> 60 us; reduce_scatter line-2 16 MiB 2.86 -> 2.61 ms; t3k and line-4 even.
//! Then the gather: `PassOutput` read each bank run of this chip's output into a staging
//! buffer and the fabric copied that into the neighbour's output, two passes per wire byte.
//! A timing-only build that skipped the first (wrong bytes) bounded the gain at line-2 1
//! MiB 207 -> 167 us, t3k 1 MiB 1438 -> 1307 us, t3k 16 MiB 34.4 -> 32.1 ms. The fabric now
//! copies the run from memory to memory (`FabricSender::copy_and_inc`; on the packet path
//! it is read into staging as before). Alternated, medians of 7: line-2 1 MiB 207 -> 192
//! us, line-4 1 MiB 712 -> 669 us, t3k 36 KiB 127 -> 116 us, t3k 16 MiB 44.5 -> 41.0 ms (a
//! loaded hour), all_gather t3k 256 KiB 460 -> 344 us; t3k 1 MiB even (1377 / 1376 us; 1514
//! -> 1330 in an earlier run of 5).
//!
//! Blocks left in their slots. An all_gather with data above its dim (the benchmark's `[1, 1,
//! rows, 1024]` on the last dim) moved each received byte three times: the neighbour's write
//! into the slot, `TakeBlock`'s copy out into the work's block, and the output's assembly
//! from that block (a send also read the block into an L1 buffer first). Now a received
//! block stays in its slot: `PassSlot` has the fabric copy it from this chip's slot into the
//! neighbour's (`copy_and_inc`, memory to memory) and the output is assembled from the slots
//! 32 KiB at a time, so two passes per received byte; such lists keep a slot per step
//! (`together::alias_slots`). Alternated with the previous binary (`ccl_one all_gather`,
//! medians of 3-7): t3k 16 MiB 34.0 -> 29.8 ms, 1 MiB 1337 -> 1190 us, 36 KiB 346 -> 304 us;
//! line-2 16 MiB 5.75 -> 3.88 ms (4.64 -> 3.76 in five more), 1 MiB 312 -> 279 us; line-4
//! 16 MiB 14.6 -> 11.6 ms; galaxy 1 MiB 8.05 -> 6.12 ms; line-2 256 KiB (56.6 / 57.0 us) and
//! line-4 1 MiB (669 / 671 us) even.
//!
//! Tried and dropped: a ring's steps in piece order when one or two threads run the line
//! (every hop of piece 0, then of piece 1, ...; on a ring each hop waits only for the
//! neighbour's previous hop of the same piece), so a piece would travel round the ring while
//! its partial sums are in the cache, with pieces of 16-64 KiB. The same bits, but slower at
//! every size tried (`ccl_one all_reduce`, together): t3k 16 MiB with 64 KiB pieces 55.0 /
//! 56.1 ms in piece order against 41.4 / 46.1 in chunk order, 1 MiB with 32 KiB pieces 2.31
//! / 2.41 against 2.14 / 2.19 ms (the default's 64 KiB pieces: 1.69 / 1.59). Likely why, not
//! measured: a step's input is a few pages in each DRAM bank, each bank its own host
//! allocation, so small pieces read from many short streams that the prefetchers do not
//! follow, and the slots' reuse in the cache did not make up for it.
//!
//! The ring floor. `ttmesh bench ccl` now times, beside every all_reduce, the same ring
//! all_reduce done plainly on host arrays (ttmesh-benches' `ring_floor`: bf16 inputs, partial
//! sums rounded at each hop into the next chip's buffer, the gather copying output to output,
//! one pinned thread per core meeting at a barrier after each hop). It is a stricter
//! yardstick than same-host MPI: it was faster at every size in the second run below and at
//! all but one in the third (line-4 1 MiB 593 against 580 us); the first, a slow run for the
//! floor, lost at 1 MiB on 2, 4 and 8 chips and at t3k 16 MiB (32.0 against 27.4 ms). Three
//! full runs of `ttmesh bench ccl` in one hour (emulated / floor):
//! - t3k 16 MiB 44.8 / 32.0, 36.6 / 23.2, 44.0 / 18.4 ms; 1 MiB 1961 / 1334, 1262 / 645,
//!   1735 / 727 us;
//! - line-2 16 MiB 4.73 / 4.25, 4.45 / 2.97, 3.63 / 2.72 ms; line-4 16 MiB 22.2 / 12.5,
//!   18.6 / 8.5, 19.3 / 7.9 ms;
//! - t3k 36 KiB 108 / 22, 163 / 23, 117 / 23 us; galaxy 36 KiB 785 / 121, 847 / 146,
//!   735 / 124 us; line-2 4 KiB 7.9 / 2.0, 8.4 / 1.2, 8.4 / 1.2 us.
//!
//! Small sizes are the launch path (every chip's dispatcher, its command queue and program,
//! the meeting), which the floor does not have. At 16 MiB on 8 chips the emulation takes
//! about twice the floor, and the reduce half is most of it: reduce_scatter t3k 16 MiB took
//! 30-36 ms in the hour a reduce-only floor took 13-16 ms. Variants of that reduce-only floor
//! (a scratch program, medians of 15 runs, three sets) showed where part of the gap goes:
//! - summing straight from the input and the arrived partial into the next buffer: 12.9, 13.4
//!   and 15.6 ms;
//! - staged as a `Reduce` is (the arrived partial copied into a 32 KiB block, the sums made
//!   in L1, then copied out to the neighbour): 17.8, 17.2, 18.2 ms;
//! - staged, with the input kept as chip DRAM keeps it (12 banks of 16 KiB chunks, read a
//!   2 KiB page at a time): 21.4, 20.8, 21.6 ms, against 19.4, 17.6, 17.8 staged alone in
//!   that set.
//!
//! The rest, about another half again, is the emulation's own cost per message and page:
//! bank locks, chunk lookups and cache hints per page, the fabric's send path per 32 KiB,
//! and 8 threads on 2 cores. perf on `ccl_one reduce_scatter t3k 16777216` puts 30% of
//! samples in memmove (the staging copies and the delivery), 21% in `DeviceMemory::prefetch`
//! (the input's memory stalls land there), 17% in the bf16 add and 5% in
//! `DeviceMemory::write`. The levers it named: the reduction computed straight from this
//! chip's input and slot into the neighbour's slot (built next, see the end of this page);
//! the arrived partial read in place instead of copied into the L1 block (that build does it
//! too; a timing-only build that skipped the slot's read altogether had bounded it at
//! reduce_scatter t3k 16 MiB 32.6 -> 28.4 ms, all_reduce t3k 1 MiB 1632 -> 1528 us); a host
//! layout that keeps a tensor's pages in fewer, longer runs (not built).
//!
//! Two quick A/Bs on reduce_scatter t3k 16 MiB in this hour: without the input's cache hints
//! it was slower (medians of 4: 40.2 against 32.3 ms), and 128 KiB messages instead of 32 KiB
//! were within the noise (26.7-29.8 against 28.4-31.8 ms).
//!
//! Sums computed where they land (`kernels/onward.rs`). A bf16 `Reduce` hop now has the
//! fabric hand it the neighbour's slot under that bank's write lock
//! (`FabricSender::write_with_and_inc`), and writes `input + slot`, rounded once, straight
//! into it, reading both operands in place: the slot's copy into an L1 block and the sums'
//! copy out of an L1 buffer are gone. Under the lock the fill only *tries* this chip's banks;
//! when one is busy the run is handed back and filled again with nothing locked, staged as
//! before (`DeviceMemory::write_trying`). Counted on t3k 16 MiB and line-4 1 MiB all_reduce:
//! 0.6% and 3% of runs took the staged way.
//!
//! Alone it was a mixed result. Alternated with the build before it (`ccl_one`, medians of 5
//! to 10): all_reduce t3k 1 MiB 1411 -> 1234 us, reduce_scatter t3k 1 MiB 1232 -> 1020 us,
//! galaxy 1 MiB 9.77 -> 8.58 ms, t3k 4 MiB 8.33 -> 7.26 ms; but t3k 16 MiB 34.5 -> 36.5 ms
//! (of 10) and line-4 1 MiB 716 -> 909 us. At 16 MiB the profile moved rather than shrank:
//! memmove 35% -> 21% of samples, the bf16 add 13% -> 23% (its stores now land in the
//! neighbour's slot, not in L1), the in-place reads 9%. On line-4, where ccl's helper and a
//! chip's thread each have a core (`kernels/pair.rs`), context switches went from 1.5% to 6%
//! of samples: a thread reading a bank parked behind the other core's fill, which holds the
//! write lock for the sums' time where a copy held it for a copy's. Cutting the fill's runs
//! to 4 KiB did not help (line-4 882 -> 977 us, t3k 1 MiB 1252 -> 1322 us). Trying a bank's
//! lock before parking did: line-4 1 MiB 1000 us parking at once (parking_lot's own short
//! spin), 836 us after 256 tries, 694 us after 4096 (`chip::memory`'s `LOCK_SPINS`).
//!
//! Together, against the build before both (`ccl_one`, alternated, medians of 7):
//! - all_reduce t3k 36 KiB 160 -> 150 us, 256 KiB 606 -> 561 us, 1 MiB 1492 -> 1346 us (of
//!   5), 4 MiB 8.47 -> 8.30 ms, 16 MiB 36.3 -> 34.4 ms;
//! - all_reduce galaxy 36 KiB 966 -> 775 us, 1 MiB 12.6 -> 10.7 ms;
//! - all_reduce line-2 4 KiB 10.9 -> 10.7 us, 1 MiB 275 -> 247 us, 16 MiB 4.86 -> 4.78 ms;
//!   line-4 1 MiB 725 -> 680 us;
//! - reduce_scatter t3k 1 MiB 1462 -> 1248 us;
//! - all_gather t3k 1 MiB 1692 -> 1639 us, 16 MiB 30.1 -> 29.3 ms (it has no reduction: the
//!   lock tries alone).
//!
//! After the sums computed where they land, the input's cache hints lost on lines of 8 and
//! 16 MiB of input in all (the fill reads the input in place while it writes the neighbour's
//! slot, and the hints' bank locks and fill-buffer stalls cost more than they bring): they
//! now start at 32 MiB (`pages::PREFETCH_MIN_LINE_INPUT`, the A/B figures there; t3k 1 MiB
//! 1451 -> 1358 us). At a line's end a sum added at delivery (`into`) now reads this chip's
//! input in place inside the owner's write, tried like `onward`'s, instead of copying it into
//! L1 beside the owner's (line-2 1 MiB 211 -> 185 us, 16 MiB 3.57 -> 3.19 ms; line-4 1 MiB
//! 754 -> 726 us, 16 MiB 18.3 -> 17.7 ms; medians of 5-7, alternated). The owner's input
//! shares its banks with the output pages being written, so it was still copied into L1;
//! chip memory now lends a fill the rest of the bank it holds locked (the chunk being filled
//! leaves the bank's map meanwhile: `ttmesh_chip::memory::HeldBank`, through the fabric as
//! `HeldMemory`), and the owner's input is read through it. Alternated, medians of 15, 9, 9
//! (a slow hour): line-2 1 MiB 238 -> 221 us, 16 MiB 4.05 -> 3.68 ms, line-4 1 MiB 728 ->
//! 703 us; t3k 1 MiB and reduce_scatter line-2 16 MiB even (a reduce_scatter's chunk has
//! its own page layout, so its owner's input still lies in other banks and is copied).
//!
//! Measured and dropped in the same hour (t3k 16 MiB unless named): running the line on two
//! threads instead of 8 own threads (`TTMESH_CCL_RUNNER`, medians of 9: 43.8 against 39.6
//! ms; an earlier set of 5 had read the other way, 41.4 against 43.7); 4, 8 or 16 pieces
//! per chunk on two threads instead of 2 (40.1, 35.9, 39.4 against 37.4 ms: noise); chunk
//! memory on transparent huge pages (glibc's `hugetlb` tunable, 43 MB of the run's 63 MB on
//! huge pages): t3k 1 MiB and 16 MiB even, so the TLB is not what the 16 KiB chunks cost.
//!
//! Longer DRAM chunks. A DRAM tensor's pages in one bank lie back to back, but each bank was
//! 16 KiB host allocations, so a bank run of a 1 MiB input (85 KiB per bank) was six chunk
//! lookups, six locks and six streams for the prefetchers to find. DRAM chunks are now 64
//! KiB (`ttmesh_chip::memory::chunk_size`; L1 keeps 16 KiB: an L1 tensor is a few KiB per
//! core's bank, and 64 KiB would pin eight times its bytes). Alternated with the build
//! before, medians of 9, 7 and 5: all_reduce t3k 16 MiB 37.2 -> 32.9 ms, line-2 1 MiB 190
//! -> 168 us, line-4 1 MiB 691 -> 627 us, galaxy 256 KiB 2756 -> 2542 us; t3k 36 KiB,
//! line-2 4 KiB, galaxy 36 KiB and all_gather t3k 1 MiB within the noise. 32 and 256 KiB
//! chunks were both slower than 64 (256 KiB: line-2 1 MiB 183 -> 268 us; not profiled, a lock
//! held four times longer per chunk is the likely cause). What host memory it costs: the 32-chip footprint
//! test's backing memory 117 MB (its limit 128), a trace's bytes now pin a 64 KiB chunk in
//! each bank they touch.
//! The input's cache hints, re-checked with 64 KiB chunks at t3k 16 MiB (hints on / off,
//! alternated): all_reduce 36.8 / 37.7 ms (medians of 9), reduce_scatter 32.1 / 34.1 ms (of
//! 5), so `pages::PREFETCH_MIN_LINE_INPUT` stays at 32 MiB.
//!
//! Measured and dropped in a later hour (`ccl_one`, each alternated with the build before,
//! medians of 5-9; the host was loaded, so only differences beyond its noise count):
//! - A `ReduceInto`'s sums (this chip's input plus its slot) computed per message, a page
//!   at a time into L1, instead of staged for the whole piece (up to 1 MiB, past L2) and
//!   copied out per message. Even: all_reduce t3k 16 MiB 32.0 / 31.4 ms and, in a second
//!   set, 34.2 / 34.4 ms; t3k 1 MiB 1076 / 1093 us; line-4 1 MiB 643 / 639 us, 16 MiB 18.3 /
//!   18.3 ms. A slot read per page costs as many bank locks as the staging saved passes.
//! - The direct gather (`pages::all_gather_direct`) for blocks with data above their dim
//!   (the benchmark's `[1, 1, rows, 1024]` on the last dim: a block is 4 tiles of each tile
//!   row), one copy per received byte instead of the slots' two. Such a block's pages in one
//!   bank are never adjacent, so every page was a 2 KiB message: all_gather t3k 16 MiB 30.0
//!   -> 36.4 ms, line-2 16 MiB 4.93 -> 7.44 ms, line-2 1 MiB 365 -> 421 us; only t3k 1 MiB
//!   gained (1488 -> 1328 us).
//! - The slot gather's assembly written a bank at a time under one hold of its lock (512 KiB
//!   of a block at once, pages sorted by bank), to take one lock per bank instead of one
//!   per page: all_gather t3k 16 MiB 29.4 -> 30.5 ms, line-2 16 MiB 4.60 -> 7.05 ms. perf
//!   on line-2 16 MiB: the write's own samples went from 26% (per-page `write`) to 21%
//!   (`write_runs`), over 80% of them at the lock's release either way (the `lock cmpxchg`
//!   waits for the stores before it to leave the core). Most of that time is likely the
//!   stores' trip to memory, not the lock: a lock per bank instead of per page barely
//!   shortened it, and the longer hold cost more than it saved.
//!
//! Page faults are not a lever either: `perf stat` counts the same faults for 5 and 35
//! iterations of all_reduce t3k 16 MiB (157,074 and 148,874: all of them the setup's); the
//! loop switches context about 440 times per collective.
//!
//! Where the 16 MiB all_reduce on 8 chips stands against the plain host ring (`bench ccl`'s
//! floor), re-measured later (`perf stat`, 20 collectives less the setup): own threads 60 ms
//! of CPU per collective, 1.78 of 2 CPUs busy, ~480 context switches; forced onto two threads
//! (`TTMESH_CCL_RUNNER=together`) 59 ms, 1.85 CPUs, ~9 switches, the same wall time. So the
//! switches are not what costs: the CPU work is, mostly memory stalls (`memmove` 25%, the
//! bf16 add 23%, prefetches stalled on full fill buffers 9-10%, the bank lock's release
//! waiting on the copy's stores 8-9%). The collective touches ~370 MiB (inputs 128, outputs
//! 128, reduce slots 112); a plain memcpy on CPU 1, one thread, moves 14.6-15.5 GB/s with 4-64
//! MiB in use and 7.4-12.5 GB/s from 128 MiB. Keeping a piece's slot in the bank-major order
//! of the input's pages (so the sum's three streams are 64 KiB runs, not 2 KiB pages) was
//! measured before building it, in plain C: bf16 pages from 12 separately allocated banks
//! plus a slot into a destination, 128 MiB per stream, took 35.3-36.0 ms in page order and
//! 34.1-34.3 ms bank-major on one thread (30.8-35.6 / 30.7-33.8 ms with one copy per CPU at
//! once). The hardware prefetchers follow the page jumps; the layout would buy ~5% at most.
//! What separates the emulation from the floor is per span and per message: the lock
//! round trips, chunk lookups, stalled hints and the fabric's bookkeeping, and ~11% idle.
//!
//! Measured and dropped later: a fill's input reads under read locks held across the message
//! (`HeldReads`, each bank's lock taken at its first page and kept, instead of a lock round
//! trip per 2 KiB page). perf on all_reduce t3k 16 MiB: the input reads' lock releases went
//! from 9.6% of samples to 1.6%, with 3% now at the first acquire; wall and CPU time even
//! (alternated, medians of 7: 35.3 / 34.2 ms; `perf stat` task-clock, three runs each, within
//! 3%). What each release waited for was the sums' stores, which memory takes anyway.
//!
//! The bf16 rounding by the CPU. perf on `ccl_one all_reduce t3k 36864` (one thread runs the
//! line, the data in L2): `sum_bf16` 17% of samples, its loop compute-bound, about ten
//! vector instructions per 32 values to add, round, check for NaN and narrow. Where the host
//! has AVX-512 BF16 the sums are rounded by `vcvtne2ps2bf16`, one instruction per 32 values
//! (`ttmesh_chip::format`'s `bf16_native`; a block holding a subnormal sum, which the
//! instruction reads as zero, is rounded in software, so every host gives the same bits).
//! Alternated, pinned to one CPU: t3k 36 KiB 108 -> 96 us (medians of 9), galaxy 36 KiB
//! 1066 -> 949 us (of 5); unpinned, of 5: line-2 1 MiB 168 / 170 us and t3k 16 MiB 37.7 /
//! 36.0 ms, within the noise (memory-bound there). The ring floor adds with the same
//! function, so the floor keeps up.
//!
//! Sums added at delivery, in place after all (`kernels/into.rs`). perf on all_reduce line-2
//! 256 KiB (two threads): 18% of samples in memmove, most of it copying the owner's input
//! into L1 inside fills handed back. Counted: every one of them was handed back. The
//! owner's input and output, allocated side by side, share a 64 KiB DRAM chunk in each bank
//! up to about 1 MiB per chip, and the held bank could not lend the chunk being filled;
//! now it lends that chunk's bytes beside the ones being filled
//! (`ttmesh_chip::memory::HeldBank`). And the two chips of a line adding into each other at
//! once walked the banks in step, each holding the other's bank `b` while trying its own
//! bank `b`; a chip of odd id now starts half way round. Alternated with the build before
//! (`ccl_one`, medians of 7 unless said): line-2 256 KiB 75.9 -> 55.1 us, of which the
//! bank order ~6% (58.6 -> 54.7 us, of 9, built with and without it); line-2 4 KiB 9.1 ->
//! 7.7 us and t3k 36 KiB 102.6 -> 97.3 us, pinned to one CPU; t3k 256 KiB 550 -> 514 us (of
//! 5); line-2 1 MiB and 16 MiB, line-4 1 MiB, t3k 1 MiB, galaxy 36 KiB and reduce_scatter
//! line-2 1 MiB within the noise.
//!
//! After both, the input's cache hints lost on long chunks: t3k 16 MiB without / with them
//! 31.9 / 33.6 ms and, in a slower hour, 36.5 / 37.7 ms (medians of 9), reduce_scatter t3k
//! 16 MiB 28.4 / 30.4 ms, line-4 16 MiB 18.7 / 21.6 ms. They are now given only for chunks
//! of at most 256 KiB per chip (`pages::PREFETCH_MAX_CHUNK`, the figures there). A full
//! `ttmesh bench ccl` before this last change, on a quiet host: all_reduce t3k 16 MiB 29.4
//! ms, efficiency 0.48 (the floor, now with the same sum, 14.9 ms); line-2 256 KiB 46.2 us
//! against MPI's 47; t3k 36 KiB 90.5 us; line-4 256 KiB 170 us against 169.
//!
//! Slots shared on own threads (`kernels/sharing.rs`). A ring run by each chip's own thread
//! kept one slot per step: a 16 MiB all_reduce on 8 chips left 14 MiB of slots per chip that
//! no later step reads, beside 32 MiB of input and output. A timing-only build with every
//! slot landing in two regions (wrong sums: nothing held a write back) measured t3k 16 MiB
//! 21.0 -> 19.5 ms (medians of 5, alternated; three regions 20.7, four 20.4). As built, the
//! reader credits the writer through the fabric after each piece it reads and the writer
//! takes the credit before overwriting it (two regions: the fewest that cannot deadlock, and
//! faster than three). Alternated with the build before (`ccl_one`, medians of 5-7):
//! all_reduce t3k 16 MiB 20.3 -> 19.0 ms, galaxy 16 MiB 86.9 -> 75.3 ms (of 3), galaxy 8 MiB
//! 39.9 -> 30.9 ms, galaxy 5 MiB 26.8 -> 18.9 ms; reduce_scatter t3k 16 MiB 20.4 -> 19.1 ms.
//! Own threads then beat the one-thread runners further down, so rings of 5 to 8 chips run
//! together only up to 1 MiB per chip (was 4) and longer ones up to 2 MiB (was 4): t3k 4 MiB
//! 7.42 -> 4.58 ms, 2 MiB 2.87 -> 2.31 ms, galaxy 4 MiB 28.2 -> 21.6 ms (the figures are at
//! `together::wanted`'s limits).
//!
//! Two costs per small collective found with perf on `ccl_one all_reduce line-2 4096`
//! (pinned to one CPU; the launches defer, so the host's thread runs the line): the runner
//! woke the meeting's condvar every time, a futex system call even with nobody asleep (5% of
//! samples), and the meeting's vectors of parts (904 bytes each) passed 1 KiB, so glibc's
//! malloc ran `malloc_consolidate` at every collective (5%). The runner now notifies only
//! when a chip sleeps, and a part's work is boxed. Alternated, medians of 9: 5.5 -> 5.1 ->
//! 4.9 us; t3k and galaxy 36 KiB within the noise. What is left at 4 KiB is spread thin:
//! the steps ~20%, allocating and freeing the output and scratch on each chip ~15%, command
//! encoding and dispatch, the meeting. Same-host OpenMPI takes 0.9 us there (two processes
//! polling shared memory); at 36 KiB (7.8 us against ~12) the gap is the fabric's work per
//! message: a 32x576 chunk's pages lie one per DRAM bank, so each is a message of its own.
