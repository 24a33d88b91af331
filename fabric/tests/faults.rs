//! Every fault kind ends in its own error naming the link, never in a hang, and the fabric
//! shuts down cleanly afterwards.

mod common;

use common::{open, pattern};
use std::time::{Duration, Instant};
use ttmesh_fabric::*;

/// Line 0-1-2-3-4-5; link i joins chip i (port 1, port 0 on chip 0) to chip i+1 (port 0).
fn line6() -> FabricSpec {
    let mut s = FabricSpec::line(6, 1, false, FabricConfig::Fabric1D);
    s.timeout = Duration::from_secs(2);
    s
}

const LINK1: &str = "chip 1 port 1 <-> chip 2 port 0";
const LINK2: &str = "chip 2 port 1 <-> chip 3 port 0";

#[test]
fn down_link_fails_senders_and_waiters_at_once() {
    let (f, mems) = open(line6());
    f.inject(2, Fault::Down).unwrap();
    let tx = f.sender(1).unwrap();
    let t = Instant::now();
    let e = tx
        .write_and_inc(4, NocAddr::dram(0, 0), &pattern(1, 5000), 7, 1)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("link {LINK2} is down: packet from chip 1 to chip 4 not delivered")
    );
    let e = f
        .wait_semaphore(4, 7, 1, Duration::from_secs(30))
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("semaphore 7 on chip 4 waited for 1, saw 0 after "),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!("; link {LINK2} is down: 2 packets not delivered")),
        "{msg}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "ended by the loss, not the timeout"
    );
    // Traffic that avoids the link still flows; a later wait that times out names the fault.
    tx.unicast_write(0, NocAddr::dram(0, 0), &[1, 2, 3], 0)
        .unwrap();
    tx.flush().unwrap();
    assert_eq!(mems[0].read(NocAddr::dram(0, 0), 3), vec![1, 2, 3]);
    let e = f
        .wait_semaphore(5, 1, 1, Duration::from_millis(10))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("semaphore 1 on chip 5 waited for 1, saw 0 after 10ms; faults active: link {LINK2} is down")
    );
    // Cleared: the same send goes through.
    f.clear_fault(2).unwrap();
    f.reset_semaphores(4).unwrap();
    tx.write_and_inc(4, NocAddr::dram(0, 0), &pattern(1, 5000), 7, 1)
        .unwrap();
    f.wait_semaphore(4, 7, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(mems[4].read(NocAddr::dram(0, 0), 5000), pattern(1, 5000));
    f.shutdown().unwrap();
}

#[test]
fn dropped_packets_are_counted_and_reported() {
    let (f, _) = open(line6());
    f.inject(1, Fault::Drop { every_nth: 2 }).unwrap();
    let tx = f.sender(0).unwrap();
    for _ in 0..4 {
        tx.atomic_inc(2, 7, 1).unwrap();
    }
    let e = tx.flush().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "link {LINK1} dropped packet 1 from chip 0 to chip 2: not delivered (fault injected \
             with Fault::Drop; clear it with clear_fault)"
        )
    );
    assert_eq!(f.semaphore_value(2, 7).unwrap(), 2);
    let e = f
        .wait_semaphore(2, 7, 4, Duration::from_secs(30))
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("semaphore 7 on chip 2 waited for 4, saw 2 after "),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!("; link {LINK1} dropped 2 packets")),
        "{msg}"
    );
    let s = &f.link_stats()[2];
    assert_eq!((s.link_index, s.direction), (1, LinkDirection::AToB));
    assert_eq!((s.packets, s.dropped, s.corrupted), (2, 2, 0));
    assert_eq!(s.fault, Some(Fault::Drop { every_nth: 2 }));
    // The first hop drops: the sender learns it from the send itself.
    let tx1 = f.sender(1).unwrap();
    tx1.atomic_inc(2, 8, 1).unwrap();
    let e = tx1.atomic_inc(2, 8, 1).unwrap_err();
    assert!(
        matches!(e, FabricError::Dropped { src: 1, dst: 2, .. }),
        "{e}"
    );
    f.shutdown().unwrap();
}

