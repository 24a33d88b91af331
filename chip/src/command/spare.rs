//! Spare command buffers. A host write travels as one record holding its bytes, so placing a
//! model builds one buffer per weight and chip (a replicated weight: one per chip). Fresh,
//! each of them page-faults its memory in again once the allocator has handed the last one
//! back to the system: command buffers took a quarter of a Galaxy placement's 1.76M page
//! faults. Dispatchers give executed buffers back here, and the next large record takes one
//! that fits. Measured (`ttmesh decode --max-new-tokens 1`, old / new binary alternated):
//! galaxy 1.76M -> 1.46-1.51M page faults, placement 4.6-7.8 -> 4.3-4.4 s, peak RSS +90 MB;
//! t3k 0.77M -> 0.73-0.74M. What page-faults most now is the models crate's host copies of
//! each weight (dequantized, laid out by heads, transposed, split), which peak together.

use parking_lot::Mutex;

/// Buffers smaller than this come from the allocator as before (its own free lists serve them).
const SPARE_MIN_BYTES: usize = 64 << 10;
/// Capacity kept at most: past it, the smallest spares are dropped.
const SPARE_MAX_BYTES: usize = 128 << 20;
/// Spares kept at most (each `take` looks through them).
const SPARE_MAX_COUNT: usize = 64;

static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer with room for `n` bytes: a spare that fits (the smallest) when `n` is large
/// and one is free, else a new one.
pub(crate) fn take(n: usize) -> Vec<u8> {
    if n >= SPARE_MIN_BYTES {
        let mut spare = SPARE.lock();
        let fit = spare
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= n)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = fit {
            let mut b = spare.swap_remove(i);
            b.clear();
            return b;
        }
    }
    Vec::with_capacity(n)
}

/// Keeps `bytes` (a command buffer that has run) for a later `take`, if it is large.
pub(crate) fn give_back(bytes: Vec<u8>) {
    if bytes.capacity() < SPARE_MIN_BYTES {
        return;
    }
    let mut spare = SPARE.lock();
    spare.push(bytes);
    let mut total: usize = spare.iter().map(Vec::capacity).sum();
    while total > SPARE_MAX_BYTES || spare.len() > SPARE_MAX_COUNT {
        let Some((i, _)) = spare.iter().enumerate().min_by_key(|(_, b)| b.capacity()) else {
            break;
        };
        total -= spare.swap_remove(i).capacity();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_given_back_is_taken_again_and_the_kept_capacity_is_bounded() {
        // An odd size no other user of the pool in this process asks for.
        let odd = (7 << 20) + 12_345;
        let mut b = take(odd);
        assert!(b.capacity() >= odd);
        b.extend_from_slice(b"record");
        let ptr = b.as_ptr();
        give_back(b);
        let again = take(odd - 345);
        assert_eq!(again.as_ptr(), ptr, "the spare was not reused");
        assert!(again.is_empty(), "a spare comes back empty");
        // A small request never takes a spare, and small buffers are not kept.
        give_back(again);
        assert!(take(4096).capacity() < SPARE_MIN_BYTES);
        for _ in 0..(SPARE_MAX_BYTES >> 20) + 8 {
            give_back(Vec::with_capacity(4 << 20));
        }
        let kept: usize = SPARE.lock().iter().map(Vec::capacity).sum();
        assert!(kept <= SPARE_MAX_BYTES, "kept {kept} bytes");
    }
}
