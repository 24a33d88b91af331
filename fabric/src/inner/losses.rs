//! Packets that never arrived, by chip and cause: what lets a failing wait name the link and
//! fault that lost its data instead of only timing out.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkLoss {
    Down,
    Dropped,
    Corrupted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LossKey {
    Link { link: usize, kind: LinkLoss },
    Write { reason: String },
}

/// Packets meant for one chip that never arrived, by cause.
#[derive(Default)]
pub(super) struct Losses {
    records: Vec<(LossKey, u64)>,
    lost_sems: HashSet<u32>,
}

impl Inner {
    pub fn loss_error(&self, ctx: &Ctx<'_>, link: usize, kind: LinkLoss, at: u32) -> FabricError {
        let (link, src, dst, seq) = (self.link_name(link), ctx.src, ctx.dst(), ctx.seq);
        match kind {
            LinkLoss::Down => FabricError::LinkDown { link, src, dst },
            LinkLoss::Dropped => FabricError::Dropped {
                link,
                src,
                dst,
                seq,
            },
            LinkLoss::Corrupted => FabricError::Corrupted {
                link,
                src,
                dst,
                seq,
                at,
            },
        }
    }

    /// Records, for every chip the packet would still have written to, that `link` lost it.
    pub fn record_link_loss(&self, ctx: &Ctx<'_>, link: usize, kind: LinkLoss) {
        for chip in ctx.recipients() {
            self.record_loss(chip, LossKey::Link { link, kind }, ctx.sem);
        }
    }

    pub(super) fn record_loss(&self, chip: u32, key: LossKey, sem: Option<u32>) {
        {
            let mut l = self.losses[chip as usize].lock();
            match l.records.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => l.records.push((key, 1)),
            }
            if let Some(s) = sem {
                l.lost_sems.insert(s);
            }
        }
        if sem.is_some() {
            // Under the table's lock so a waiter between its check and its sleep still wakes.
            let t = &self.sems[chip as usize];
            let _g = t.vals.lock();
            t.cv.notify_all();
        }
    }

    /// "; link ... dropped 2 packets; ..." for a chip's losses, else the active faults.
    pub fn loss_cause(&self, chip: u32) -> String {
        let l = self.losses[chip as usize].lock();
        let mut out = String::new();
        for (key, n) in &l.records {
            let pk = if *n == 1 { "packet" } else { "packets" };
            let s = match key {
                LossKey::Link { link, kind } => {
                    let name = self.link_name(*link);
                    match kind {
                        LinkLoss::Down => format!("link {name} is down: {n} {pk} not delivered"),
                        LinkLoss::Dropped => format!("link {name} dropped {n} {pk}"),
                        LinkLoss::Corrupted => format!("link {name} corrupted {n} {pk}"),
                    }
                }
                LossKey::Write { reason } => {
                    format!(
                        "{n} fabric {} on chip {chip} failed: {reason}",
                        if *n == 1 { "write" } else { "writes" }
                    )
                }
            };
            out.push_str("; ");
            out.push_str(&s);
        }
        drop(l);
        if out.is_empty() {
            out = self.fault_note();
        }
        out
    }

    /// "; faults active: link ... is down" or empty.
    pub fn fault_note(&self) -> String {
        let active: Vec<String> = self
            .faults
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let name = self.link_name(i);
                f.get().map(|f| match f {
                    Fault::Down => format!("link {name} is down"),
                    Fault::Slow { factor } => format!("link {name} is slowed x{factor}"),
                    Fault::Drop { every_nth } => {
                        format!("link {name} drops every {every_nth}th packet")
                    }
                    Fault::Corrupt { every_nth } => {
                        format!("link {name} corrupts every {every_nth}th packet")
                    }
                })
            })
            .collect();
        if active.is_empty() {
            String::new()
        } else {
            format!("; faults active: {}", active.join(", "))
        }
    }

    /// Takes the lost-increment mark of a semaphore, if any (the waiter reports it once).
    pub fn take_lost_sem(&self, chip: u32, sem: u32) -> bool {
        self.losses[chip as usize].lock().lost_sems.remove(&sem)
    }

    pub fn clear_losses(&self, chip: u32) {
        *self.losses[chip as usize].lock() = Losses::default();
    }
}
