//! DeviceMemory: sparse chunks, in-place reads and writes, copies between memories.
use super::*;

/// Reads `len` bytes at `addr` of DRAM bank 0 both ways; they must agree.
fn read_both(m: &DeviceMemory, addr: u64, len: usize) -> Vec<u8> {
    let mut copied = vec![0xAAu8; len];
    m.read(MemSpace::Dram, 0, addr, &mut copied).unwrap();
    let mut pieces = vec![0x55u8; len];
    let mut next = 0;
    m.read_in_place(MemSpace::Dram, 0, addr, len, |off, bytes| {
        assert_eq!(off, next, "pieces come in order, without gaps");
        pieces[off..off + bytes.len()].copy_from_slice(bytes);
        next = off + bytes.len();
    })
    .unwrap();
    assert_eq!(next, len);
    assert_eq!(copied, pieces);
    copied
}

#[test]
fn prefetch_is_only_a_hint_anywhere() {
    let m = DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    m.write(
        MemSpace::Dram,
        0,
        chunk_size(MemSpace::Dram) - 10,
        &[7u8; 30],
    )
    .unwrap();
    let before = read_both(&m, 0, 3 * chunk_size(MemSpace::Dram) as usize);
    // Written, partly written, never written, across chunks, beyond the bank, no bank.
    m.prefetch(MemSpace::Dram, 0, chunk_size(MemSpace::Dram) - 10, 30);
    m.prefetch(
        MemSpace::Dram,
        0,
        0,
        3 * chunk_size(MemSpace::Dram) as usize,
    );
    m.prefetch(MemSpace::Dram, 1, 5 * chunk_size(MemSpace::Dram), 2048);
    m.prefetch(MemSpace::Dram, 0, (1 << 24) - 8, 64);
    m.prefetch(MemSpace::Dram, 9, 0, 64);
    assert_eq!(
        read_both(&m, 0, 3 * chunk_size(MemSpace::Dram) as usize),
        before
    );
    assert_eq!(m.resident_bytes(), 2 * chunk_size(MemSpace::Dram));
}

#[test]
fn holds_in_sees_chunks_of_any_bank_until_they_are_dropped() {
    let m = DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let mib = 1u64 << 20;
    assert!(!m.holds_in(MemSpace::Dram, 0, 16 * mib));
    m.write(MemSpace::Dram, 1, 5 * mib + 100, &[1u8; 8])
        .unwrap();
    assert!(m.holds_in(
        MemSpace::Dram,
        5 * mib,
        5 * mib + chunk_size(MemSpace::Dram)
    ));
    assert!(m.holds_in(MemSpace::Dram, 0, 16 * mib));
    assert!(
        !m.holds_in(MemSpace::Dram, 0, 5 * mib),
        "below the written MiB"
    );
    assert!(!m.holds_in(MemSpace::Dram, 6 * mib, 16 * mib), "above it");
    assert!(!m.holds_in(MemSpace::L1, 0, mib), "another space");
    // Dropped in bank 0 (which holds nothing there): still held in bank 1.
    m.discard(MemSpace::Dram, 0, 5 * mib, mib);
    assert!(m.holds_in(MemSpace::Dram, 5 * mib, 6 * mib));
    m.discard(MemSpace::Dram, 1, 5 * mib, mib);
    assert!(!m.holds_in(MemSpace::Dram, 0, 16 * mib));
}

