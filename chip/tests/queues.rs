//! Command queues and events: in-order execution per queue, non-blocking enqueue and reads,
//! events between queues (the device stalls, the host does not), timeouts that name the chip,
//! queue and event. A host callback that blocks on a channel holds a dispatcher at a known
//! point, so ordering is checked without timing assumptions.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{chip_with, upload, values};
use ttmesh_chip::{ChipError, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor};

/// Blocks `cq` of `chip` until the returned sender is dropped or sent to (at most 30 s).
fn hold(chip: &ttmesh_chip::Chip, cq: CqId) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    chip.enqueue_host_callback(cq, move || {
        let _ = rx.recv_timeout(Duration::from_secs(30));
        Ok(())
    })
    .unwrap();
    tx
}

fn host(v: f32) -> HostTensor {
    HostTensor::from_f32(vec![64, 64], DataType::Float32, vec![v; 4096]).unwrap()
}

#[test]
fn wait_for_event_stalls_the_device_queue_not_the_host() {
    let chip = chip_with(|c| c.num_command_queues = 2);
    let (t, _) = upload(
        &chip,
        &[64, 64],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
        vec![1.0; 4096],
    );
    let ev = chip.create_event();
    let release = hold(&chip, CqId(0));
    t.copy_from_host(&host(2.0), CqId(0)).unwrap(); // queued behind the held callback
    chip.record_event(CqId(0), &ev).unwrap();
    // The host returns at once from both; CQ 1 stalls on the device.
    chip.wait_for_event(CqId(1), &ev).unwrap();
    let read = t.to_host_async(CqId(1)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !read.is_ready(),
        "CQ 1 ran past wait_for_event before CQ 0 recorded the event"
    );
    assert!(!chip.event_query(&ev).unwrap());
    drop(release);
    assert_eq!(
        read.wait().unwrap().to_f32_vec(),
        vec![2.0; 4096],
        "CQ 1 read after CQ 0's write"
    );
    chip.event_synchronize(&ev).unwrap();
    assert!(chip.event_query(&ev).unwrap());
    chip.synchronize().unwrap();
}

#[test]
fn event_ids_increase_per_queue_and_events_can_be_rerecorded() {
    let chip = chip_with(|c| c.num_command_queues = 2);
    let e = chip.create_event();
    assert!(e.recorded().is_none());
    let msg = chip.wait_for_event(CqId(0), &e).unwrap_err().to_string();
    assert!(msg.contains("never recorded"), "{msg}");
    assert!(chip.event_synchronize(&e).is_err() && chip.event_query(&e).is_err());
    let mut last = [0u64; 2];
    for i in 0..20u8 {
        let cq = CqId(i % 2);
        chip.record_event(cq, &e).unwrap();
        let (q, id) = e.recorded().unwrap();
        assert_eq!(q, cq);
        assert!(
            id > last[cq.0 as usize],
            "event ids increase monotonically per CQ"
        );
        last[cq.0 as usize] = id;
        chip.event_synchronize(&e).unwrap();
    }
}

#[test]
fn reads_are_non_blocking_and_queues_run_in_order() {
    let chip = chip_with(|_| {});
    let (t, _) = upload(
        &chip,
        &[64, 64],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::L1,
        vec![0.0; 4096],
    );
    let release = hold(&chip, CqId(0));
    let mut reads = Vec::new();
    for i in 0..200 {
        t.copy_from_host(&host(i as f32), CqId(0)).unwrap();
        reads.push(t.to_host_async(CqId(0)).unwrap());
    }
    assert!(
        reads.iter().all(|r| !r.is_ready()),
        "nothing runs while the queue is held"
    );
    drop(release);
    chip.finish(CqId(0)).unwrap();
    for (i, r) in reads.into_iter().enumerate() {
        assert!(r.is_ready(), "data is valid after finish");
        assert_eq!(
            r.wait().unwrap().to_f32_vec(),
            vec![i as f32; 4096],
            "read {i} sees write {i}"
        );
    }
}

#[test]
fn waits_time_out_naming_chip_queue_and_event() {
    let chip = chip_with(|c| {
        c.num_command_queues = 2;
        c.id = 3;
        c.operation_timeout = Duration::from_millis(200);
    });
    let ev = chip.create_event();
    let release = hold(&chip, CqId(1));
    chip.record_event(CqId(1), &ev).unwrap();
    let (cq, id) = ev.recorded().unwrap();
    assert_eq!(cq, CqId(1));
    chip.wait_for_event(CqId(0), &ev).unwrap();
    let e = chip.finish(CqId(0)).unwrap_err();
    match &e {
        ChipError::Timeout { what, seconds } => {
            assert_eq!(*seconds, 0.2);
            assert!(
                what.starts_with(&format!("chip 3 CQ 0 waits for event {id} of CQ 1")),
                "{what}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(e.to_string().contains("TTMESH_OPERATION_TIMEOUT_SECONDS"));
    let e = chip.event_synchronize(&ev).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "event_synchronize on chip 3 waits for event {id} of CQ 1"
        )),
        "{e}"
    );
    let e = chip.finish(CqId(1)).unwrap_err().to_string();
    assert!(e.contains("finish on chip 3 CQ 1"), "{e}");
    drop(release);
    chip.event_synchronize(&ev).unwrap();
    chip.synchronize().unwrap();
}

