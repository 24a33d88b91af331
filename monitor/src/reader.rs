//! The reading side: find segments, map them read-only, validate, copy consistently.
//! Nothing here writes to a segment; only [`cleanup_stale`] removes names, and only of
//! segments that are ours (valid magic) and whose owner is gone.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;

use crate::data::{
    ChipSnapshot, LinkSnapshot, MemoryKind, ProcessInfo, ProcessSnapshot, SegmentInfo, Staleness,
};
use crate::error::MonitorError;
use crate::handles::{chip_from_words, link_from_words};
use crate::layout::*;
use crate::seqlock::{read_slot, ReadFailure};
use crate::shm::{fd_modified, fd_stat, staleness, staleness_by_name, Mapping};

/// Where Linux shows POSIX shared-memory objects.
const SHM_DIR: &str = "/dev/shm";
const PREFIX: &str = "ttmesh-";

/// Every `ttmesh-*` object in /dev/shm, ordered by pid then name. Nothing is validated yet;
/// an empty list where /dev/shm does not exist.
pub fn list_segments() -> Vec<SegmentInfo> {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return Vec::new();
    };
    let mut out: Vec<SegmentInfo> = dir
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !name.starts_with(PREFIX) {
                return None;
            }
            let meta = e.metadata().ok()?;
            meta.is_file().then(|| SegmentInfo {
                pid: pid_from_name(&name),
                size: meta.len(),
                name,
            })
        })
        .collect();
    out.sort_by(|a, b| (a.pid, &a.name).cmp(&(b.pid, &b.name)));
    out
}

/// The pid in `ttmesh-<pid>`, `ttmesh-<pid>-<n>`, `ttmesh-<pid>-r<rank>` or
/// `ttmesh-<pid>-r<rank>-<n>`.
pub(crate) fn pid_from_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.split('-');
    let pid = parts.next()?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut next = parts.next();
    if let Some(rank) = next.and_then(|p| p.strip_prefix('r')) {
        if !numeric(rank) {
            return None;
        }
        next = parts.next();
    }
    if !numeric(pid) || !next.is_none_or(numeric) || parts.next().is_some() {
        return None;
    }
    pid.parse().ok()
}

/// Accepts "ttmesh-1234" or "/ttmesh-1234"; returns the name without the slash.
fn normalize(name: &str) -> Result<String, MonitorError> {
    let bare = name.strip_prefix('/').unwrap_or(name);
    let why = if bare.is_empty() {
        Some("it is empty")
    } else if bare.contains('/') || bare == "." || bare == ".." {
        Some("a shared-memory name is one path component, like ttmesh-1234")
    } else if bare.len() > 250 {
        Some("it is longer than 250 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(MonitorError::BadName {
            name: name.to_string(),
            why,
        }),
        None => Ok(bare.to_string()),
    }
}

fn open_readonly(name: &str) -> Result<(OwnedFd, u64), MonitorError> {
    let fd = shm_open(format!("/{name}").as_str(), OFlag::O_RDONLY, Mode::empty()).map_err(
        |e| match e {
            Errno::ENOENT => MonitorError::Vanished {
                name: name.to_string(),
            },
            Errno::EACCES | Errno::EPERM => MonitorError::PermissionDenied {
                name: name.to_string(),
            },
            e => MonitorError::os("open", name, e),
        },
    )?;
    let (size, _) = fd_stat(&fd).map_err(|e| MonitorError::os("stat", name, e))?;
    Ok((fd, size))
}

/// Map at most `limit` bytes, never more than the file holds (so no read can fault).
fn map_readonly(
    name: &str,
    fd: &OwnedFd,
    size: u64,
    limit: usize,
) -> Result<Mapping, MonitorError> {
    let len = size.min(limit as u64) as usize;
    Mapping::map(fd, len, false).map_err(|e| MonitorError::os("map", name, e))
}