/// A neighbour's write into a bank lands while this chip's thread is inside a long
/// in-place read of the same bank: the read holds the bank's lock one chunk at a time.
#[test]
fn a_long_read_does_not_hold_off_writes_until_it_ends() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let m = Arc::new(DeviceMemory::new(0, 1, 1 << 24, 1, 1 << 20, 1 << 20));
    let c = chunk_size(MemSpace::Dram) as usize;
    m.write(MemSpace::Dram, 0, 0, &vec![1u8; 4 * c]).unwrap();
    let written = Arc::new(AtomicBool::new(false));
    let mut writer = None;
    let mut seen_at_end = false;
    m.read_in_place(MemSpace::Dram, 0, 0, 4 * c, |off, _| {
        if off == 0 {
            // Another thread writes a new chunk; it finds the bank locked and waits. Wait
            // until it is waiting for the lock (it has claimed the writer bit: a parked writer
            // is let in before the next read, so the write lands between two chunks of this
            // read).
            let (m2, w) = (m.clone(), written.clone());
            writer = Some(std::thread::spawn(move || {
                m2.write(MemSpace::Dram, 0, 8 * chunk_size(MemSpace::Dram), &[7; 64])
                    .unwrap();
                w.store(true, Ordering::SeqCst);
            }));
            let bank = m.bank(MemSpace::Dram, 0, 0, 1).unwrap();
            let t = std::time::Instant::now();
            while !bank.is_locked_exclusive() {
                assert!(
                    t.elapsed().as_secs() < 30,
                    "the writer never reached the lock"
                );
                std::thread::yield_now();
            }
        }
        if off == 3 * c {
            seen_at_end = written.load(Ordering::SeqCst);
        }
    })
    .unwrap();
    writer.unwrap().join().unwrap();
    assert!(seen_at_end, "the write waited for the whole read");
    let mut back = [0u8; 64];
    m.read(MemSpace::Dram, 0, 8 * chunk_size(MemSpace::Dram), &mut back)
        .unwrap();
    assert_eq!(back, [7; 64]);
}

#[test]
fn write_with_fills_in_place_across_chunks_like_write() {
    let m = DeviceMemory::new(0, 1, 1 << 24, 1, 1 << 20, 1 << 20);
    let c = chunk_size(MemSpace::Dram) as usize;
    // Garbage freed into the pool, so the chunks written next are reused ones.
    m.write(MemSpace::Dram, 0, 0, &vec![0xEEu8; 3 * c]).unwrap();
    m.discard(MemSpace::Dram, 0, 0, 3 * c as u64);
    let (at, len) = (c as u64 + 100, c + 50);
    let want: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let mut pieces = Vec::new();
    m.write_with(MemSpace::Dram, 0, at, len, |off, bytes| {
        pieces.push((off, bytes.len()));
        bytes.copy_from_slice(&want[off..off + bytes.len()]);
    })
    .unwrap();
    // One piece per chunk touched, in order, covering the range once.
    assert_eq!(pieces, vec![(0, c - 100), (c - 100, 150)]);
    let back = read_both(&m, c as u64, 2 * c);
    assert!(back[..100].iter().all(|&b| b == 0), "gap before the write");
    assert_eq!(&back[100..100 + len], &want[..]);
    assert!(back[100 + len..].iter().all(|&b| b == 0), "garbage past it");
    // Out of range: an error naming the bank, and nothing handed out.
    let err = m
        .write_with(MemSpace::Dram, 0, (1 << 24) - 4, 8, |_, _| {
            panic!("no bytes")
        })
        .unwrap_err();
    assert!(err.to_string().contains("beyond the bank"), "{err}");
}

#[test]
fn write_trying_falls_back_to_a_buffer_when_a_source_is_busy() {
    let m = DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let c = chunk_size(MemSpace::Dram) as usize;
    let src: Vec<u8> = (0..2 * c).map(|i| (i * 13 % 251) as u8).collect();
    m.write(MemSpace::Dram, 1, 0, &src).unwrap();
    // Bank 1 held by a writer while the first chunk is filled: its try fails.
    let mut busy = Some(m.dram[1].write());
    let mut calls = Vec::new();
    m.write_trying(MemSpace::Dram, 0, 0, 2 * c, |off, out, held| {
        let locked = held.is_some();
        calls.push((off, locked));
        if !locked {
            busy = None;
            m.read(MemSpace::Dram, 1, off as u64, out).unwrap();
            return true;
        }
        let len = out.len();
        let copy = |o: usize, b: &[u8]| out[o..o + b.len()].copy_from_slice(b);
        m.try_read_in_place(MemSpace::Dram, 1, off as u64, len, copy)
            .unwrap()
    })
    .unwrap();
    assert_eq!(calls, vec![(0, true), (0, false), (c, true)]);
    assert_eq!(read_both(&m, 0, 2 * c), src);
    // Tried reads see what blocking ones do, zeros included.
    let mut seen = vec![1u8; 3 * c];
    let copy = |o: usize, b: &[u8]| seen[o..o + b.len()].copy_from_slice(b);
    assert!(m
        .try_read_in_place(MemSpace::Dram, 1, 0, 3 * c, copy)
        .unwrap());
    assert_eq!(&seen[..2 * c], &src[..]);
    assert!(seen[2 * c..].iter().all(|&b| b == 0));
}