#[test]
fn kernel_errors_surface_at_finish_and_clear() {
    let chip = chip_with(|_| {});
    // A page write to a bank the chip does not have fails on the device, not on the host.
    chip.enqueue_write_pages(
        CqId(0),
        ttmesh_chip::allocator::MemSpace::L1,
        32,
        &[(64, 0x20000)],
        &[0u8; 32],
    )
    .unwrap();
    let e = chip.finish(CqId(0)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("names bank 64") && msg.contains("outside L1 memory"),
        "{msg}"
    );
    chip.finish(CqId(0)).unwrap();
    let (t, held) = upload(
        &chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(9, 1024, -1.0, 1.0),
    );
    assert_eq!(
        common::read(&t),
        held,
        "the queue keeps working after an error"
    );
    let _ = Tensor::allocate(&chip, t.spec().clone()).unwrap();
}

/// A buffer freed on the host while CQ 1 still has a queued read of it: the read sees the data
/// (as on hardware, where freeing does not erase), even after CQ 0 has passed the free.
#[test]
fn freeing_waits_for_every_queue_before_host_memory_goes() {
    use ttmesh_chip::{ArchSpec, Chip, ChipConfig};
    let mut cfg = ChipConfig::new(0, ArchSpec::wormhole_b0());
    cfg.num_command_queues = 2;
    let chip = Chip::open(cfg).unwrap();
    let shape = vec![1, 1, 384, 512];
    let values: Vec<f32> = (0..384 * 512).map(|i| (i % 977) as f32 + 1.0).collect();
    let host = HostTensor::from_f32(shape, DataType::Float32, values.clone()).unwrap();
    let t = Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap();
    chip.finish(CqId(0)).unwrap();
    let (release, hold) = mpsc::channel::<()>();
    chip.enqueue_host_callback(CqId(1), move || {
        let _ = hold.recv_timeout(std::time::Duration::from_secs(20));
        Ok(())
    })
    .unwrap();
    let read = t.to_host_async(CqId(1)).unwrap();
    t.deallocate(true).unwrap();
    chip.finish(CqId(0)).unwrap();
    release.send(()).unwrap();
    let got = read.wait().unwrap();
    let wrong = got
        .as_f32()
        .unwrap()
        .iter()
        .zip(&values)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        wrong,
        0,
        "{wrong} of {} values lost: host memory went before CQ 1 read it",
        values.len()
    );
    chip.synchronize().unwrap();
    // Once both queues passed the free, the host memory is gone.
    assert_eq!(chip.memory().resident_bytes(), 0);
}

/// A buffer freed while every queue is idle gives its host memory back at once, on the host's
/// thread: no Discard record is queued, so the queues stay idle and no dispatcher wakes.
#[test]
fn freeing_on_idle_queues_returns_host_memory_at_once() {
    use ttmesh_chip::{ArchSpec, Chip, ChipConfig};
    let mut cfg = ChipConfig::new(0, ArchSpec::wormhole_b0());
    cfg.num_command_queues = 2;
    let chip = Chip::open(cfg).unwrap();
    let host =
        HostTensor::from_f32(vec![1, 1, 64, 512], DataType::Float32, vec![1.5; 64 * 512]).unwrap();
    let t = Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap();
    chip.synchronize().unwrap();
    assert!(
        chip.memory().resident_bytes() > 0,
        "the write holds host memory"
    );
    // A dispatcher goes back to sleep just after the queue's last record: wait for both.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(chip.queue_idle(CqId(0)) && chip.queue_idle(CqId(1))) {
        assert!(
            std::time::Instant::now() < deadline,
            "the queues never went idle"
        );
        std::thread::yield_now();
    }
    t.deallocate(true).unwrap();
    assert_eq!(chip.memory().resident_bytes(), 0, "freed at once");
    assert!(
        chip.queue_idle(CqId(0)) && chip.queue_idle(CqId(1)),
        "nothing was queued"
    );
    // The address is handed out again and reads as never written.
    let again = Tensor::allocate(&chip, t.spec().clone()).unwrap();
    let back = again.to_host(CqId(0)).unwrap();
    assert!(back.as_f32().unwrap().iter().all(|&v| v == 0.0));
}
