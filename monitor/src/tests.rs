//! Segment protocol tests: publish/read round trips, hostile files, staleness, seqlock.
//! Linux-only (they look at /dev/shm directly).

mod cli_tests;
mod untrusted_tests;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::layout::*;
use crate::*;

pub(crate) fn info() -> ProcessInfo {
    ProcessInfo::for_current_process("t3k", (2, 4), "wormhole_b0", "FABRIC_1D")
}

/// [`info`] with a mesh shape that holds `chips` chips (2x4 for 8, else 1xN): a reader
/// refuses a shape that does not match the segment's chip count.
pub(crate) fn info_for(chips: usize) -> ProcessInfo {
    let mut i = info();
    if chips != 8 {
        i.mesh_shape = (1, chips as u32);
    }
    i
}

pub(crate) fn shm_path(name: &str) -> String {
    format!("/dev/shm/{name}")
}

/// Held by every test that calls [`cleanup_stale`] or leaves a stale segment for it to find:
/// one test's cleanup must not remove another's stale segment before that test has read it.
pub(crate) fn cleanup_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A file in /dev/shm removed when the test ends, pass or fail.
struct TestFile(String);

impl TestFile {
    fn new(tag: &str, bytes: &[u8]) -> TestFile {
        Self::named(&format!("ttmesh-test-{tag}-{}", std::process::id()), bytes)
    }

    fn named(name: &str, bytes: &[u8]) -> TestFile {
        std::fs::write(shm_path(name), bytes).unwrap();
        TestFile(name.to_string())
    }
}

impl Drop for TestFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(shm_path(&self.0));
    }
}

/// Bytes of a valid segment with 2 chips and 3 links: 1152 + 512 + 384 = 2048.
fn valid_bytes() -> Vec<u8> {
    let p = Publisher::create(&info_for(2), 2, 3).unwrap();
    std::fs::read(shm_path(p.name())).unwrap()
}

#[test]
fn publish_then_read_back_exact_values() {
    // A name of its own: the tests run in parallel, and another test's publisher could take
    // the default name the moment this one drops it (the check below that it is gone).
    let me = std::process::id();
    let base = format!("ttmesh-{me}-exact");
    let own = crate::shm::own_start_time();
    let p = Publisher::create_as(&info_for(8), 8, 4, me, own, Some(&base)).unwrap();
    let name = p.name().to_string();
    assert!(name.starts_with(&format!("ttmesh-{me}")));
    let c5 = p.chip(5).unwrap();
    c5.set_identity(17, (1, 3));
    let dram = MemoryCounters {
        allocated: 3 << 30,
        capacity: 12_872_318_208,
        live_buffers: 7,
        peak: 4 << 30,
        largest_free: 1 << 30,
    };
    c5.set_memory(MemoryKind::Dram, &dram);
    c5.on_allocate(MemoryKind::L1, 2048);
    c5.on_allocate(MemoryKind::L1, 4096);
    c5.on_deallocate(MemoryKind::L1, 2048);
    c5.set_capacity(MemoryKind::L1, 89_171_968);
    c5.set_largest_free(MemoryKind::L1, 1000);
    c5.set_traces(2, 16_050_000);
    c5.add_replays(3);
    c5.add_replays(4);
    c5.update(|c| {
        c.trace.allocated = 16_252_928;
        c.weights_bytes = 2_000_000_000;
        c.kv_cache_bytes = 75_497_472;
        c.host_bytes = 123_456;
    });
    let l2 = p.link(2).unwrap();
    l2.set_endpoints(1, 8, 2, 9);
    l2.add_traffic(3, 3 * 4352);
    l2.add_stalls(2);
    l2.add_errors(1);
    l2.update(|l| l.packets += 1);

    let s = read_segment(&name).unwrap();
    assert_eq!(s.segment, name);
    assert_eq!(s.info.pid, std::process::id());
    assert_eq!(s.info.topology, "t3k");
    assert_eq!(s.info.mesh_shape, (2, 4));
    assert_eq!(s.info.arch, "wormhole_b0");
    assert_eq!(s.info.fabric, "FABRIC_1D");
    assert_eq!(s.stale, None);
    assert_eq!((s.chips.len(), s.links.len()), (8, 4));
    // Untouched chips keep their row-major default identity.
    assert_eq!((s.chips[6].id, s.chips[6].coord), (6, (1, 2)));
    assert_eq!(s.chips[6].dram, MemoryCounters::default());
    let expected = ChipSnapshot {
        id: 17,
        coord: (1, 3),
        dram,
        l1: MemoryCounters {
            allocated: 4096,
            capacity: 89_171_968,
            live_buffers: 1,
            peak: 6144,
            largest_free: 1000,
        },
        l1_small: MemoryCounters::default(),
        trace: MemoryCounters {
            allocated: 16_252_928,
            ..Default::default()
        },
        traces: 2,
        trace_bytes: 16_050_000,
        replays: 7,
        weights_bytes: 2_000_000_000,
        kv_cache_bytes: 75_497_472,
        host_bytes: 123_456,
    };
    assert_eq!(s.chips[5], expected);
    assert_eq!(c5.snapshot(), Some(expected));
    let link = LinkSnapshot {
        a_chip: 1,
        a_port: 8,
        b_chip: 2,
        b_port: 9,
        packets: 4,
        bytes: 3 * 4352,
        stalls: 2,
        errors: 1,
    };
    assert_eq!(s.links[2], link);
    assert_eq!(s.links[0], LinkSnapshot::default());

    // Dropping the publisher removes the segment; a handle outliving it is harmless.
    drop(p);
    c5.add_replays(1);
    assert!(!std::path::Path::new(&shm_path(&name)).exists());
    assert!(matches!(
        read_segment(&name),
        Err(MonitorError::Vanished { .. })
    ));
}

