//! Sequence lock over a slot of u64 words: word 0 is the sequence, odd while a writer writes.
//! Writers exclude each other with one compare-and-swap; readers copy and retry, never block a
//! writer, and give up after a bounded effort.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A writer waits this long for another writer of the same slot before taking the slot over.
/// Writers hold a slot for a few stores, so only a writer preempted for very long, one that
/// stopped mid-update, or a foreign process scribbling on our segment gets here; the program
/// must not hang for the monitor (a takeover may at worst lose one counter update).
const WRITER_TAKEOVER: Duration = Duration::from_secs(1);
/// A reader gives up after this long. It is time, not attempts, that bounds the wait: a writer
/// preempted mid-update on a busy machine holds its slot for a scheduler slice or two.
const READ_DEADLINE: Duration = Duration::from_millis(250);

pub(crate) struct WriteGuard<'a> {
    seq: &'a AtomicU64,
    next: u64,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        // Release: a reader that sees this even value sees every store before it.
        self.seq.store(self.next, Ordering::Release);
    }
}

#[inline]
pub(crate) fn write_lock(seq: &AtomicU64) -> WriteGuard<'_> {
    let s = seq.load(Ordering::Relaxed);
    if s & 1 == 0
        && seq
            .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    {
        // Orders the odd sequence before the data stores that follow (pairs with the
        // reader's acquire fence).
        fence(Ordering::Release);
        return WriteGuard { seq, next: s + 2 };
    }
    write_lock_slow(seq)
}

/// For the one writer of a slot (exclusion guaranteed by the caller's `&mut`): plain stores.
#[inline]
pub(crate) fn write_lock_exclusive(seq: &AtomicU64) -> WriteGuard<'_> {
    // `| 1` also ends an update some foreign writer left half done.
    let s = seq.load(Ordering::Relaxed) | 1;
    seq.store(s, Ordering::Relaxed);
    fence(Ordering::Release);
    WriteGuard { seq, next: s + 1 }
}

#[cold]
fn write_lock_slow(seq: &AtomicU64) -> WriteGuard<'_> {
    let mut spins: u32 = 0;
    let mut stuck_since: Option<(u64, Instant)> = None;
    loop {
        let s = seq.load(Ordering::Relaxed);
        if s & 1 == 0 {
            if seq
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                fence(Ordering::Release);
                return WriteGuard { seq, next: s + 2 };
            }
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins % 32 != 0 {
            std::hint::spin_loop();
            continue;
        }
        // The holder may be preempted on a 2-core host: give it the core.
        if spins < 4096 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
        match stuck_since {
            Some((v, t)) if v == s => {
                if t.elapsed() > WRITER_TAKEOVER
                    && seq
                        .compare_exchange(s, s + 2, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    fence(Ordering::Release);
                    return WriteGuard { seq, next: s + 3 };
                }
            }
            _ => stuck_since = Some((s, Instant::now())),
        }
    }
}

/// Why a consistent copy could not be made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadFailure {
    /// The sequence kept moving.
    TooFast,
    /// The sequence stayed at one odd value the whole time.
    Stuck,
}

/// Copy words `0..N` of a slot (word 0 is the sequence) consistently.
pub(crate) fn read_slot<'a, const N: usize>(
    word: impl Fn(usize) -> &'a AtomicU64,
) -> Result<[u64; N], ReadFailure> {
    let seq = word(0);
    let mut first_seen: Option<u64> = None;
    let mut moved = false;
    let mut started: Option<Instant> = None;
    for attempt in 0u64.. {
        let s1 = seq.load(Ordering::Acquire);
        match first_seen {
            None => first_seen = Some(s1),
            Some(f) if f != s1 => moved = true,
            _ => {}
        }
        if s1 & 1 == 0 {
            let mut out = [0u64; N];
            out[0] = s1;
            for (i, o) in out.iter_mut().enumerate().skip(1) {
                *o = word(i).load(Ordering::Relaxed);
            }
            // Pairs with the writer's release fence: if any load above saw a write of a later
            // update, the reload below sees that update's odd (or later) sequence.
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 {
                return Ok(out);
            }
            moved = true;
        }
        // Spin briefly, then yield, then sleep: the reader must not steal the core the
        // watched process needs to finish its write.
        if attempt < 64 {
            std::hint::spin_loop();
            continue;
        }
        let t = *started.get_or_insert_with(Instant::now);
        if t.elapsed() > READ_DEADLINE {
            break;
        }
        if attempt < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Err(if moved {
        ReadFailure::TooFast
    } else {
        ReadFailure::Stuck
    })
}