#[test]
fn reused_chunks_read_zero_where_never_written() {
    let m = DeviceMemory::new(0, 1, 1 << 24, 1, 1 << 20, 1 << 20);
    let c = chunk_size(MemSpace::Dram) as usize;
    // Fill two chunks with garbage, free them into the pool.
    m.write(MemSpace::Dram, 0, 0, &vec![0xEEu8; 2 * c]).unwrap();
    m.discard(MemSpace::Dram, 0, 0, 2 * c as u64);
    assert_eq!(m.resident_bytes(), 0);
    // A write in the middle of a reused chunk: the bytes before and after read as zero.
    m.write(MemSpace::Dram, 0, 100, &[7u8; 50]).unwrap();
    let back = read_both(&m, 0, c);
    assert!(back[..100].iter().all(|&b| b == 0));
    assert!(back[100..150].iter().all(|&b| b == 7));
    assert!(
        back[150..].iter().all(|&b| b == 0),
        "garbage past the write"
    );
    // A later write past a gap zeroes the gap; earlier data stays.
    m.write(MemSpace::Dram, 0, 1000, &[9u8; 10]).unwrap();
    let back = read_both(&m, 0, c);
    assert!(back[150..1000].iter().all(|&b| b == 0));
    assert!(back[100..150].iter().all(|&b| b == 7));
    assert!(back[1000..1010].iter().all(|&b| b == 9));
    // A range over a reused chunk, a missing chunk and another reused one.
    m.write(MemSpace::Dram, 0, 3 * c as u64, &[1u8; 4]).unwrap();
    let back = read_both(&m, c as u64 - 8, 2 * c + 16);
    assert!(back[..8].iter().all(|&b| b == 0));
    assert!(back[2 * c + 8..2 * c + 12].iter().all(|&b| b == 1));
}

#[test]
fn sparse_read_write_discard() {
    let m = DeviceMemory::new(0, 12, 1 << 30, 64, 1_499_136, 1 << 20);
    let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    m.write(MemSpace::Dram, 3, 1_000_000, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    m.read(MemSpace::Dram, 3, 1_000_000, &mut back).unwrap();
    assert_eq!(back, data);
    assert!(m.resident_bytes() <= 4 * chunk_size(MemSpace::Dram));
    m.discard(MemSpace::Dram, 3, 0, 1 << 30);
    assert_eq!(m.resident_bytes(), 0);
    // L1's top ends the last chunk: a range reaching the top drops it.
    let top = 1_499_136;
    m.write(MemSpace::L1, 5, top - 4000, &[1u8; 4000]).unwrap();
    m.discard(MemSpace::L1, 5, top - 8000, 7999);
    assert_eq!(
        m.resident_bytes(),
        chunk_size(MemSpace::L1),
        "a partly freed chunk stays"
    );
    m.discard(MemSpace::L1, 5, 91 * chunk_size(MemSpace::L1), 1 << 30);
    assert_eq!(m.resident_bytes(), 0);
    assert!(m.read(MemSpace::L1, 64, 0, &mut back).is_err());
    assert!(m.read_in_place(MemSpace::L1, 64, 0, 4, |_, _| ()).is_err());
    assert!(m.write(MemSpace::L1, 0, 1_499_130, &[0u8; 16]).is_err());
}

#[test]
fn copies_between_memories_read_as_the_source_did() {
    let (src, dst) = (
        DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20),
        DeviceMemory::new(1, 2, 1 << 24, 1, 1 << 20, 1 << 20),
    );
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + 1) as u8).collect();
    src.write(MemSpace::Dram, 0, 1000, &data).unwrap();
    dst.write(MemSpace::Dram, 0, 0, &[9u8; 70_000]).unwrap();
    // Across chunks at other offsets, with unwritten source bytes at both ends (zeros).
    let (from, to, len) = (500, chunk_size(MemSpace::Dram) + 300, 41_000);
    let d = (MemSpace::Dram, 0, to);
    dst.copy_from(d, &src, (MemSpace::Dram, 0, from), len)
        .unwrap();
    let want = {
        let mut v = vec![0u8; len];
        src.read(MemSpace::Dram, 0, from, &mut v).unwrap();
        v
    };
    assert_eq!(read_both(&dst, to, len), want);
    // Bytes around the copy are untouched.
    assert_eq!(read_both(&dst, to - 300, 300), vec![9u8; 300]);
    // Within one memory and one bank, overlapping: as if read first, then written.
    let before = read_both(&src, 1000, 20_000);
    src.copy_from(
        (MemSpace::Dram, 0, 1100),
        &src,
        (MemSpace::Dram, 0, 1000),
        20_000,
    )
    .unwrap();
    assert_eq!(read_both(&src, 1100, 20_000), before);
    // Out of range on either side is an error naming the bank.
    let far = (MemSpace::Dram, 0, (1 << 24) - 10);
    let e = dst.copy_from(far, &src, (MemSpace::Dram, 0, 0), 100);
    assert!(e.unwrap_err().to_string().contains("beyond the bank"));
    let e = dst.copy_from((MemSpace::Dram, 0, 0), &src, (MemSpace::Dram, 5, 0), 100);
    assert!(e.unwrap_err().to_string().contains("no Dram bank 5"));
}

