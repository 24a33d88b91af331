//! Flow control into a chip another process holds: the credits of packets delivered there
//! return only once that process confirms taking them, so a sender can have at most a
//! channel's worth in flight to it. The far process here is a test double that counts
//! what was sent to it and confirms it when the test says.

mod common;

use common::{pattern, LogMemory};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use ttmesh_fabric::*;

/// Chip 1 of a line of two is held by a far process: everything sent to it is counted,
/// and confirmed only up to `confirmed`.
#[derive(Default)]
struct FarProcess {
    sent: AtomicU64,
    confirmed: AtomicU64,
    memory: LogMemory,
}

/// The far chip's memory as the transport gives it to the fabric: a write is sent (here,
/// written at once and counted).
struct FarMemory(Arc<FarProcess>);

impl ChipMemory for FarMemory {
    fn write(&self, dest: NocAddr, data: &[u8]) -> Result<(), MemoryError> {
        self.0.memory.write(dest, data)?;
        self.0.sent.fetch_add(1, SeqCst);
        Ok(())
    }
}

struct Remote(Arc<FarProcess>);

impl RemoteChips for Remote {
    fn is_remote(&self, chip: u32) -> bool {
        chip == 1
    }
    fn add_semaphore(&self, _chip: u32, _sem: u32, _by: u64) {
        self.0.sent.fetch_add(1, SeqCst);
    }
    fn aborted(&self, _chip: u32, _cause: &FabricError) {}
    fn mark(&self, _chip: u32) -> u64 {
        self.0.sent.load(SeqCst)
    }
    fn confirmed(&self, _chip: u32) -> u64 {
        self.0.confirmed.load(SeqCst)
    }
}

fn open(far: &Arc<FarProcess>, timeout: Duration) -> Fabric {
    let mut spec = FabricSpec::line(2, 1, false, FabricConfig::Fabric1D);
    spec.channel_slots = 2;
    spec.remote_channel_slots = 3;
    spec.timeout = timeout;
    let memories: Vec<Arc<dyn ChipMemory>> = vec![
        Arc::new(LogMemory::default()),
        Arc::new(FarMemory(far.clone())),
    ];
    Fabric::with_remote(spec, memories, Arc::new(Remote(far.clone()))).unwrap()
}

const PAYLOAD: usize = 1000;

#[test]
fn credits_into_a_far_chip_wait_for_its_confirmation() {
    let far = Arc::new(FarProcess::default());
    let f = open(&far, Duration::from_millis(500));
    let tx = f.sender(0).unwrap().with_payload_size(PAYLOAD).unwrap();
    // Nothing is confirmed: one packet at a time, three go (the far channel's slots), and
    // the fourth waits for a credit until the send times out.
    let mut sent = 0;
    let err = (0..10u64)
        .map(|i| {
            let r = tx.unicast_write(1, NocAddr::dram(0, i * 4096), &pattern(i, PAYLOAD), 0);
            sent += r.is_ok() as u64;
            r
        })
        .find_map(Result::err);
    assert!(
        matches!(err, Some(FabricError::SendTimeout { src: 0, dst: 1, .. })),
        "{err:?}"
    );
    assert_eq!(sent, 3);
    assert_eq!(far.sent.load(SeqCst), 3);
    let stalls: u64 = f.link_stats().iter().map(|s| s.credit_stalls).sum();
    assert!(stalls > 0);
    // Once the far process confirms, the credits return and the next send goes.
    far.confirmed.store(far.sent.load(SeqCst), SeqCst);
    f.confirmations_arrived();
    tx.unicast_write(1, NocAddr::dram(0, 1 << 20), &pattern(99, PAYLOAD), 0)
        .unwrap();
    tx.flush().unwrap();
    assert_eq!(
        far.memory.read(NocAddr::dram(0, 1 << 20), PAYLOAD),
        pattern(99, PAYLOAD)
    );
}

#[test]
fn a_far_process_that_confirms_as_it_takes_gets_every_byte() {
    let far = Arc::new(FarProcess::default());
    let f = open(&far, Duration::from_secs(20));
    let done = Arc::new(AtomicBool::new(false));
    // The far process confirms what it took every half millisecond, as a transport would.
    let confirmer = {
        let (far, done, f) = (far.clone(), done.clone(), Arc::new(f));
        let f2 = f.clone();
        let t = std::thread::spawn(move || {
            while !done.load(SeqCst) {
                far.confirmed.store(far.sent.load(SeqCst), SeqCst);
                f2.confirmations_arrived();
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        (t, f)
    };
    let f = &confirmer.1;
    let tx = f.sender(0).unwrap().with_payload_size(PAYLOAD).unwrap();
    // Many packets in one message (lent to the slots), then single packets with increments.
    let big = pattern(7, 200 * PAYLOAD + 17);
    tx.unicast_write(1, NocAddr::dram(1, 0), &big, 0).unwrap();
    for i in 0..50u64 {
        tx.write_and_inc(1, NocAddr::l1(2, i * 4096), &pattern(i, 300), 5, 1)
            .unwrap();
    }
    tx.flush().unwrap();
    done.store(true, SeqCst);
    confirmer.0.join().unwrap();
    assert_eq!(far.memory.read(NocAddr::dram(1, 0), big.len()), big);
    for i in 0..50u64 {
        assert_eq!(
            far.memory.read(NocAddr::l1(2, i * 4096), 300),
            pattern(i, 300)
        );
    }
}
