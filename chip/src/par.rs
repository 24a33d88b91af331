//! Host loops that may run on rayon's pool, and do only when there is enough work.
//!
//! A parallel iterator started outside the pool always enters it, however short the slice:
//! the calling thread hands the job over and sleeps on a latch, and the workers, once woken,
//! spin and yield for more work before they sleep again. On a 2-core host shared with 8 or 32
//! chips' threads each of those yields is a context switch: `ttmesh run` on a T3K (a 32x576
//! input written and 8 shards read back per iteration) paid ~300 per iteration, 71% of them
//! rayon's idle workers yielding (perf, `-e context-switches`). Below `PAR_MIN_ELEMS` these
//! loops now run on the calling thread; the work they do is the same either way.

use rayon::prelude::*;

/// Elements from which a host loop goes to the pool: below it one thread is done in tens of
/// microseconds, about what the hand-off and wake-up cost.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 16;

fn parallel(elems: usize) -> bool {
    elems >= PAR_MIN_ELEMS
}

/// `f(out_chunk, in_chunk)` over `out` and `inp` cut in chunks of `out_len` and `in_len`,
/// zipped; on the pool if `elems` (the work's size) is large enough.
pub(crate) fn zip_chunks<A: Send, B: Sync>(
    out: &mut [A],
    out_len: usize,
    inp: &[B],
    in_len: usize,
    elems: usize,
    f: impl Fn(&mut [A], &[B]) + Sync + Send,
) {
    let done = try_zip_chunks(out, out_len, inp, in_len, elems, |o, i| {
        f(o, i);
        Ok::<(), std::convert::Infallible>(())
    });
    match done {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// `zip_chunks` for a fallible `f`: the first error is returned.
pub(crate) fn try_zip_chunks<A: Send, B: Sync, E: Send>(
    out: &mut [A],
    out_len: usize,
    inp: &[B],
    in_len: usize,
    elems: usize,
    f: impl Fn(&mut [A], &[B]) -> Result<(), E> + Sync + Send,
) -> Result<(), E> {
    if parallel(elems) {
        out.par_chunks_mut(out_len)
            .zip(inp.par_chunks(in_len))
            .try_for_each(|(o, i)| f(o, i))
    } else {
        out.chunks_mut(out_len)
            .zip(inp.chunks(in_len))
            .try_for_each(|(o, i)| f(o, i))
    }
}

/// `f(index, chunk)` over `out` cut in chunks of `len`; on the pool (at least `min_len`
/// chunks per job) if `elems` is large enough.
pub(crate) fn chunks_indexed<A: Send>(
    out: &mut [A],
    len: usize,
    min_len: usize,
    elems: usize,
    f: impl Fn(usize, &mut [A]) + Sync + Send,
) {
    if parallel(elems) {
        out.par_chunks_mut(len)
            .with_min_len(min_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        out.chunks_mut(len).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// `f(chunk)` over `out` cut in chunks of `len`, fallible; on the pool if `elems` is large
/// enough.
pub(crate) fn try_chunks<A: Send, E: Send>(
    out: &mut [A],
    len: usize,
    elems: usize,
    f: impl Fn(&mut [A]) -> Result<(), E> + Sync + Send,
) -> Result<(), E> {
    if parallel(elems) {
        out.par_chunks_mut(len).try_for_each(f)
    } else {
        out.chunks_mut(len).try_for_each(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_work_give_the_same_result() {
        for n in [10, PAR_MIN_ELEMS + 7] {
            let inp: Vec<u32> = (0..n as u32).collect();
            let mut out = vec![0u64; n];
            zip_chunks(&mut out, 3, &inp, 3, n, |o, i| {
                for (o, i) in o.iter_mut().zip(i) {
                    *o = u64::from(*i) * 2;
                }
            });
            assert!(out.iter().enumerate().all(|(k, &v)| v == 2 * k as u64));
            let mut idx = vec![0usize; n];
            chunks_indexed(&mut idx, 5, 1, n, |c, s| s.fill(c));
            assert!(idx.iter().enumerate().all(|(k, &v)| v == k / 5));
            let r: Result<(), usize> = try_chunks(&mut idx, 4, n, |s| match s[0] {
                1 => Err(1),
                _ => Ok(()),
            });
            assert_eq!(r, Err(1));
            let r: Result<(), ()> = try_zip_chunks(&mut out, 2, &inp, 2, n, |_, _| Ok(()));
            assert_eq!(r, Ok(()));
        }
    }
}