#[test]
fn copies_both_ways_at_once_never_deadlock() {
    let a = std::sync::Arc::new(DeviceMemory::new(0, 1, 1 << 24, 1, 1 << 20, 1 << 20));
    let b = std::sync::Arc::new(DeviceMemory::new(1, 1, 1 << 24, 1, 1 << 20, 1 << 20));
    a.write(MemSpace::Dram, 0, 0, &[1u8; 1 << 16]).unwrap();
    b.write(MemSpace::Dram, 0, 0, &[2u8; 1 << 16]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for (x, y) in [(a.clone(), b.clone()), (b.clone(), a.clone())] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for i in 0..2000u64 {
                let at = (i % 8) * 4096;
                let d = (MemSpace::Dram, 0, (1 << 16) + at);
                x.copy_from(d, &y, (MemSpace::Dram, 0, at), 24 * 1024)
                    .unwrap();
            }
            tx.send(()).unwrap();
        });
    }
    for _ in 0..2 {
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("two chips copying to each other at once finish");
    }
    let mut out = vec![0u8; 4096];
    a.read(MemSpace::Dram, 0, 1 << 16, &mut out).unwrap();
    assert_eq!(out, vec![2u8; 4096]);
}

#[test]
fn a_fill_reads_the_bytes_beside_it_in_its_own_chunk() {
    // An input and an output allocated side by side share a chunk: the fill of the output
    // reads the input through the held bank, from the very chunk it is filling.
    let m = DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let c = chunk_size(MemSpace::Dram) as usize;
    let input: Vec<u8> = (0..4096).map(|i| (i * 13 % 251) as u8).collect();
    let tail: Vec<u8> = (0..1024).map(|i| (i * 5 % 239 + 1) as u8).collect();
    m.write(MemSpace::Dram, 0, 0, &input).unwrap();
    m.write(MemSpace::Dram, 0, 12288, &tail).unwrap();
    let mut fills = 0;
    m.write_trying(MemSpace::Dram, 0, 4096, 4096, |_, out, held| {
        let held = held.expect("runs under the bank's lock");
        fills += 1;
        let mut got = vec![0u8; 4096];
        let copy = |o: usize, b: &[u8]| got[o..o + b.len()].copy_from_slice(b);
        assert!(
            held.read_in_place(0, 4096, copy).unwrap(),
            "the bytes before"
        );
        assert_eq!(got, input);
        // After the filled bytes: the written tail, then zeros to the end of the chunk.
        let mut after = vec![0xAAu8; c - 8192];
        let copy = |o: usize, b: &[u8]| after[o..o + b.len()].copy_from_slice(b);
        assert!(
            held.read_in_place(8192, c - 8192, copy).unwrap(),
            "the bytes after"
        );
        assert!(after[..4096].iter().all(|&b| b == 0));
        assert_eq!(&after[4096..5120], &tail[..]);
        assert!(after[5120..].iter().all(|&b| b == 0));
        // Bytes being filled are not readable: they are the fill's own.
        assert!(!held.read_in_place(4000, 200, |_, _| {}).unwrap());
        assert!(!held.read_in_place(8000, 300, |_, _| {}).unwrap());
        for (o, i) in out.iter_mut().zip(&input) {
            *o = i.wrapping_add(1);
        }
        true
    })
    .unwrap();
    assert_eq!(fills, 1, "read in place, never handed back");
    let want: Vec<u8> = input.iter().map(|i| i.wrapping_add(1)).collect();
    assert_eq!(read_both(&m, 4096, 4096), want);
    assert_eq!(read_both(&m, 0, 4096), input);
    assert_eq!(read_both(&m, 12288, 1024), tail);
}

