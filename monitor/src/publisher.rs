//! The writing side: one segment per mesh, cheap lock-free-for-readers counter updates.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::{fchmod, Mode};

use crate::data::ProcessInfo;
use crate::error::MonitorError;
use crate::handles::{ChipPublisher, ChipWriter, LinkPublisher, Slot};
use crate::handles::{CLAIM_EXCLUSIVE, CLAIM_NONE, CLAIM_SHARED};
use crate::layout::*;
use crate::shm::{fd_stat, now_unix_ms, own_start_time, Mapping};

/// How many meshes one process may publish at once (`/ttmesh-<pid>`, `-1`, ... `-15`).
const MAX_SEGMENTS_PER_PROCESS: usize = 16;

pub(crate) struct Shared {
    pub(crate) map: Mapping,
    /// Without the leading slash.
    pub(crate) name: String,
}

/// Owns one segment; removes it (shm_unlink) when dropped. Chip and link handles keep the
/// memory mapped after that, so late updates from a chip thread are harmless.
pub struct Publisher {
    shared: Arc<Shared>,
    num_chips: usize,
    num_links: usize,
    /// Per chip: which kind of handle writes it (CLAIM_*).
    claims: Arc<[AtomicU8]>,
}

impl Publisher {
    /// Create `/ttmesh-<pid>` (or the next free `/ttmesh-<pid>-<n>`) with room for the given
    /// chips and links. Chip `i` starts as id `i` at its row-major coordinate in
    /// `info.mesh_shape`; links start with zero endpoints until [`LinkPublisher::set_endpoints`].
    ///
    /// For one rank of a split mesh (`info.ranks > 1`, see [`ProcessInfo::for_rank`]) the name
    /// is `/ttmesh-<pid>-r<rank>` and the segment holds that rank's chips only: give each its
    /// global id and coordinate with `set_identity`. Every chip slot carries `info.rank`.
    pub fn create(
        info: &ProcessInfo,
        num_chips: usize,
        num_links: usize,
    ) -> Result<Publisher, MonitorError> {
        Self::create_as(
            info,
            num_chips,
            num_links,
            std::process::id(),
            own_start_time(),
            None,
        )
    }

    /// Like [`Publisher::create`], but returns Ok(None) when `TTMESH_MONITOR` is `0`, `off`,
    /// `false` or `no`: publishing is then off and costs nothing.
    pub fn create_from_env(
        info: &ProcessInfo,
        num_chips: usize,
        num_links: usize,
    ) -> Result<Option<Publisher>, MonitorError> {
        if !ttmesh_settings::settings().monitor {
            return Ok(None);
        }
        Self::create(info, num_chips, num_links).map(Some)
    }

