//! Chunks shared by contents: invisible to every read and write, one host copy for many.
use super::super::*;

const DRAM: MemSpace = MemSpace::Dram;

fn memory(chip: u32) -> DeviceMemory {
    DeviceMemory::new(chip, 2, 1 << 24, 2, 1 << 20, 1 << 20)
}

/// Bytes no other test writes (the table is process-wide), from `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn read(m: &DeviceMemory, bank: u32, addr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0xAA; len];
    m.read(DRAM, bank, addr, &mut out).unwrap();
    out
}

/// Writes `data` as 2 KiB pages at `addr` of bank 0, as a host write record does, and shares.
fn host_write(m: &DeviceMemory, addr: u64, data: &[u8]) {
    let pages: Vec<(u32, u64)> = (0..data.len() as u64 / 2048)
        .map(|p| (0, addr + p * 2048))
        .collect();
    for (i, (bank, a)) in pages.iter().enumerate() {
        m.write(DRAM, *bank, *a, &data[i * 2048..(i + 1) * 2048])
            .unwrap();
    }
    m.share_written(DRAM, 2048, pages.into_iter().rev());
}

#[test]
fn a_replicated_write_is_one_host_copy_and_a_later_write_differs_only_there() {
    let chunk = chunk_size(DRAM) as usize;
    let data = pattern(1, 4 * chunk);
    let chips: Vec<DeviceMemory> = (0..8).map(memory).collect();
    for m in &chips {
        host_write(m, 0, &data);
    }
    let host: u64 = chips.iter().map(DeviceMemory::host_bytes).sum();
    assert!(
        host.abs_diff(data.len() as u64) <= 8,
        "8 chips of one replicated write use {host} host bytes, not about {}",
        data.len()
    );
    // Every chip still holds the chunks as its own memory does.
    for m in &chips {
        assert_eq!(m.resident_bytes(), data.len() as u64);
        assert_eq!(read(m, 0, 0, data.len()), data);
    }
    // One chip writes, in each way memory is written: only it changes.
    chips[3].write(DRAM, 0, 100, &[1, 2, 3]).unwrap();
    chips[4]
        .write_with(DRAM, 0, chunk as u64 + 10, 4, |_, b| b.fill(9))
        .unwrap();
    chips[5]
        .write_trying(DRAM, 0, 2 * chunk as u64 + 5, 6, |_, b, _| {
            b.fill(7);
            true
        })
        .unwrap();
    chips[6]
        .copy_from((DRAM, 0, 3 * chunk as u64), &chips[7], (DRAM, 1, 0), 64)
        .unwrap();
    let mut want = vec![data.clone(); 8];
    want[3][100..103].copy_from_slice(&[1, 2, 3]);
    want[4][chunk + 10..chunk + 14].fill(9);
    want[5][2 * chunk + 5..2 * chunk + 11].fill(7);
    want[6][3 * chunk..3 * chunk + 64].fill(0);
    for (i, m) in chips.iter().enumerate() {
        assert_eq!(read(m, 0, 0, data.len()), want[i], "chip {i}");
    }
    // The four writers copied one chunk each.
    let host: u64 = chips.iter().map(DeviceMemory::host_bytes).sum();
    assert!(
        host.abs_diff((data.len() + 4 * chunk) as u64) <= 8,
        "{host}"
    );
    // Freeing on one chip leaves the others' bytes.
    chips[0].discard(DRAM, 0, 0, data.len() as u64);
    assert_eq!(read(&chips[0], 0, 0, data.len()), vec![0; data.len()]);
    assert_eq!(read(&chips[1], 0, 0, data.len()), data);
}

#[test]
fn zero_chunks_take_no_host_memory_and_equal_chunks_are_shared_however_filled() {
    let chunk = chunk_size(DRAM) as usize;
    let m = memory(0);
    host_write(&m, 0, &vec![0; 2 * chunk]);
    assert_eq!(m.resident_bytes(), 0, "zeros written read as zero unheld");
    assert!(!m.holds_any(DRAM));
    assert_eq!(read(&m, 0, 0, 2 * chunk), vec![0; 2 * chunk]);
    // Two tensors sharing chunks (half a chunk each side of the first), written one after
    // the other on two replicas: every chunk ends shared.
    let first = pattern(2, 2 * chunk);
    let second = pattern(4, chunk);
    let (a, b) = (memory(1), memory(2));
    for m in [&a, &b] {
        host_write(m, chunk as u64 / 2, &first);
        host_write(m, 5 * chunk as u64 / 2, &second);
    }
    assert_eq!(a.host_bytes() + b.host_bytes(), 4 * chunk as u64);
    assert_eq!(read(&a, 0, chunk as u64 / 2, first.len()), first);
    assert_eq!(read(&b, 0, 5 * chunk as u64 / 2, second.len()), second);
    // The same bytes at another chunk offset are other chunks: not shared.
    let c = memory(3);
    host_write(&c, 0, &first);
    assert_eq!(c.host_bytes(), 2 * chunk as u64);
}

#[test]
fn a_shared_chunk_written_by_its_last_holder_is_taken_back_without_a_copy() {
    let chunk = chunk_size(DRAM) as usize;
    let data = pattern(3, chunk);
    let m = memory(0);
    host_write(&m, 0, &data);
    m.write(DRAM, 0, 0, &[5]).unwrap();
    let mut want = data.clone();
    want[0] = 5;
    assert_eq!(read(&m, 0, 0, chunk), want);
    assert_eq!(m.host_bytes(), chunk as u64);
}