#[test]
fn a_fill_reads_the_rest_of_its_held_bank_in_place() {
    let m = DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let c = chunk_size(MemSpace::Dram) as usize;
    // An "input" two chunks up in bank 0, partly written: the rest reads as zero.
    let input: Vec<u8> = (0..c + c / 2).map(|i| (i * 7 % 253) as u8).collect();
    m.write(MemSpace::Dram, 0, 4 * c as u64, &input).unwrap();
    let mut seen = Vec::new();
    m.write_trying(MemSpace::Dram, 0, 0, 2 * c, |off, out, held| {
        let held = held.expect("the first try runs under the bank's lock");
        assert_eq!((held.space(), held.bank()), (MemSpace::Dram, 0));
        // The bytes being filled cannot be read through the bank.
        assert!(!held.read_in_place(off as u64, 8, |_, _| {}).unwrap());
        let mut got = vec![0xAAu8; 2 * c];
        let copy = |o: usize, b: &[u8]| got[o..o + b.len()].copy_from_slice(b);
        assert!(held.read_in_place(4 * c as u64, 2 * c, copy).unwrap());
        assert_eq!(&got[..input.len()], &input[..]);
        assert!(got[input.len()..].iter().all(|&b| b == 0));
        let beyond = held.read_in_place((1 << 24) - 4, 8, |_, _| {});
        assert!(beyond.unwrap_err().to_string().contains("beyond the bank"));
        out.copy_from_slice(&got[off..off + out.len()]);
        seen.push(off);
        true
    })
    .unwrap();
    assert_eq!(seen, vec![0, c]);
    // The filled chunks went back into the bank with what the fill wrote.
    let mut expect = input.clone();
    expect.resize(2 * c, 0);
    assert_eq!(read_both(&m, 0, 2 * c), expect);
    assert_eq!(read_both(&m, 4 * c as u64, input.len()), input);
}

#[test]
fn a_panicking_fill_puts_its_chunk_back() {
    let m = DeviceMemory::new(0, 1, 1 << 24, 1, 1 << 20, 1 << 20);
    let c = chunk_size(MemSpace::Dram) as usize;
    m.write(MemSpace::Dram, 0, 0, &vec![9u8; c]).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.write_trying(MemSpace::Dram, 0, 0, 16, |_, _, _| panic!("a fill's bug"))
    }));
    assert!(panicked.is_err());
    // The rest of the chunk is still there (the panic may have left the fill's bytes).
    assert_eq!(read_both(&m, 16, c - 16), vec![9u8; c - 16]);
}

#[test]
fn held_reads_read_what_plain_reads_do() {
    let m = DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let chunk = chunk_size(MemSpace::Dram);
    let pattern: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
    m.write(MemSpace::Dram, 0, chunk - 100, &pattern).unwrap();
    m.write(MemSpace::Dram, 1, 64, &pattern[..50]).unwrap();
    let mut reads = m.held_reads(MemSpace::Dram);
    // Across a chunk boundary, inside one written chunk, never written, in the other bank.
    for (bank, addr, len) in [
        (0, chunk - 100, 300),
        (0, chunk - 50, 20),
        (0, 5 * chunk, 2048),
        (1, 60, 64),
        (0, chunk + 150, 100),
    ] {
        let mut plain = vec![0xAAu8; len];
        m.read(MemSpace::Dram, bank, addr, &mut plain).unwrap();
        let mut held = vec![0x55u8; len];
        reads.read(bank, addr, &mut held).unwrap();
        assert_eq!(held, plain, "read of bank {bank} at {addr:#x}");
        let mut scratch = vec![0x33u8; len];
        let seen = reads
            .read_with(bank, addr, &mut scratch, |b| b.to_vec())
            .unwrap();
        assert_eq!(seen, plain, "read_with of bank {bank} at {addr:#x}");
        reads.prefetch(bank, addr, len);
    }
    // Out of range: a clear error, nothing held wrongly, the reads go on.
    let e = reads.read(0, (1 << 24) - 8, &mut [0u8; 64]).unwrap_err();
    assert!(e.to_string().contains("beyond the bank"), "{e}");
    assert!(reads.read(9, 0, &mut [0u8; 8]).is_err());
    reads.prefetch(9, 0, 64);
    let mut again = vec![0u8; 50];
    reads.read(1, 64, &mut again).unwrap();
    assert_eq!(again, pattern[..50]);
}

