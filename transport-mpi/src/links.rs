//! One mesh's links to the other ranks: the fabric's [`RemoteChips`] and the `ChipMemory`
//! of every chip another rank holds (sending side), and the delivery of what other ranks send
//! into this rank's chips (receiving side).

use std::sync::{Arc, OnceLock, Weak};
use ttmesh_fabric::{ChipMemory, Fabric, FabricError, MemoryError, NocAddr, RemoteChips};

use crate::outbox::Outboxes;
use crate::wire::Message;

/// The chips of one mesh and the ranks that hold them, seen from this rank.
pub struct RankLinks {
    pub(crate) generation: u32,
    pub(crate) me: u32,
    /// Rank of each chip.
    pub(crate) owner: Vec<u32>,
    pub(crate) out: Arc<Outboxes>,
}

impl RankLinks {
    /// The `ChipMemory` the fabric delivers into for `chip`, held by another rank: writes go
    /// to that rank, in order with the semaphore increments after them.
    pub fn memory_of(self: &Arc<Self>, chip: u32) -> Arc<dyn ChipMemory> {
        Arc::new(RemoteMemory {
            links: self.clone(),
            chip,
        })
    }

    pub fn rank(&self) -> u32 {
        self.me
    }

    /// The rank that holds `chip`.
    pub fn owner(&self, chip: u32) -> u32 {
        self.owner.get(chip as usize).copied().unwrap_or(self.me)
    }

    fn send(&self, chip: u32, m: &Message<'_>) {
        self.out.push(self.owner(chip), m);
    }
}

impl RemoteChips for RankLinks {
    fn is_remote(&self, chip: u32) -> bool {
        self.owner(chip) != self.me
    }

    fn add_semaphore(&self, chip: u32, sem: u32, by: u64) {
        let m = Message::SemInc {
            generation: self.generation,
            chip,
            sem,
            by,
        };
        self.send(chip, &m);
    }

    fn aborted(&self, chip: u32, cause: &FabricError) {
        let reason = cause.to_string();
        let mut ranks: Vec<u32> = self.owner.clone();
        ranks.sort_unstable();
        ranks.dedup();
        for r in ranks.into_iter().filter(|&r| r != self.me) {
            let m = Message::Abort {
                generation: self.generation,
                chip,
                reason: &reason,
            };
            self.out.push(r, &m);
        }
    }

    fn wait_begins(&self) {
        self.out.wait_begins();
    }

    fn mark(&self, chip: u32) -> u64 {
        self.out.mark(self.owner(chip))
    }

    fn confirmed(&self, chip: u32) -> u64 {
        self.out.confirmed(self.owner(chip))
    }

    fn arrived(&self, chip: u32, link: usize, a_to_b: bool, packets: u64, payload: u64) {
        let m = Message::Arrived {
            generation: self.generation,
            chip,
            link: link as u32,
            a_to_b,
            packets,
            payload,
        };
        self.send(chip, &m);
    }

    fn wait_ends(&self) {
        self.out.wait_ends();
    }
}

/// The sending side's view of a chip another rank holds.
struct RemoteMemory {
    links: Arc<RankLinks>,
    chip: u32,
}

impl ChipMemory for RemoteMemory {
    fn write(&self, dest: NocAddr, data: &[u8]) -> Result<(), MemoryError> {
        let m = Message::Write {
            generation: self.links.generation,
            chip: self.chip,
            at: dest,
            data,
        };
        self.links.send(self.chip, &m);
        Ok(())
    }

    fn read(&self, src: NocAddr, _out: &mut [u8]) -> Result<(), MemoryError> {
        Err(format!(
            "chip {} is held by rank {} (this is rank {}): its memory at {src} is read there, \
             or reaches here as fabric packets",
            self.chip,
            self.links.owner(self.chip),
            self.links.me
        )
        .into())
    }
}

/// The receiving side: this rank's chips of one mesh, and its fabric.
pub(crate) struct Incoming {
    pub generation: u32,
    /// Rank of each chip.
    pub owner: Vec<u32>,
    pub me: u32,
    /// Per chip: its memory if this rank holds it.
    pub memories: Vec<Option<Arc<dyn ChipMemory>>>,
    pub fabric: OnceLock<Weak<Fabric>>,
}