/// The table shows what the program labelled (weights, KV cache) only when it labelled
/// something, per chip and summed; JSON always carries both figures.
#[test]
fn labelled_memory_is_shown_when_present() {
    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    let render = |p: &Publisher| {
        let s = read_segment(p.name()).unwrap();
        (
            crate::render_table(std::slice::from_ref(&s), &[]),
            crate::render_json(std::slice::from_ref(&s), &[]),
        )
    };
    let (table, json) = render(&p);
    assert!(!table.contains("weights"), "{table}");
    assert_eq!(json["processes"][0]["chips"][1]["weights_bytes"], 0);
    for i in 0..2 {
        p.chip(i).unwrap().update(|c| {
            c.weights_bytes = 3 << 20;
            c.kv_cache_bytes = 512 << 10;
        });
    }
    let (table, json) = render(&p);
    let header = table.lines().find(|l| l.contains("chip")).unwrap();
    assert!(
        header.contains("weights") && header.contains("KV cache"),
        "{table}"
    );
    let all = table
        .lines()
        .find(|l| l.trim_start().starts_with("all"))
        .unwrap();
    assert!(
        all.contains("6.00 MiB") && all.contains("1.00 MiB"),
        "{table}"
    );
    assert_eq!(json["processes"][0]["chips"][1]["weights_bytes"], 3 << 20);
    assert_eq!(
        json["processes"][0]["chips"][1]["kv_cache_bytes"],
        512 << 10
    );
}

/// Host bytes sit beside the devices' figures for every chip and summed, in the table and
/// the JSON.
#[test]
fn host_bytes_are_shown_per_chip_and_summed() {
    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    for i in 0..2 {
        p.chip(i)
            .unwrap()
            .update(|c| c.host_bytes = (i as u64 + 1) << 20);
    }
    let s = read_segment(p.name()).unwrap();
    let table = crate::render_table(std::slice::from_ref(&s), &[]);
    let header = table.lines().find(|l| l.contains("chip")).unwrap();
    assert!(header.contains("host"), "{table}");
    let all = table
        .lines()
        .find(|l| l.trim_start().starts_with("all"))
        .unwrap();
    assert!(all.contains("3.00 MiB"), "{table}");
    let json = crate::render_json(std::slice::from_ref(&s), &[]);
    assert_eq!(json["processes"][0]["chips"][1]["host_bytes"], 2 << 20);
}

#[test]
fn second_mesh_in_one_process_gets_a_suffix() {
    let a = Publisher::create(&info_for(1), 1, 0).unwrap();
    let b = Publisher::create(&info_for(1), 1, 0).unwrap();
    assert_ne!(a.name(), b.name());
    for n in [a.name(), b.name()] {
        assert_eq!(
            crate::reader::pid_from_name(n),
            Some(std::process::id()),
            "{n}"
        );
        assert!(read_segment(n).is_ok());
    }
}

