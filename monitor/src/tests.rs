//! Segment protocol tests: publish/read round trips, writers, hostile files, staleness, the
//! CLI. Linux-only (they look at /dev/shm directly). Shared fixtures live here; each file under
//! tests/ holds one concept.

mod cli_tests;
mod corrupt_tests;
mod publish_tests;
mod rank_tests;
mod stale_tests;
mod untrusted_tests;
mod writer_tests;

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
pub(crate) struct TestFile(pub(crate) String);

impl TestFile {
    pub(crate) fn new(tag: &str, bytes: &[u8]) -> TestFile {
        Self::named(&format!("ttmesh-test-{tag}-{}", std::process::id()), bytes)
    }

    pub(crate) fn named(name: &str, bytes: &[u8]) -> TestFile {
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
pub(crate) fn valid_bytes() -> Vec<u8> {
    let p = Publisher::create(&info_for(2), 2, 3).unwrap();
    std::fs::read(shm_path(p.name())).unwrap()
}

/// [`valid_bytes`] patched, written to a test file, and the error reading it gives.
pub(crate) fn patched(tag: &str, patch: impl FnOnce(&mut Vec<u8>)) -> (TestFile, String) {
    patched_from(valid_bytes(), tag, patch)
}

pub(crate) fn patched_from(
    mut bytes: Vec<u8>,
    tag: &str,
    patch: impl FnOnce(&mut Vec<u8>),
) -> (TestFile, String) {
    patch(&mut bytes);
    let f = TestFile::new(tag, &bytes);
    let e = read_segment(&f.0).unwrap_err().to_string();
    (f, e)
}

pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}