/// Whether `name` is a segment of ours whose owner is gone: judged by the pid and start time
/// in its header once that is written, by the pid in its name before (size 0 or magic 0: its
/// creator died between creating and publishing it). False for anything else.
pub(crate) fn owner_gone(name: &str) -> bool {
    let Ok((fd, size)) = open_readonly(name) else {
        return false;
    };
    if size == 0 {
        return stale_before_header(name, &fd).is_some();
    }
    if size < FROZEN_PREFIX as u64 {
        return false;
    }
    let Ok(map) = map_readonly(name, &fd, size, FROZEN_PREFIX) else {
        return false;
    };
    match map.word(H_MAGIC).map(|w| w.load(Ordering::Acquire)) {
        Some(0) => stale_before_header(name, &fd).is_some(),
        Some(MAGIC) => {
            let pid = map.load_u32(H_PID).filter(|p| valid_pid(*p));
            let start = map.load_u64(H_START_TIME);
            matches!((pid, start), (Some(pid), Some(start)) if staleness(pid, start).is_some())
        }
        _ => false,
    }
}

/// A segment without its header yet names its owner only in its name (`ttmesh-<pid>[-<n>]`):
/// Some(pid, why) when that owner is gone.
fn stale_before_header(name: &str, fd: &OwnedFd) -> Option<(u32, Staleness)> {
    let pid = pid_from_name(name)?;
    let modified = fd_modified(fd).ok()?;
    Some((pid, staleness_by_name(pid, modified)?))
}

/// The error for a segment whose header is not written yet: stale when its owner is gone (it
/// died while creating it), otherwise still being created.
fn not_initialised(name: &str, fd: &OwnedFd) -> MonitorError {
    match stale_before_header(name, fd) {
        Some((pid, why)) => MonitorError::StaleUninitialised {
            name: name.to_string(),
            pid,
            why,
        },
        None => MonitorError::NotInitialised {
            name: name.to_string(),
        },
    }
}

/// Linux pids are positive `pid_t`s (i32): a header pid above that is damage, and asking the
/// OS about it would address a process group instead.
fn valid_pid(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|p| p > 0)
}

fn corrupt(name: &str, detail: String) -> MonitorError {
    MonitorError::Corrupt {
        name: name.to_string(),
        detail,
    }
}