#[test]
fn segment_is_owner_only() {
    let p = Publisher::create(&info_for(1), 1, 1).unwrap();
    let mode = std::fs::metadata(shm_path(p.name()))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn limits_and_indices_are_errors() {
    let e = Publisher::create(&info(), MAX_CHIPS + 1, 0).unwrap_err();
    assert_eq!(e.to_string(), "monitor: number of chips is 65, but a segment holds at most 64; publish fewer or raise the limit in ttmesh-monitor");
    assert!(matches!(
        Publisher::create(&info_for(1), 1, MAX_LINKS + 1),
        Err(MonitorError::TooMany { requested: 513, .. })
    ));
    let p = Publisher::create(&info_for(2), 2, 1).unwrap();
    assert_eq!(
        p.chip(2).err().unwrap().to_string(),
        "monitor: chip index 2 is out of range (this segment has 2)"
    );
    assert!(p.link(1).is_err());
    let mut big = info();
    big.name = "x".repeat(2000);
    assert!(matches!(
        Publisher::create(&big, 1, 1),
        Err(MonitorError::InfoTooLarge { .. })
    ));
    // The largest layout fits and reads back.
    let mut square = info();
    square.mesh_shape = (8, 8);
    let max = Publisher::create(&square, MAX_CHIPS, MAX_LINKS).unwrap();
    let s = read_segment(max.name()).unwrap();
    assert_eq!((s.chips.len(), s.links.len()), (64, 512));
}

#[test]
fn one_kind_of_writer_per_chip() {
    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    let mut w = p.chip_writer(0).unwrap();
    assert_eq!(
        p.chip_writer(0).err().unwrap().to_string(),
        "monitor: cannot hand out a writer for chip 0: its ChipWriter already exists; there is one per chip"
    );
    assert_eq!(
        p.chip(0).err().unwrap().to_string(),
        "monitor: cannot hand out a writer for chip 0: its ChipWriter exists; write through that one"
    );
    let _shared = p.chip(1).unwrap();
    let _again = p.chip(1).unwrap();
    assert_eq!(
        p.chip_writer(1).err().unwrap().to_string(),
        "monitor: cannot hand out a writer for chip 1: shared handles (Publisher::chip) were handed out; use one kind per chip"
    );
    w.on_allocate(MemoryKind::Trace, 8192);
    w.set_traces(1, 8000);
    w.add_replays(2);
    w.update(|c| c.l1.capacity = 5);
    let s = read_segment(p.name()).unwrap().chips[0];
    assert_eq!(
        (s.trace.allocated, s.trace.live_buffers, s.trace.peak),
        (8192, 1, 8192)
    );
    assert_eq!(
        (s.traces, s.trace_bytes, s.replays, s.l1.capacity),
        (1, 8000, 2, 5)
    );
    assert_eq!(w.snapshot(), Some(s));
    // Dropping the writer frees the chip for another writer.
    drop(w);
    assert!(p.chip_writer(0).is_ok());
}

#[test]
fn serial_writer_keeps_the_exclusive_claim_and_publishes() {
    let p = Publisher::create(&info_for(1), 1, 0).unwrap();
    let w = std::sync::Arc::new(p.chip_writer(0).unwrap().into_serial());
    assert!(p.chip(0).is_err() && p.chip_writer(0).is_err());
    let w2 = w.clone();
    std::thread::spawn(move || {
        w2.on_allocate(MemoryKind::Dram, 4096);
        w2.on_allocate(MemoryKind::Dram, 2048);
        w2.on_deallocate(MemoryKind::Dram, 4096);
    })
    .join()
    .unwrap();
    w.set_largest_free(MemoryKind::Dram, 77);
    let s = read_segment(p.name()).unwrap().chips[0];
    assert_eq!(
        (
            s.dram.allocated,
            s.dram.live_buffers,
            s.dram.peak,
            s.dram.largest_free
        ),
        (2048, 1, 6144, 77)
    );
    assert_eq!(w.snapshot(), Some(s));
    drop(w);
    assert!(p.chip(0).is_ok());
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Publisher>();
    send_sync::<ChipPublisher>();
    send_sync::<crate::SerialChipWriter>();
    send_sync::<LinkPublisher>();
    send::<ChipWriter>();
}

#[test]
fn env_switch() {
    for off in ["0", "off", "OFF", "false", " no "] {
        let s = ttmesh_settings::Settings::from_lookup(|k| {
            (k == "TTMESH_MONITOR").then(|| off.to_string())
        });
        assert!(!s.monitor, "{off}");
    }
    for on in [None, Some("1"), Some(""), Some("yes")] {
        let s = ttmesh_settings::Settings::from_lookup(|k| {
            on.filter(|_| k == "TTMESH_MONITOR").map(str::to_string)
        });
        assert!(s.monitor, "{on:?}");
    }
}

#[test]
fn garbage_file_is_a_specific_error_and_survives_cleanup() {
    let _cleanup = cleanup_lock();
    let f = TestFile::new("garbage", &[b'x'; 300]);
    let e = read_segment(&f.0).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not a ttmesh monitor segment (magic 0x7878787878787878, expected {:#018x})",
            f.0, MAGIC
        )
    );
    cleanup_stale();
    assert!(std::path::Path::new(&shm_path(&f.0)).exists());
    assert!(list_segments()
        .iter()
        .any(|s| s.name == f.0 && s.size == 300));
}

#[test]
fn truncated_files_are_errors_not_crashes() {
    let bytes = valid_bytes();
    assert_eq!(bytes.len(), 2048);
    for (len, msg) in [
        (64, "truncated (64 of 2048 bytes)"),
        (1500, "truncated (1500 of 2048 bytes)"),
        (2047, "truncated (2047 of 2048 bytes)"),
        (12, "truncated (12 of 128 bytes)"),
        (
            0,
            "not initialised yet (its process is still creating it, or died while creating it)",
        ),
    ] {
        let f = TestFile::new(&format!("trunc{len}"), &bytes[..len]);
        let e = read_segment(&f.0).unwrap_err();
        assert_eq!(e.to_string(), format!("{}: {msg}", f.0));
    }
}

fn patched(tag: &str, patch: impl FnOnce(&mut Vec<u8>)) -> (TestFile, String) {
    let mut bytes = valid_bytes();
    patch(&mut bytes);
    let f = TestFile::new(tag, &bytes);
    let e = read_segment(&f.0).unwrap_err().to_string();
    (f, e)
}

#[test]
fn wrong_version_and_corrupt_headers_are_named() {
    let (f, e) = patched("version", |b| {
        b[8..12].copy_from_slice(&99u32.to_le_bytes())
    });
    assert_eq!(e, format!("{}: layout version 99, this monitor reads version 1; use a ttmesh built from the same release as the watched program", f.0));
    let (f, e) = patched("chips", |b| b[40..44].copy_from_slice(&65u32.to_le_bytes()));
    assert_eq!(
        e,
        format!(
            "{}: corrupt: header claims 65 chips and 3 links; at most 64 and 512",
            f.0
        )
    );
    let (f, e) = patched("counts", |b| b[44..48].copy_from_slice(&4u32.to_le_bytes()));
    assert_eq!(
        e,
        format!(
            "{}: corrupt: 2 chips and 4 links do not add up to 2048 bytes",
            f.0
        )
    );
    let (f, e) = patched("info", |b| b[INFO_OFFSET] = b'!');
    assert!(
        e.starts_with(&format!("{}: corrupt: process info is not valid JSON", f.0)),
        "{e}"
    );
    let (f, e) = patched("longer", |b| b.extend_from_slice(&[0; 64]));
    assert_eq!(
        e,
        format!(
            "{}: corrupt: the file is 2112 bytes but its header says 2048",
            f.0
        )
    );
    let (f, e) = patched("unpublished", |b| b[0..8].fill(0));
    assert!(
        e.starts_with(&format!("{}: not initialised yet", f.0)),
        "{e}"
    );
}

#[test]
fn bad_names_are_rejected() {
    assert!(matches!(
        read_segment("ttmesh-1/../x"),
        Err(MonitorError::BadName { .. })
    ));
    assert!(matches!(
        read_segment(""),
        Err(MonitorError::BadName { .. })
    ));
    let e = read_segment("/ttmesh-no-such-segment").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ttmesh-no-such-segment: vanished (the process exited or removed it)"
    );
}

pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn stale_segment_is_detected_and_cleaned() {
    let _cleanup = cleanup_lock();
    let pid = dead_pid();
    let base = format!("ttmesh-{pid}");
    let p = Publisher::create_as(&info_for(2), 2, 1, pid, 12345, Some(&base)).unwrap();
    let name = p.name().to_string();
    let s = read_segment(&name).unwrap();
    assert_eq!(s.info.pid, pid);
    assert_eq!(s.start_time, 12345);
    assert_eq!(s.stale, Some(Staleness::Exited));

    // Our own pid with another start time: the pid was reused.
    let me = std::process::id();
    let reused =
        Publisher::create_as(&info_for(1), 1, 0, me, 1, Some(&format!("ttmesh-{me}-r"))).unwrap();
    assert_eq!(
        read_segment(reused.name()).unwrap().stale,
        Some(Staleness::PidReused)
    );
    // A live one of ours is left alone.
    let live = Publisher::create(&info_for(1), 1, 0).unwrap();

    let removed = cleanup_stale();
    assert!(removed.contains(&name), "{removed:?}");
    assert!(removed.contains(&reused.name().to_string()), "{removed:?}");
    assert!(!removed.contains(&live.name().to_string()));
    assert!(!std::path::Path::new(&shm_path(&name)).exists());
    assert!(read_segment(live.name()).is_ok());
}