#[test]
fn held_reads_give_way_to_a_writer_and_never_wait_holding() {
    use std::sync::{mpsc, Arc};
    let m = Arc::new(DeviceMemory::new(0, 2, 1 << 24, 1, 1 << 20, 1 << 20));
    let mut reads = m.held_reads(MemSpace::Dram);
    reads.read(1, 0, &mut [0u8; 16]).unwrap();
    let bank = |i: u32| m.bank(MemSpace::Dram, i, 0, 1).unwrap();
    assert!(bank(1).try_write().is_none(), "bank 1's read lock is held");
    // A writer holds bank 0 while it fills: the held read of bank 0 cannot be tried, so
    // every held lock is let go and that read waits on its own for the writer.
    let (started, wait_started) = mpsc::channel();
    let writer = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || {
            m.write_trying(MemSpace::Dram, 0, 0, 16, |_, out, _| {
                started.send(()).unwrap();
                // Fill only once the held read has let bank 1 go: it does that when it finds
                // bank 0 taken, just before it waits for it.
                let t = std::time::Instant::now();
                while m
                    .bank(MemSpace::Dram, 1, 0, 1)
                    .unwrap()
                    .try_write()
                    .is_none()
                {
                    assert!(
                        t.elapsed().as_secs() < 30,
                        "the held read never let bank 1 go"
                    );
                    std::thread::yield_now();
                }
                out.fill(9);
                true
            })
            .unwrap();
        })
    };
    wait_started.recv().unwrap();
    let mut got = [0u8; 16];
    reads.read(0, 0, &mut got).unwrap();
    assert_eq!(got, [9u8; 16], "the read waited for the write to land");
    assert!(bank(1).try_write().is_some(), "bank 1 was let go");
    writer.join().unwrap();
    drop(reads);
    assert!(bank(0).try_write().is_some() && bank(1).try_write().is_some());
}

/// Every way of writing refuses a live trace's bytes (one byte of overlap is enough), a
/// discard keeps them, and once the trace is released they are ordinary memory.
#[test]
fn live_trace_bytes_refuse_every_write_until_released() {
    let m = DeviceMemory::new(4, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let src = DeviceMemory::new(5, 2, 1 << 24, 1, 1 << 20, 1 << 20);
    let (start, end) = ((1 << 24) - (1 << 20), (1 << 24) - (1 << 19));
    m.watch_dram_from(start);
    m.write(MemSpace::Dram, 1, start, &[9u8; 64]).unwrap();
    m.guard_trace(7, start, end);
    let refused = |r: Result<()>, at: u64, len: u64| match r {
        Err(ChipError::IntoLiveTrace(w)) => {
            assert_eq!((w.chip, w.trace, w.address, w.len), (4, 7, at, len));
            assert_eq!(w.trace_bytes, (start, end));
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    refused(m.write(MemSpace::Dram, 1, start - 4, &[1; 5]), start - 4, 5);
    refused(m.write(MemSpace::Dram, 0, end - 1, &[1; 8]), end - 1, 8);
    refused(
        m.write_with(MemSpace::Dram, 1, start + 8, 8, |_, b| b.fill(1)),
        start + 8,
        8,
    );
    refused(
        m.write_trying(MemSpace::Dram, 1, start, 8, |_, b, _| {
            b.fill(1);
            true
        }),
        start,
        8,
    );
    refused(
        m.copy_from((MemSpace::Dram, 1, start), &src, (MemSpace::Dram, 0, 0), 16),
        start,
        16,
    );
    // Just outside, and in L1 at the same address: allowed.
    m.write(MemSpace::Dram, 1, start - 4, &[1; 4]).unwrap();
    m.write(MemSpace::Dram, 1, end, &[1; 4]).unwrap();
    m.write(MemSpace::L1, 0, 1000, &[1; 4]).unwrap();
    // A discard over the trace keeps its bytes (it only gives host memory back).
    m.discard(MemSpace::Dram, 1, start - (1 << 20), 2 << 20);
    let mut got = [0u8; 64];
    m.read(MemSpace::Dram, 1, start, &mut got).unwrap();
    assert_eq!(got, [9u8; 64]);
    m.unguard_trace(7);
    m.write(MemSpace::Dram, 1, start, &[2; 8]).unwrap();
}