/// Read one segment: validated, each chip and link slot copied consistently. Never writes to
/// the segment and never blocks its writers.
pub fn read_segment(name: &str) -> Result<ProcessSnapshot, MonitorError> {
    let name = normalize(name)?;
    let name = name.as_str();
    let (fd, size) = open_readonly(name)?;
    if size < 8 {
        return Err(if size == 0 {
            not_initialised(name, &fd)
        } else {
            MonitorError::Truncated {
                name: name.to_string(),
                actual: size,
                expected: HEADER_SIZE as u64,
            }
        });
    }
    let max_total = total_size(MAX_CHIPS, MAX_LINKS);
    let map = map_readonly(name, &fd, size, max_total)?;
    let magic = map.word(H_MAGIC).map_or(0, |w| w.load(Ordering::Acquire));
    if magic == 0 {
        return Err(not_initialised(name, &fd));
    }
    if magic != MAGIC {
        return Err(MonitorError::BadMagic {
            name: name.to_string(),
            found: magic,
            expected: MAGIC,
        });
    }
    let (Some(version), Some(total)) = (map.load_u32(H_VERSION), map.load_u64(H_TOTAL_SIZE)) else {
        return Err(MonitorError::Truncated {
            name: name.to_string(),
            actual: size,
            expected: HEADER_SIZE as u64,
        });
    };
    if version != LAYOUT_VERSION {
        return Err(MonitorError::WrongVersion {
            name: name.to_string(),
            found: version,
            supported: LAYOUT_VERSION,
        });
    }
    let min_total = total_size(0, 0);
    if total < min_total as u64 || total > max_total as u64 {
        return Err(corrupt(
            name,
            format!("header says the segment is {total} bytes; version {LAYOUT_VERSION} segments are {min_total} to {max_total} bytes"),
        ));
    }
    if size < total {
        return Err(MonitorError::Truncated {
            name: name.to_string(),
            actual: size,
            expected: total,
        });
    }
    if size > total {
        return Err(corrupt(
            name,
            format!("the file is {size} bytes but its header says {total}"),
        ));
    }
    // From here the whole header and `total` bytes are mapped.
    let u32_at = |off| map.load_u32(off).unwrap_or(0) as usize;
    let num_chips = u32_at(H_NUM_CHIPS);
    let num_links = u32_at(H_NUM_LINKS);
    let info_len = u32_at(H_INFO_LEN);
    let checks = [
        (u32_at(H_HEADER_SIZE), HEADER_SIZE, "header size"),
        (u32_at(H_CHIP_SLOT), CHIP_SLOT_SIZE, "chip slot size"),
        (u32_at(H_LINK_SLOT), LINK_SLOT_SIZE, "link slot size"),
        (u32_at(H_INFO_OFFSET), INFO_OFFSET, "process-info offset"),
        (u32_at(H_CHIPS_OFFSET), CHIPS_OFFSET, "chips offset"),
    ];
    for (found, expected, what) in checks {
        if found != expected {
            return Err(corrupt(
                name,
                format!("{what} is {found}, expected {expected}"),
            ));
        }
    }
    if num_chips > MAX_CHIPS || num_links > MAX_LINKS {
        return Err(corrupt(
            name,
            format!("header claims {num_chips} chips and {num_links} links; at most {MAX_CHIPS} and {MAX_LINKS}"),
        ));
    }
    if u32_at(H_LINKS_OFFSET) != links_offset(num_chips)
        || total != total_size(num_chips, num_links) as u64
    {
        return Err(corrupt(
            name,
            format!("{num_chips} chips and {num_links} links do not add up to {total} bytes"),
        ));
    }
    if info_len > INFO_CAPACITY {
        return Err(corrupt(
            name,
            format!("process info is {info_len} bytes, at most {INFO_CAPACITY}"),
        ));
    }
    let pid = map.load_u32(H_PID).unwrap_or(0);
    if pid == 0 {
        return Err(corrupt(name, "pid is 0".to_string()));
    }
    if !valid_pid(pid) {
        return Err(corrupt(
            name,
            format!(
                "pid {pid} is outside 1..={}; no process can have it",
                i32::MAX
            ),
        ));
    }
    let (rank, ranks) = (
        map.load_u32(H_RANK).unwrap_or(0),
        map.load_u32(H_RANKS).unwrap_or(0),
    );
    if ranks == 0 {
        return Err(corrupt(
            name,
            "ranks is 0; a mesh spans at least 1 rank".to_string(),
        ));
    }
    if rank >= ranks {
        return Err(corrupt(
            name,
            format!(
                "rank is {rank}, but the mesh spans {ranks} ranks (0 to {})",
                ranks - 1
            ),
        ));
    }
    let info_bytes = map
        .copy_bytes(INFO_OFFSET, info_len)
        .ok_or_else(|| corrupt(name, "process info lies outside the segment".to_string()))?;
    let mut info: ProcessInfo = serde_json::from_slice(&info_bytes)
        .map_err(|e| corrupt(name, format!("process info is not valid JSON ({e})")))?;
    info.pid = pid;
    (info.rank, info.ranks) = (rank, ranks);
    let start_time = map.load_u64(H_START_TIME).unwrap_or(0);
    let created_unix_ms = map.load_u64(H_CREATED_MS).unwrap_or(0);

    let slot_error = |what: String, f: ReadFailure| match f {
        ReadFailure::TooFast => MonitorError::TooFast {
            name: name.to_string(),
            slot: what,
        },
        ReadFailure::Stuck => MonitorError::StuckSlot {
            name: name.to_string(),
            slot: what,
        },
    };
    // Sizes were validated against the file above, so every word below is mapped.
    let word = |off: usize| map.word(off).expect("validated against the file size");
    let mut chips = Vec::with_capacity(num_chips);
    for i in 0..num_chips {
        let base = chip_offset(i);
        let w = read_slot::<CHIP_USED_WORDS>(|k| word(base + 8 * k))
            .map_err(|f| slot_error(format!("chip {i}"), f))?;
        check_chip_words(name, i, &w, rank)?;
        chips.push(chip_from_words(&w));
    }
    let mut links = Vec::with_capacity(num_links);
    for j in 0..num_links {
        let base = link_offset(num_chips, j);
        let w = read_slot::<LINK_USED_WORDS>(|k| word(base + 8 * k))
            .map_err(|f| slot_error(format!("link {j}"), f))?;
        links.push(link_from_words(&w));
    }
    check_contents(name, &info, &chips, &links)?;
    Ok(ProcessSnapshot {
        segment: name.to_string(),
        info,
        start_time,
        created_unix_ms,
        stale: staleness(pid, start_time),
        chips,
        links,
    })
}