#[test]
fn segment_whose_owner_died_before_publishing_is_stale_and_cleaned() {
    let _cleanup = cleanup_lock();
    // A creator killed between shm_open and storing the magic leaves an empty file (before
    // ftruncate) or a zeroed one (after): only the pid in the name says whose it was.
    let pid = dead_pid();
    let empty = TestFile::named(&format!("ttmesh-{pid}"), &[]);
    let zeroed = TestFile::named(&format!("ttmesh-{pid}-1"), &[0; 2048]);
    for f in [&empty, &zeroed] {
        assert_eq!(
            read_segment(&f.0).unwrap_err().to_string(),
            format!("{}: stale (process {pid} exited, before it finished creating the segment); `ttmesh monitor --cleanup` removes it", f.0)
        );
    }
    // Named after this (live) process and written just now: still being created.
    let me = std::process::id();
    let creating = TestFile::named(&format!("ttmesh-{me}-77"), &[0; 2048]);
    assert!(
        matches!(
            read_segment(&creating.0),
            Err(MonitorError::NotInitialised { .. })
        ),
        "{:?}",
        read_segment(&creating.0)
    );
    // Named after this process but last written an hour before it started: the leftover of
    // an earlier process that had our pid.
    let leftover = TestFile::named(&format!("ttmesh-{me}-78"), &[]);
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(shm_path(&leftover.0))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    assert_eq!(
        read_segment(&leftover.0).unwrap_err().to_string(),
        format!("{}: stale (process {me} exited and its pid was reused, before it finished creating the segment); `ttmesh monitor --cleanup` removes it", leftover.0)
    );

    let removed = cleanup_stale();
    for gone in [&empty, &zeroed, &leftover] {
        assert!(removed.contains(&gone.0), "{removed:?}");
        assert!(!std::path::Path::new(&shm_path(&gone.0)).exists());
    }
    assert!(std::path::Path::new(&shm_path(&creating.0)).exists());
}

#[test]
fn stale_name_is_reused_by_a_new_publisher() {
    let _cleanup = cleanup_lock();
    // A segment left under a name this process wants (pid reuse after a crash) is replaced.
    let me = std::process::id();
    let base = format!("ttmesh-{me}-s");
    let old = Publisher::create_as(&info_for(1), 1, 0, me, 7, Some(&base)).unwrap();
    std::mem::forget(old); // simulate a crash: no unlink
    let new = Publisher::create_as(
        &info_for(1),
        1,
        0,
        me,
        crate::shm::own_start_time(),
        Some(&base),
    )
    .unwrap();
    assert_eq!(new.name(), base);
    assert_eq!(read_segment(&base).unwrap().stale, None);

    // So is one whose creator died before writing its header.
    let pid = dead_pid();
    let unfinished = format!("ttmesh-{pid}");
    std::fs::write(shm_path(&unfinished), []).unwrap();
    let new = Publisher::create_as(&info_for(1), 1, 0, pid, 1, Some(&unfinished)).unwrap();
    assert_eq!(new.name(), unfinished);
    assert_eq!(read_segment(&unfinished).unwrap().info.pid, pid);
}