#[test]
fn corrupted_packets_are_caught_by_checksum() {
    let (f, mems) = open(line6());
    f.inject(1, Fault::Corrupt { every_nth: 2 }).unwrap();
    let tx = f.sender(0).unwrap().with_payload_size(1000).unwrap();
    let data = pattern(9, 4000);
    tx.write_and_inc(3, NocAddr::l1(2, 0), &data, 4, 1).unwrap();
    let e = tx.flush().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "link {LINK1} corrupted packet 1 from chip 0 to chip 3: checksum mismatch detected \
             at chip 2, not delivered"
        )
    );
    // Packets 0 and 2 landed intact; 1 and 3 (with the increment) never did.
    let got = mems[3].read(NocAddr::l1(2, 0), 4000);
    assert_eq!(got[..1000], data[..1000]);
    assert_eq!(got[1000..2000], vec![0u8; 1000][..]);
    assert_eq!(got[2000..3000], data[2000..3000]);
    assert_eq!(got[3000..], vec![0u8; 1000][..]);
    assert_eq!(mems[3].writes().len(), 2);
    let s = &f.link_stats()[2];
    assert_eq!((s.packets, s.corrupted, s.dropped), (4, 2, 0));
    let e = f
        .wait_semaphore(3, 4, 1, Duration::from_secs(30))
        .unwrap_err();
    assert!(
        e.to_string()
            .ends_with(&format!("; link {LINK1} corrupted 2 packets")),
        "{e}"
    );
    f.shutdown().unwrap();
}

#[test]
fn slow_link_scales_modeled_time() {
    let (f, _) = open(line6());
    f.inject(0, Fault::Slow { factor: 4.0 }).unwrap();
    let tx = f.sender(0).unwrap();
    tx.unicast_write(1, NocAddr::dram(0, 0), &pattern(2, 8704), 0)
        .unwrap();
    tx.flush().unwrap();
    let p = LinkParams::wormhole();
    // Two 4384-byte packets: 4 x 730.67 ns serialized plus 2 x 711 ns of latency.
    assert_eq!(f.link_stats()[0].busy_ns, 4345);
    assert_eq!(p.packet_ps(4352, 4.0), 4 * 365_333 + 711_000 + 1);
    let e = f.inject(0, Fault::Slow { factor: 0.5 }).unwrap_err();
    assert!(matches!(e, FabricError::InvalidArgument(_)));
    let e = f.inject(99, Fault::Down).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid argument: link index 99 does not exist: the spec has 5 links (0..5)"
    );
}

#[test]
fn a_link_going_down_mid_stream_ends_the_send_not_the_process() {
    let (f, mems) = open(line6());
    let tx = f.sender(0).unwrap().with_payload_size(64).unwrap();
    let data = pattern(3, 64 * 4000);
    tx.unicast_write(5, NocAddr::dram(0, 0), &data, 0).unwrap();
    f.inject(3, Fault::Down).unwrap();
    let r = tx
        .unicast_write(5, NocAddr::dram(1, 0), &data, 0)
        .and_then(|_| tx.flush());
    let e = r.unwrap_err();
    assert!(
        e.to_string().starts_with(
            "link chip 3 port 1 <-> chip 4 port 0 is down: packet from chip 0 to chip 5"
        ),
        "{e}"
    );
    f.clear_fault(3).unwrap();
    let _ = tx.flush();
    tx.unicast_write(5, NocAddr::dram(2, 0), &data, 0).unwrap();
    tx.flush().unwrap();
    assert_eq!(mems[5].read(NocAddr::dram(2, 0), data.len()), data);
    f.shutdown().unwrap();
}