/// A chip slot's identity words, before they are narrowed to the snapshot's u32s: each fits
/// 32 bits, and the slot's rank is the segment's.
fn check_chip_words(
    name: &str,
    slot: usize,
    w: &[u64; CHIP_USED_WORDS],
    rank: u32,
) -> Result<(), MonitorError> {
    for (field, k) in [
        ("id", C_ID),
        ("row", C_ROW),
        ("column", C_COL),
        ("rank", C_RANK),
    ] {
        if w[k] > u64::from(u32::MAX) {
            return Err(corrupt(
                name,
                format!("chip slot {slot} {field} is {}, beyond 32 bits", w[k]),
            ));
        }
    }
    if w[C_RANK] != u64::from(rank) {
        return Err(corrupt(
            name,
            format!(
                "chip slot {slot} (chip {}) says rank {}, but the segment is rank {rank}'s",
                w[C_ID], w[C_RANK]
            ),
        ));
    }
    Ok(())
}

/// Numbers that cannot all be true at once mean a damaged (or hostile) segment: it is reported
/// as corrupt, naming the field, rather than shown as data. A capacity of 0 means "not
/// published yet" (a writer may count allocations before it sets capacities), and a link whose
/// endpoints are all 0 has not been given them yet.
fn check_contents(
    name: &str,
    info: &ProcessInfo,
    chips: &[ChipSnapshot],
    links: &[LinkSnapshot],
) -> Result<(), MonitorError> {
    let (rows, cols) = info.mesh_shape;
    let mesh_chips = u64::from(rows) * u64::from(cols);
    // A rank holds part of its mesh; a mesh wholly in one process is all there.
    let fits = match info.is_split() {
        true => chips.len() as u64 <= mesh_chips,
        false => chips.len() as u64 == mesh_chips,
    };
    if !fits {
        return Err(corrupt(
            name,
            format!(
                "mesh_shape is {rows}x{cols} ({mesh_chips} chips) but the segment has {} chip slots{}",
                chips.len(),
                if info.is_split() { format!(" for rank {}", info.rank) } else { String::new() }
            ),
        ));
    }
    if u64::from(info.ranks) > mesh_chips.max(1) {
        return Err(corrupt(
            name,
            format!(
                "ranks is {}, more than the {mesh_chips} chips of its {rows}x{cols} mesh",
                info.ranks
            ),
        ));
    }
    for c in chips {
        if c.coord.0 >= rows || c.coord.1 >= cols {
            return Err(corrupt(
                name,
                format!(
                    "chip {} coord is ({}, {}), outside its {rows}x{cols} mesh",
                    c.id, c.coord.0, c.coord.1
                ),
            ));
        }
        for kind in MemoryKind::ALL {
            let m = c.memory(kind);
            let beyond = [("allocated", m.allocated), ("largest_free", m.largest_free)]
                .into_iter()
                .find(|(_, v)| m.capacity > 0 && *v > m.capacity);
            if let Some((field, v)) = beyond {
                return Err(corrupt(
                    name,
                    format!(
                        "chip {} {} {field} is {v} B, more than its capacity of {} B",
                        c.id,
                        kind.label(),
                        m.capacity
                    ),
                ));
            }
        }
    }
    for (j, l) in links.iter().enumerate() {
        if (l.a_chip, l.a_port, l.b_chip, l.b_port) == (0, 0, 0, 0) {
            continue;
        }
        // A rank publishes the links its chips send on: end b may be another rank's chip.
        let ends: &[(&str, u32)] = match info.is_split() {
            true => &[("a", l.a_chip)],
            false => &[("a", l.a_chip), ("b", l.b_chip)],
        };
        for &(end, chip) in ends {
            if !chips.iter().any(|c| c.id == chip) {
                return Err(corrupt(
                    name,
                    format!(
                        "link {j} end {end} is chip {chip}, which is not among the segment's chips"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Remove segments whose owner is gone. Only ours (name prefix, and valid magic or a header
/// not yet written); segments we may not remove (another user's) are skipped silently.
/// Returns the names removed.
pub fn cleanup_stale() -> Vec<String> {
    list_segments()
        .into_iter()
        .filter(|seg| owner_gone(&seg.name))
        .filter(|seg| shm_unlink(format!("/{}", seg.name).as_str()).is_ok())
        .map(|seg| seg.name)
        .collect()
}