#[test]
fn slot_stuck_mid_update_is_an_error_not_a_hang() {
    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    let c = p.chip(1).unwrap();
    let guard = crate::seqlock::write_lock(c.seq_word());
    std::mem::forget(guard); // the writer "dies" with the sequence odd
    let e = read_segment(p.name()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: chip 1 is stuck mid-update (its writer thread stopped while writing)",
            p.name()
        )
    );
    // A later writer takes the slot over after a bounded wait and the segment reads again.
    c.add_replays(1);
    assert_eq!(read_segment(p.name()).unwrap().chips[1].replays, 1);
}

#[test]
fn seqlock_readers_see_consistent_snapshots_while_writers_run() {
    let p = Publisher::create(&info_for(3), 3, 1).unwrap();
    let name = p.name().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    // Two writers on one chip exercise writer exclusion; a third rewrites whole counters.
    for _ in 0..2 {
        let (c, stop) = (p.chip(0).unwrap(), stop.clone());
        writers.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let mut heap = std::collections::HashMap::new();
            while !stop.load(Ordering::Relaxed) {
                // An allocator's own work between updates, as in a real allocate/free.
                heap.insert(n & 63, n);
                c.on_allocate(MemoryKind::Dram, 4096);
                c.on_allocate(MemoryKind::Dram, 4096);
                heap.remove(&(n & 63));
                c.on_deallocate(MemoryKind::Dram, 4096);
                c.on_deallocate(MemoryKind::Dram, 4096);
                n += 1;
            }
            n
        }));
    }
    let (c1, l0, stop1) = (p.chip(1).unwrap(), p.link(0).unwrap(), stop.clone());
    writers.push(std::thread::spawn(move || {
        let mut n = 0u64;
        let mut heap = std::collections::HashMap::new();
        while !stop1.load(Ordering::Relaxed) {
            n += 1;
            heap.insert(n & 63, n);
            heap.remove(&(n & 63));
            c1.update(|c| {
                c.l1.live_buffers = n;
                c.l1.allocated = n * 4096;
                c.l1.peak = n * 4096;
                c.replays = n;
            });
            l0.add_traffic(1, 4352);
        }
        n
    }));
    // The exclusive writer of chip 2 keeps the same invariant with plain stores.
    let (mut w2, stop2) = (p.chip_writer(2).unwrap(), stop.clone());
    writers.push(std::thread::spawn(move || {
        let mut n = 0u64;
        let mut heap = std::collections::HashMap::new();
        while !stop2.load(Ordering::Relaxed) {
            heap.insert(n & 63, n);
            w2.on_allocate(MemoryKind::L1Small, 4096);
            heap.remove(&(n & 63));
            w2.on_deallocate(MemoryKind::L1Small, 4096);
            n += 1;
        }
        n
    }));
    let mut good = 0;
    let mut too_fast = 0;
    let mut last_replays = 0;
    let t0 = std::time::Instant::now();
    for _ in 0..500 {
        match read_segment(&name) {
            Ok(s) => {
                good += 1;
                let d = s.chips[0].dram;
                assert_eq!(d.allocated, d.live_buffers * 4096, "{d:?}");
                assert!(d.live_buffers <= 4, "{d:?}");
                let l1 = s.chips[1].l1;
                assert_eq!(l1.allocated, l1.live_buffers * 4096, "{l1:?}");
                assert_eq!(l1.peak, l1.allocated);
                assert_eq!(s.chips[1].replays, l1.live_buffers);
                assert!(
                    s.chips[1].replays >= last_replays,
                    "counters went backwards"
                );
                last_replays = s.chips[1].replays;
                let l2 = s.chips[2].l1_small;
                assert_eq!(l2.allocated, l2.live_buffers * 4096, "{l2:?}");
                assert!(l2.live_buffers <= 1, "{l2:?}");
                let l = s.links[0];
                assert_eq!(l.bytes, l.packets * 4352, "{l:?}");
            }
            Err(MonitorError::TooFast { .. }) => too_fast += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // The same slot reader without the open/map/JSON overhead: far more reads land while a
    // writer is mid-update, which is what catches a broken sequence check.
    let (h0, h1) = (p.chip(0).unwrap(), p.chip(1).unwrap());
    let reader2 = p.chip(2); // refused: chip 2 has its exclusive writer
    assert!(matches!(
        reader2,
        Err(MonitorError::HandleConflict { chip: 2, .. })
    ));
    for _ in 0..200_000 {
        if let Some(c) = h0.snapshot() {
            assert_eq!(c.dram.allocated, c.dram.live_buffers * 4096, "{:?}", c.dram);
        }
        if let Some(c) = h1.snapshot() {
            assert_eq!(c.l1.allocated, c.l1.live_buffers * 4096, "{:?}", c.l1);
            assert_eq!(c.replays, c.l1.live_buffers);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    eprintln!(
        "seqlock: {good} consistent reads, {too_fast} too fast, writer rounds {counts:?}, {:?}",
        t0.elapsed()
    );
    assert!(good > 0, "no consistent read at all");
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
    // No lost update between the two writers: every allocation was freed exactly once.
    let s = read_segment(&name).unwrap();
    assert_eq!(s.chips[0].dram.allocated, 0);
    assert_eq!(s.chips[0].dram.live_buffers, 0);
    // Peak saw at most both writers holding two buffers each.
    let peak = s.chips[0].dram.peak;
    assert!(
        peak % 4096 == 0 && (2 * 4096..=4 * 4096).contains(&peak),
        "{peak}"
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Counters a real allocator can have: allocated and the largest free block within the
    /// capacity (or any, while the capacity is 0: not published yet).
    fn mem() -> impl Strategy<Value = MemoryCounters> {
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(allocated, capacity, live_buffers, peak, largest_free)| {
                let within = |v: u64| {
                    if capacity == 0 {
                        v
                    } else {
                        v % (capacity + 1).max(1)
                    }
                };
                MemoryCounters {
                    allocated: within(allocated),
                    capacity,
                    live_buffers,
                    peak,
                    largest_free: within(largest_free),
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_counters_round_trip(
            dram in mem(), l1 in mem(), l1_small in mem(), trace in mem(),
            traces in any::<u64>(), trace_bytes in any::<u64>(), replays in any::<u64>(),
            weights_bytes in any::<u64>(), kv_cache_bytes in any::<u64>(), host_bytes in any::<u64>(),
            id in any::<u32>(), r in 0u32..8, c in 0u32..8,
        ) {
            // A reader refuses a coordinate outside the mesh shape: the shape holds (r, c),
            // with a chip slot for each of its places.
            let mut i = info();
            i.mesh_shape = (r + 1, c + 1);
            let slots = ((r + 1) * (c + 1)) as usize;
            let p = Publisher::create(&i, slots, 0).unwrap();
            let chip = p.chip(0).unwrap();
            let want = ChipCounters {
                dram, l1, l1_small, trace, traces, trace_bytes, replays, weights_bytes, kv_cache_bytes,
                host_bytes,
            };
            chip.update(|x| *x = want);
            chip.set_identity(id, (r, c));
            let s = read_segment(p.name()).unwrap();
            prop_assert_eq!(s.chips[0].counters(), want);
            prop_assert_eq!((s.chips[0].id, s.chips[0].coord), (id, (r, c)));
        }

        #[test]
        fn pid_names_parse(pid in 1u32.., n in proptest::option::of(1u32..100)) {
            let name = match n {
                Some(n) => format!("ttmesh-{pid}-{n}"),
                None => format!("ttmesh-{pid}"),
            };
            prop_assert_eq!(crate::reader::pid_from_name(&name), Some(pid));
            let other = format!("ttmesh-x{pid}");
            prop_assert_eq!(crate::reader::pid_from_name(&other), None);
        }

        /// Arbitrary bytes under our name never crash the reader: they give an error or, if
        /// they happen to be valid, a snapshot.
        #[test]
        fn arbitrary_files_never_crash(bytes in proptest::collection::vec(any::<u8>(), 0..3000),
                                       keep_magic in any::<bool>()) {
            let mut bytes = bytes;
            if keep_magic && bytes.len() >= 8 {
                bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
            }
            let f = TestFile::new("fuzz", &bytes);
            let _ = read_segment(&f.0);
        }
    }
}