#[test]
fn a_stuck_receiver_times_out_with_the_link_named() {
    // A write that takes long is the one way a channel stays full. It lasts until the test
    // releases it: a fixed sleep could end, on a loaded host, before the send even began.
    #[derive(Default)]
    struct Slow {
        entered: std::sync::atomic::AtomicBool,
        released: std::sync::atomic::AtomicBool,
    }
    impl ChipMemory for Slow {
        fn write(&self, _: NocAddr, _: &[u8]) -> Result<(), ttmesh_fabric::MemoryError> {
            use std::sync::atomic::Ordering::SeqCst;
            self.entered.store(true, SeqCst);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !self.released.load(SeqCst) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        }
    }
    let mut spec = FabricSpec::line(2, 1, false, FabricConfig::Fabric1D);
    spec.timeout = Duration::from_millis(300);
    spec.channel_slots = 2;
    let slow = std::sync::Arc::new(Slow::default());
    let mems: Vec<std::sync::Arc<dyn ChipMemory>> = vec![slow.clone(), slow.clone()];
    let f = Fabric::new(spec, mems).unwrap();
    let tx = f.sender(0).unwrap();
    // Get chip 1's router stuck in a write first, so the sender cannot do the work itself.
    // Senders deliver their own packets when they can, so another thread's send does it.
    let other = f.sender(0).unwrap();
    let stuck = std::thread::spawn(move || other.unicast_write(1, NocAddr::dram(0, 0), &[1], 0));
    while !slow.entered.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // The send returns only once the router has let go of its lent bytes, so the write is
    // released well after the send began waiting for a slot (its timeout is 300 ms).
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            let give_up = std::time::Instant::now() + Duration::from_secs(30);
            while f.link_stats()[0].credit_stalls == 0 && std::time::Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_secs(2));
            slow.released
                .store(true, std::sync::atomic::Ordering::SeqCst);
        });
        tx.unicast_write(1, NocAddr::dram(0, 0), &vec![1u8; 4352 * 6], 0)
            .unwrap_err()
    });
    assert_eq!(
        e.to_string(),
        "chip 0 waited 300ms for a free slot on link chip 0 port 0 <-> chip 1 port 0 toward chip 1: \
         the receiving router is not draining (raise the operation timeout if the load is legitimate)"
    );
    // Let the router finish what it took, then catch a flush that gives up early.
    stuck.join().unwrap().unwrap();
    tx.flush_timeout(Duration::from_secs(20)).unwrap();
    slow.released
        .store(false, std::sync::atomic::Ordering::SeqCst);
    slow.entered
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let other = f.sender(0).unwrap();
    let stuck = std::thread::spawn(move || other.unicast_write(1, NocAddr::dram(0, 0), &[1], 0));
    while !slow.entered.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    tx.unicast_write(1, NocAddr::dram(0, 0), &[2], 0).unwrap();
    let e = tx.flush_timeout(Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(e, FabricError::FlushTimeout { chip: 0, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("flush on chip 0 timed out after 50ms: "),
        "{e}"
    );
    assert!(f.link_stats()[0].credit_stalls >= 1);
    slow.released
        .store(true, std::sync::atomic::Ordering::SeqCst);
    stuck.join().unwrap().unwrap();
    f.shutdown().unwrap();
}

#[test]
fn a_timed_out_lent_send_returns_only_after_its_bytes_are_read() {
    // The write sleeps first and reads the bytes after: if the send returned (and its
    // buffer was freed) while a router still held lent bytes, this would read freed memory.
    #[derive(Default)]
    struct SlowCopy {
        entered: std::sync::atomic::AtomicBool,
        copies: parking_lot::Mutex<Vec<Vec<u8>>>,
    }
    impl ChipMemory for SlowCopy {
        fn write(&self, _: NocAddr, data: &[u8]) -> Result<(), ttmesh_fabric::MemoryError> {
            self.entered
                .store(true, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            self.copies.lock().push(data.to_vec());
            Ok(())
        }
    }
    let mut spec = FabricSpec::line(2, 1, false, FabricConfig::Fabric1D);
    spec.timeout = Duration::from_millis(200);
    spec.channel_slots = 2;
    let mem = std::sync::Arc::new(SlowCopy::default());
    let mems: Vec<std::sync::Arc<dyn ChipMemory>> = vec![mem.clone(), mem.clone()];
    let f = Fabric::new(spec, mems).unwrap();
    let tx = f.sender(0).unwrap();
    // Another thread's send gets the router stuck (a sender delivers its own packets).
    let other = f.sender(0).unwrap();
    let stuck = std::thread::spawn(move || other.unicast_write(1, NocAddr::dram(0, 0), &[7], 0));
    while !mem.entered.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // Large enough to be its own mapping, so reading it after it is freed would fault.
    let big = pattern(11, 1 << 20);
    let e = tx
        .unicast_write(1, NocAddr::dram(0, 64), &big, 0)
        .unwrap_err();
    assert!(
        matches!(e, FabricError::SendTimeout { src: 0, dst: 1, .. }),
        "{e}"
    );
    drop(big);
    stuck.join().unwrap().unwrap();
    tx.flush_timeout(Duration::from_secs(20)).unwrap();
    let copies = mem.copies.lock().clone();
    assert_eq!(copies[0], vec![7]);
    assert_eq!(copies[1], pattern(11, 1 << 20)[..4352].to_vec());
    f.shutdown().unwrap();
}