impl Incoming {
    /// Another rank confirmed taking more of what this rank sent it: the fabric returns the
    /// credits that waited for it.
    pub fn confirmations_arrived(&self) {
        if let Some(fabric) = self.fabric.get().and_then(Weak::upgrade) {
            fabric.confirmations_arrived();
        }
    }

    /// Rank `rank` has sent nothing for `silent`: stops this mesh's fabric naming the rank,
    /// a chip it holds and the links that reach it, so every wait here ends now rather than
    /// at its timeout.
    pub fn rank_silent(&self, rank: u32, silent: std::time::Duration) {
        let Some(fabric) = self.fabric.get().and_then(Weak::upgrade) else {
            return;
        };
        if let Some((chip, cause)) = self.silence(&fabric, rank, silent) {
            fabric.abort_from_elsewhere(chip, cause);
        }
    }

    /// What a rank silent for `silent` means for this mesh, as the error every wait on it
    /// ends with (`FabricError::OtherRank`): a chip it holds and the links that reach it from
    /// this rank. None if the mesh is closed or the rank holds none of its chips.
    pub fn silence_error(&self, rank: u32, silent: std::time::Duration) -> Option<FabricError> {
        let fabric = self.fabric.get().and_then(Weak::upgrade)?;
        self.silence(&fabric, rank, silent).map(|(_, e)| e)
    }

    fn silence(
        &self,
        fabric: &Fabric,
        rank: u32,
        silent: std::time::Duration,
    ) -> Option<(u32, FabricError)> {
        let owner = |c: u32| self.owner.get(c as usize).copied();
        let chip = (0..self.owner.len() as u32).find(|&c| owner(c) == Some(rank))?;
        let links: Vec<String> = fabric
            .spec()
            .links
            .iter()
            .filter(|l| {
                let (a, b) = (owner(l.a.0), owner(l.b.0));
                (a == Some(rank) && b == Some(self.me)) || (b == Some(rank) && a == Some(self.me))
            })
            .map(|l| l.to_string())
            .collect();
        let shown = links.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
        let more = match links.len() {
            n if n > 3 => format!(" and {} more", n - 3),
            _ => String::new(),
        };
        let reason =
            format!(
            "has sent nothing for {:.1} s (killed, stopped or hung); links to it from rank {}: \
             {}{more}",
            silent.as_secs_f64(),
            self.me,
            if shown.is_empty() { "none".to_string() } else { shown }
        );
        Some((chip, FabricError::OtherRank { rank, chip, reason }))
    }

    /// Performs what rank `from` sent (a message of this generation).
    pub fn deliver(&self, from: u32, m: Message<'_>) {
        let Some(fabric) = self.fabric.get().and_then(Weak::upgrade) else {
            return;
        };
        match m {
            Message::Write { chip, at, data, .. } => {
                let res = match self.memories.get(chip as usize) {
                    Some(Some(m)) => m.write(at, data),
                    _ => Err(format!("chip {chip} is not held by this rank").into()),
                };
                if let Err(source) = res {
                    // A write the chip refuses (into a live trace, out of range) stops the
                    // fabric here and on every rank, naming it; never a silent loss.
                    let cause = FabricError::WriteFailed {
                        chip,
                        src: chip,
                        addr: at.to_string(),
                        source,
                    };
                    fabric.abort(chip, cause);
                }
            }
            Message::SemInc { chip, sem, by, .. } => {
                let _ = fabric.add_semaphore(chip, sem, by);
            }
            Message::Abort { chip, reason, .. } => {
                let cause = FabricError::OtherRank {
                    rank: from,
                    chip,
                    reason: format!("its collective failed: {reason}"),
                };
                fabric.abort_from_elsewhere(chip, cause);
            }
            Message::Arrived {
                link,
                a_to_b,
                packets,
                payload,
                ..
            } => fabric.count_arrived(link as usize, a_to_b, packets, payload),
            Message::Host { .. } | Message::Taken { .. } => {}
        }
    }
}