    /// `pid` and `start_time` are written into the header as given, and `base` (when given)
    /// replaces `ttmesh-<pid>`: tests use this to fake a segment of a dead process.
    pub(crate) fn create_as(
        info: &ProcessInfo,
        num_chips: usize,
        num_links: usize,
        pid: u32,
        start_time: u64,
        base: Option<&str>,
    ) -> Result<Publisher, MonitorError> {
        if num_chips > MAX_CHIPS {
            return Err(MonitorError::TooMany {
                what: "number of chips",
                requested: num_chips,
                max: MAX_CHIPS,
            });
        }
        if num_links > MAX_LINKS {
            return Err(MonitorError::TooMany {
                what: "number of links",
                requested: num_links,
                max: MAX_LINKS,
            });
        }
        if info.ranks == 0 || info.rank >= info.ranks {
            return Err(MonitorError::BadRank {
                rank: info.rank,
                ranks: info.ranks,
            });
        }
        let mut info = info.clone();
        info.pid = pid;
        let info_json = serde_json::to_vec(&info)?;
        if info_json.len() > INFO_CAPACITY {
            return Err(MonitorError::InfoTooLarge {
                len: info_json.len(),
                max: INFO_CAPACITY,
            });
        }
        let base = match base {
            Some(b) => b.to_string(),
            // The rank in the name tells the ranks' segments apart at a glance in /dev/shm.
            None if info.is_split() => format!("ttmesh-{pid}-r{}", info.rank),
            None => format!("ttmesh-{pid}"),
        };
        for n in 0..MAX_SEGMENTS_PER_PROCESS {
            let name = if n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            // A leftover of an earlier process that had our pid is removed and the name
            // reused; a live segment (another mesh of ours) moves us to the next suffix.
            for _ in 0..2 {
                match open_exclusive(&name)? {
                    Some(fd) => {
                        let map = init_segment(&name, fd, &info_json, &info, num_chips, num_links)
                            .inspect_err(|_| {
                                let _ = shm_unlink(format!("/{name}").as_str());
                            })?;
                        write_header(
                            &map, pid, start_time, &info, num_chips, num_links, &info_json,
                        );
                        return Ok(Publisher {
                            shared: Arc::new(Shared { map, name }),
                            num_chips,
                            num_links,
                            claims: (0..num_chips).map(|_| AtomicU8::new(CLAIM_NONE)).collect(),
                        });
                    }
                    None if crate::reader::owner_gone(&name) => {
                        let _ = shm_unlink(format!("/{name}").as_str());
                    }
                    None => break,
                }
            }
        }
        Err(MonitorError::TooManySegments {
            count: MAX_SEGMENTS_PER_PROCESS,
        })
    }

    /// The segment's name without the leading slash, e.g. "ttmesh-1234".
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn num_chips(&self) -> usize {
        self.num_chips
    }

    pub fn num_links(&self) -> usize {
        self.num_links
    }

    fn check_chip(&self, i: usize) -> Result<(), MonitorError> {
        if i >= self.num_chips {
            return Err(MonitorError::IndexOutOfRange {
                what: "chip",
                index: i,
                count: self.num_chips,
            });
        }
        Ok(())
    }

    /// A shared handle for chip slot `i` (Clone + Send + Sync, any thread may write through
    /// it). Fails while a [`ChipWriter`] for the chip exists.
    pub fn chip(&self, i: usize) -> Result<ChipPublisher, MonitorError> {
        self.check_chip(i)?;
        match self.claims[i].compare_exchange(
            CLAIM_NONE,
            CLAIM_SHARED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) | Err(CLAIM_SHARED) => {}
            Err(_) => {
                return Err(MonitorError::HandleConflict {
                    chip: i,
                    why: "its ChipWriter exists; write through that one",
                })
            }
        }
        Ok(ChipPublisher::new(Slot::new(&self.shared, chip_offset(i))))
    }

    /// The exclusive writer of chip slot `i`: updates are plain stores, no atomic
    /// read-modify-write. At most one exists per chip, and not alongside shared handles.
    pub fn chip_writer(&self, i: usize) -> Result<ChipWriter, MonitorError> {
        self.check_chip(i)?;
        match self.claims[i].compare_exchange(
            CLAIM_NONE,
            CLAIM_EXCLUSIVE,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(ChipWriter::new(
                Slot::new(&self.shared, chip_offset(i)),
                Arc::clone(&self.claims),
                i,
            )),
            Err(CLAIM_SHARED) => Err(MonitorError::HandleConflict {
                chip: i,
                why: "shared handles (Publisher::chip) were handed out; use one kind per chip",
            }),
            Err(_) => Err(MonitorError::HandleConflict {
                chip: i,
                why: "its ChipWriter already exists; there is one per chip",
            }),
        }
    }

    /// A handle for link slot `j`.
    pub fn link(&self, j: usize) -> Result<LinkPublisher, MonitorError> {
        if j >= self.num_links {
            return Err(MonitorError::IndexOutOfRange {
                what: "link",
                index: j,
                count: self.num_links,
            });
        }
        Ok(LinkPublisher::new(Slot::new(
            &self.shared,
            link_offset(self.num_chips, j),
        )))
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = shm_unlink(format!("/{}", self.shared.name).as_str());
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("name", &self.shared.name)
            .field("num_chips", &self.num_chips)
            .field("num_links", &self.num_links)
            .finish()
    }
}

