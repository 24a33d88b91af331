//! OS plumbing: mappings, /proc start times, liveness. No layout knowledge here.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use crate::data::Staleness;

/// A mapped segment. Every access goes through atomics (the other side of the mapping is
/// another process), and every offset is checked against the mapped length.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, accessed only through atomics.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd`. `writable` maps read-write (the publisher); readers map
    /// read-only so they cannot disturb the watched process even by mistake.
    pub(crate) fn map(fd: &OwnedFd, len: usize, writable: bool) -> Result<Mapping, Errno> {
        let length = NonZeroUsize::new(len).ok_or(Errno::EINVAL)?;
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an fd we own; nothing aliases it in this process.
        let ptr = unsafe { mmap(None, length, prot, MapFlags::MAP_SHARED, fd.as_fd(), 0)? };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The u64 word at byte `offset`, or None when it lies outside the mapping.
    pub(crate) fn word(&self, offset: usize) -> Option<&AtomicU64> {
        if offset % 8 != 0 || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned).
        Some(unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU64) })
    }

    pub(crate) fn load_u64(&self, offset: usize) -> Option<u64> {
        self.word(offset).map(|w| w.load(Ordering::Relaxed))
    }

    pub(crate) fn load_u32(&self, offset: usize) -> Option<u32> {
        if offset % 4 != 0 || offset.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: in bounds and 4-aligned.
        let w = unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU32) };
        Some(w.load(Ordering::Relaxed))
    }

    /// Writer only (the reader's mapping is read-only and never calls this).
    pub(crate) fn store_u32(&self, offset: usize, value: u32) {
        assert!(offset % 4 == 0 && offset + 4 <= self.len, "layout bug");
        // SAFETY: in bounds and 4-aligned.
        let w = unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU32) };
        w.store(value, Ordering::Relaxed);
    }

    pub(crate) fn store_u64(&self, offset: usize, value: u64) {
        self.word(offset)
            .expect("layout bug: header offset out of range")
            .store(value, Ordering::Relaxed);
    }

    /// Copy bytes out with volatile reads (they live in memory another process owns).
    pub(crate) fn copy_bytes(&self, offset: usize, len: usize) -> Option<Vec<u8>> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        let mut out = Vec::with_capacity(len);
        for i in 0..len {
            // SAFETY: in bounds.
            out.push(unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(offset + i)) });
        }
        Some(out)
    }

    /// Writer only: copy bytes in (before the magic publishes them).
    pub(crate) fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.len, "layout bug");
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: in bounds; the segment is not yet published, so no reader looks.
            unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(offset + i), *b) };
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range; nothing borrows it past our lifetime.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// File size and mode of an open fd.
pub(crate) fn fd_stat(fd: &OwnedFd) -> Result<(u64, u32), Errno> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    Ok((st.st_size.max(0) as u64, st.st_mode as u32 & 0o7777))
}

/// What /proc/<pid>/stat says: (state char, start time in clock ticks since boot).
/// None when /proc is unavailable or the process is gone.
pub(crate) fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the
    // last ')'. Field 3 is the state, field 22 the start time.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((state, start))
}

/// This process's start time (0 when /proc is unavailable: liveness then uses the pid only).
pub(crate) fn own_start_time() -> u64 {
    proc_stat(std::process::id()).map_or(0, |(_, t)| t)
}

/// None while the owner lives; why not otherwise.
pub(crate) fn staleness(pid: u32, start_time: u64) -> Option<Staleness> {
    match alive_start_time(pid)? {
        None => Some(Staleness::Exited),
        Some(t) if start_time != 0 && t != start_time => Some(Staleness::PidReused),
        Some(_) => None,
    }
}

/// The owner of a segment whose header is not written yet, known only by the pid in its name:
/// stale when no process has that pid, or when the one that has it started after the segment
/// was last written (so it cannot be the process that created it).
pub(crate) fn staleness_by_name(pid: u32, modified: SystemTime) -> Option<Staleness> {
    match alive_start_time(pid)? {
        None => Some(Staleness::Exited),
        Some(ticks) => {
            // The boot time /proc gives is whole seconds and drifts by up to a second between
            // reads: only a start clearly after the last write counts as another process.
            let started = started_at(ticks)?;
            (started > modified + Duration::from_secs(2)).then_some(Staleness::PidReused)
        }
    }
}

/// Some(None) when no process has `pid` (or it is a zombie), Some(Some(start ticks)) when one
/// does (Some(Some(0)) if /proc cannot say when it started), None for a pid no process can have.
fn alive_start_time(pid: u32) -> Option<Option<u64>> {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    // pid 0 or a negative pid would make kill() address a process group: never do that.
    let raw = i32::try_from(pid).ok().filter(|p| *p > 0)?;
    // EPERM means alive but another user's; anything but ESRCH: assume alive.
    if kill(Pid::from_raw(raw), None) == Err(Errno::ESRCH) {
        return Some(None);
    }
    match proc_stat(pid) {
        Some(('Z', _)) | Some(('X', _)) => Some(None),
        Some((_, t)) => Some(Some(t)),
        None => Some(Some(0)),
    }
}

/// Wall-clock time of `ticks` clock ticks after boot (boot time from /proc/stat).
fn started_at(ticks: u64) -> Option<SystemTime> {
    if ticks == 0 {
        return None;
    }
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|hz| *hz > 0)? as u64;
    Some(UNIX_EPOCH + Duration::from_secs(btime) + Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// When the file behind `fd` was last written.
pub(crate) fn fd_modified(fd: &OwnedFd) -> Result<SystemTime, Errno> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    let since_epoch = Duration::new(
        st.st_mtime.max(0) as u64,
        st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
    );
    Ok(UNIX_EPOCH + since_epoch)
}

pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
