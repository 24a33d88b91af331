//! `write_with_and_inc` and `copy_and_inc`: bytes computed where they land, or copied from the
//! sender's memory, arrive, count and fail exactly as the same bytes sent with
//! `write_and_inc`, on every path (delivered on the sending thread, as packets, over two hops,
//! on faulty links, into memory that rejects them).

mod common;

use common::{open, pattern};
use std::time::Duration;
use ttmesh_fabric::*;

/// What a receiver and the links saw of one message.
#[derive(Debug, PartialEq)]
struct Seen {
    landed: Vec<u8>,
    writes: Vec<(NocAddr, usize)>,
    send: Result<(), String>,
    wait: Result<(), String>,
    flush: Result<(), String>,
    /// Per link: packets, payload bytes, dropped, corrupted.
    links: Vec<(u64, u64, u64, u64)>,
}

/// How a message's bytes are handed to the fabric.
#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    Given,
    Computed,
    /// Copied from chip 0's memory, where they were written first.
    Copied,
}

/// Sends `data` from chip 0 to `dst` at `at` on a fresh 3-chip line (with `fault` on link
/// 0), handed over `how`, and reports what was seen.
fn send(dst: u32, at: NocAddr, data: &[u8], fault: Option<Fault>, how: How) -> Seen {
    let mut spec = FabricSpec::line(3, 1, false, FabricConfig::Fabric1D);
    spec.timeout = Duration::from_secs(20);
    let (f, mems) = open(spec);
    if let Some(fault) = fault {
        f.inject(0, fault).unwrap();
    }
    let tx = f.sender(0).unwrap();
    let mut staging = Vec::new();
    let mut calls = 0;
    let mut fill = |o: usize, out: &mut [u8], _: Option<&dyn ttmesh_fabric::HeldMemory>| {
        calls += 1;
        out.copy_from_slice(&data[o..o + out.len()]);
        true
    };
    let from = NocAddr::l1(2, 512);
    mems[0].write(from, data).unwrap();
    let send = match how {
        How::Computed => {
            tx.write_with_and_inc(dst, at, data.len(), (7, 1), &mut fill, &mut staging)
        }
        How::Given => tx.write_and_inc(dst, at, data, 7, 1),
        How::Copied => tx.copy_and_inc(dst, at, (from, data.len()), (7, 1), &mut staging),
    }
    .map_err(|e| e.to_string());
    let wait = f
        .wait_semaphore(dst, 7, 1, Duration::from_secs(20))
        .map_err(|e| e.to_string());
    let flush = tx.flush().map_err(|e| e.to_string());
    assert!(
        how != How::Computed || calls >= 1,
        "the payload was computed"
    );
    Seen {
        landed: mems[dst as usize].read(at, data.len()),
        writes: coalesced(mems[dst as usize].writes()),
        send,
        wait,
        flush,
        links: f
            .link_stats()
            .iter()
            .map(|s| (s.packets, s.payload_bytes, s.dropped, s.corrupted))
            .collect(),
    }
}

/// The memory writes as runs of contiguous bytes. One message lands as one write on the
/// direct path and as one write per packet on the packet path, and which path a send takes
/// depends on whether the receiving router is busy at that moment (it may still be starting
/// up), so only the runs are the same for both kinds of write.
fn coalesced(writes: Vec<(NocAddr, Vec<u8>)>) -> Vec<(NocAddr, usize)> {
    let mut runs: Vec<(NocAddr, usize)> = Vec::new();
    for (at, bytes) in writes {
        match runs.last_mut() {
            Some((start, len)) if start.offset(*len as u64) == at => *len += bytes.len(),
            _ => runs.push((at, bytes.len())),
        }
    }
    runs
}

#[test]
fn computed_and_copied_writes_land_count_and_fail_like_given_ones() {
    let ok = NocAddr::dram(3, 4096);
    let past_the_bank = NocAddr::dram(0, 1 << 41);
    let cases = [
        // One hop within a channel: delivered on the sending thread.
        (1, ok, 100, None),
        (1, ok, 6000, None),
        // More than a channel's packets, and two hops: packets.
        (1, ok, 40_000, None),
        (2, ok, 6000, None),
        // Faulty links take the packets, whose losses fail the wait.
        (1, ok, 9000, Some(Fault::Drop { every_nth: 2 })),
        (1, ok, 9000, Some(Fault::Corrupt { every_nth: 2 })),
        (1, ok, 9000, Some(Fault::Slow { factor: 3.0 })),
        // Memory that rejects the write: each packet's loss names its address.
        (1, past_the_bank, 100, None),
        (1, past_the_bank, 6000, None),
        (2, past_the_bank, 6000, None),
    ];
    for (dst, at, len, fault) in cases {
        let data = pattern(dst as u64 + 3, len);
        let given = send(dst, at, &data, fault, How::Given);
        for how in [How::Computed, How::Copied] {
            let sent = send(dst, at, &data, fault, how);
            let case = format!("{how:?} to chip {dst} at {at}, {len} B, fault {fault:?}");
            assert!(sent.landed == given.landed, "{case}: the bytes differ");
            assert_eq!(
                (&sent.writes, &sent.send, &sent.wait),
                (&given.writes, &given.send, &given.wait),
                "{case}"
            );
            assert_eq!(
                (&sent.flush, &sent.links),
                (&given.flush, &given.links),
                "{case}"
            );
            match (fault, at == ok) {
                (None | Some(Fault::Slow { .. }), true) => {
                    assert!(sent.landed == data, "{case}: not what was sent");
                    assert_eq!(sent.wait, Ok(()), "{case}");
                }
                (_, false) => assert!(sent.wait.is_err(), "{case}: {:?}", sent.wait),
                _ => assert!(
                    sent.send.is_err() || sent.flush.is_err(),
                    "{case}: the fault went unseen"
                ),
            }
        }
    }
}

#[test]
fn a_computed_write_to_its_own_chip_and_to_no_chip() {
    let (f, mems) = open(FabricSpec::line(2, 1, false, FabricConfig::Fabric1D));
    let tx = f.sender(1).unwrap();
    let data = pattern(5, 3000);
    let mut staging = Vec::new();
    let mut fill = |o: usize, out: &mut [u8], _: Option<&dyn ttmesh_fabric::HeldMemory>| {
        out.copy_from_slice(&data[o..o + out.len()]);
        true
    };
    let at = NocAddr::l1(1, 64);
    tx.write_with_and_inc(1, at, data.len(), (2, 1), &mut fill, &mut staging)
        .unwrap();
    f.wait_semaphore(1, 2, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(mems[1].read(at, data.len()), data);
    let e = tx
        .write_with_and_inc(9, at, data.len(), (2, 1), &mut fill, &mut staging)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        f.sender(1)
            .unwrap()
            .write_and_inc(9, at, &data, 2, 1)
            .unwrap_err()
            .to_string()
    );
}