/// Some(fd) when we created the name, None when it already exists.
fn open_exclusive(name: &str) -> Result<Option<OwnedFd>, MonitorError> {
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
    match shm_open(
        format!("/{name}").as_str(),
        flags,
        Mode::S_IRUSR | Mode::S_IWUSR,
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::EEXIST) => Ok(None),
        Err(e) => Err(MonitorError::os("create", name, e)),
    }
}

fn init_segment(
    name: &str,
    fd: OwnedFd,
    info_json: &[u8],
    info: &ProcessInfo,
    num_chips: usize,
    num_links: usize,
) -> Result<Mapping, MonitorError> {
    let total = total_size(num_chips, num_links);
    // The umask may have removed bits from 0600 (or a permissive mount added some): set the
    // mode explicitly, then check it.
    fchmod(fd.as_raw_fd(), Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| MonitorError::os("set the mode of", name, e))?;
    let (_, mode) = fd_stat(&fd).map_err(|e| MonitorError::os("stat", name, e))?;
    if mode & 0o777 != 0o600 {
        return Err(MonitorError::BadMode {
            name: name.to_string(),
            mode,
        });
    }
    nix::unistd::ftruncate(&fd, total as i64).map_err(|e| MonitorError::os("size", name, e))?;
    // Reserve the pages now: on a full tmpfs a later first write would be SIGBUS, not an error.
    match nix::fcntl::posix_fallocate(fd.as_raw_fd(), 0, total as i64) {
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::EOPNOTSUPP) => {}
        Err(e) => return Err(MonitorError::os("reserve memory for", name, e)),
    }
    let map = Mapping::map(&fd, total, true).map_err(|e| MonitorError::os("map", name, e))?;
    map.write_bytes(INFO_OFFSET, info_json);
    let cols = info.mesh_shape.1.max(1) as u64;
    for i in 0..num_chips {
        let base = chip_offset(i);
        map.store_u64(base + 8 * C_ID, i as u64);
        map.store_u64(base + 8 * C_ROW, i as u64 / cols);
        map.store_u64(base + 8 * C_COL, i as u64 % cols);
        map.store_u64(base + 8 * C_RANK, u64::from(info.rank));
    }
    Ok(map)
}

/// Everything but the magic, then the magic with release: a reader that sees the magic sees a
/// complete segment.
fn write_header(
    map: &Mapping,
    pid: u32,
    start_time: u64,
    info: &ProcessInfo,
    num_chips: usize,
    num_links: usize,
    info_json: &[u8],
) {
    map.store_u32(H_VERSION, LAYOUT_VERSION);
    map.store_u32(H_HEADER_SIZE, HEADER_SIZE as u32);
    map.store_u64(H_TOTAL_SIZE, total_size(num_chips, num_links) as u64);
    map.store_u32(H_PID, pid);
    map.store_u64(H_START_TIME, start_time);
    map.store_u32(H_NUM_CHIPS, num_chips as u32);
    map.store_u32(H_NUM_LINKS, num_links as u32);
    map.store_u32(H_CHIP_SLOT, CHIP_SLOT_SIZE as u32);
    map.store_u32(H_LINK_SLOT, LINK_SLOT_SIZE as u32);
    map.store_u32(H_INFO_OFFSET, INFO_OFFSET as u32);
    map.store_u32(H_INFO_LEN, info_json.len() as u32);
    map.store_u32(H_CHIPS_OFFSET, CHIPS_OFFSET as u32);
    map.store_u32(H_LINKS_OFFSET, links_offset(num_chips) as u32);
    map.store_u64(H_CREATED_MS, now_unix_ms());
    map.store_u32(H_RANK, info.rank);
    map.store_u32(H_RANKS, info.ranks);
    map.word(H_MAGIC)
        .expect("layout bug")
        .store(MAGIC, Ordering::Release);
}
