//! The lockstep rule, checked in one place: a mesh buffer or trace sits at the same address,
//! with the same id, on every chip. Remote writes (collectives) and lockstep replays address
//! every chip with the first chip's numbers; if the chips' allocations diverged, they would
//! land in memory the chip handed to something else.

use std::fmt::Display;
use std::sync::Arc;

use ttmesh_chip::tensor::{Tensor, TensorSpec};
use ttmesh_chip::Chip;

use crate::error::{invalid, on_chip, Result};

/// Where one chip holds a mesh buffer or trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub chip: u32,
    /// A trace's id (buffers are matched by address alone).
    pub id: Option<u32>,
    /// `None` before it has one (a trace being captured) or where the chip does not hold it.
    pub address: Option<u64>,
}

impl Place {
    fn describe(&self) -> String {
        match (self.id, self.address) {
            (Some(id), Some(a)) => format!("id {id} at {a:#x}"),
            (None, Some(a)) => format!("{a:#x}"),
            (Some(id), None) => format!("id {id}"),
            (None, None) => "none".into(),
        }
    }
}

/// Checks that every chip holds `what` where the first chip does. `what` is only formatted
/// for an error: a collective checks its buffers at every launch.
pub(crate) fn check(what: &dyn Display, places: &[Place]) -> Result<()> {
    let Some(first) = places.first() else {
        return Ok(());
    };
    match places
        .iter()
        .find(|p| p.id != first.id || p.address != first.address)
    {
        None => Ok(()),
        Some(p) => Err(invalid(
            &what.to_string(),
            format!(
                "chip {} has {} where chip {} has {}: the chips' allocations diverged; allocate, free and capture only through the mesh, so every chip does the same in the same order",
                p.chip,
                p.describe(),
                first.chip,
                first.describe()
            ),
        )),
    }
}

/// Checks that `tensors` (one per chip) share one address.
pub(crate) fn check_tensors(what: &dyn Display, tensors: &[Tensor]) -> Result<()> {
    let places = tensors
        .iter()
        .map(|t| {
            let chip = t.chip().id();
            Ok(Place {
                chip,
                id: None,
                address: Some(t.buffer_address().map_err(on_chip(chip))?),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    check(what, &places)
}

/// Allocates one tensor of `spec` on each chip, in order, and checks they share one address.
pub(crate) fn allocate<'a>(
    what: &dyn Display,
    chips: impl IntoIterator<Item = &'a Arc<Chip>>,
    spec: &TensorSpec,
) -> Result<Vec<Tensor>> {
    let tensors = chips
        .into_iter()
        .map(|c| Tensor::allocate(c, spec.clone()).map_err(on_chip(c.id())))
        .collect::<Result<Vec<_>>>()?;
    check_tensors(what, &tensors)?;
    Ok(tensors)
}

/// Checks that every rank of a mesh over MPI ranks holds `what` where the others do: each
/// rank sends the places of the chips it holds (one host exchange, bounded by the operation
/// timeout) and every rank compares them all, so each reports the same error naming the rank,
/// chip and addresses. A rank whose own chips `failed` sends that instead, so it still meets
/// the others here (a rank that returned early would leave them waiting for it) and every
/// other rank fails too, naming it. Nothing to do on a mesh wholly in this process.
pub(crate) fn check_across_ranks(
    mesh: &crate::MeshDevice,
    what: &dyn Display,
    places: &[Place],
    failed: Option<&str>,
) -> Result<()> {
    let Some(ranks) = mesh.ranks() else {
        return Ok(());
    };
    let mine: Vec<u8> = match failed {
        None => std::iter::once(PLACES)
            .chain(
                places
                    .iter()
                    .filter(|p| mesh.holds_chip(p.chip))
                    .flat_map(encode_place),
            )
            .collect(),
        Some(why) => std::iter::once(FAILED).chain(why.bytes()).collect(),
    };
    let timeout = mesh.chips()[0].operation_timeout();
    let what_here = format!("{what}: the lockstep check across ranks");
    let all = ranks.exchange(&what_here, mine, timeout)?;
    if let Some((r, b)) = all
        .iter()
        .enumerate()
        .find(|(_, b)| b.first() == Some(&FAILED))
    {
        return Err(invalid(
            &what.to_string(),
            format!(
                "across ranks: rank {r} failed on its own chips ({}), so no rank keeps it",
                String::from_utf8_lossy(&b[1..])
            ),
        ));
    }
    let per_rank = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            b.split_first()
                .filter(|(kind, _)| **kind == PLACES)
                .and_then(|(_, b)| decode_places(b))
                .ok_or_else(|| {
                    invalid(
                        &what_here,
                        format!("rank {r} sent places that do not parse"),
                    )
                })
        })
        .collect::<Result<Vec<_>>>()?;
    compare_ranks(what, &per_rank)
}

/// The first place any rank reports that differs from rank 0's first, as an error.
fn compare_ranks(what: &dyn Display, per_rank: &[Vec<Place>]) -> Result<()> {
    let mut first: Option<(usize, Place)> = None;
    for (rank, places) in per_rank.iter().enumerate() {
        for p in places {
            match first {
                None => first = Some((rank, *p)),
                Some((r0, f)) if p.id != f.id || p.address != f.address => {
                    return Err(invalid(
                        &what.to_string(),
                        format!(
                            "across ranks: chip {} on rank {rank} has {} where chip {} on rank {r0} has {}: the ranks' programs diverged; every rank must run the same program, allocating, freeing and capturing through the mesh in the same order",
                            p.chip,
                            p.describe(),
                            f.chip,
                            f.describe()
                        ),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// What a rank's part of the check across ranks starts with.
const PLACES: u8 = 0;
const FAILED: u8 = 1;

const PLACE_BYTES: usize = 17;

fn encode_place(p: &Place) -> Vec<u8> {
    let mut v = Vec::with_capacity(PLACE_BYTES);
    v.extend_from_slice(&p.chip.to_le_bytes());
    v.push(p.id.is_some() as u8 | (p.address.is_some() as u8) << 1);
    v.extend_from_slice(&p.id.unwrap_or(0).to_le_bytes());
    v.extend_from_slice(&p.address.unwrap_or(0).to_le_bytes());
    v
}

fn decode_places(b: &[u8]) -> Option<Vec<Place>> {
    if b.len() % PLACE_BYTES != 0 {
        return None;
    }
    b.chunks_exact(PLACE_BYTES)
        .map(|c| {
            let flags = c[4];
            (flags < 4).then(|| Place {
                chip: u32::from_le_bytes(c[0..4].try_into().unwrap()),
                id: (flags & 1 != 0).then(|| u32::from_le_bytes(c[5..9].try_into().unwrap())),
                address: (flags & 2 != 0).then(|| u64::from_le_bytes(c[9..17].try_into().unwrap())),
            })
        })
        .collect()
}

/// What a rank did with its traces between two synchronisations, kept cheaply so the next
/// synchronisation across ranks can tell whether every rank did the same: a running digest of
/// every event, their count, and the first [`ReplayLog::KEPT`] events run-length encoded (a
/// replay loop of one trace is one entry), so a divergence is named with its trace and address.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ReplayLog {
    pub digest: u64,
    pub events: u64,
    /// Each distinct run of events: the event and how many times in a row.
    pub runs: Vec<(TraceEvent, u64)>,
    /// An event did not fit in `runs`: they hold the first events only.
    pub past_kept: bool,
}

/// One trace call of a rank, on the first chip it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TraceEvent {
    pub released: bool,
    /// The first chip this rank holds (named in the error; not part of the comparison: every
    /// rank holds other chips).
    pub chip: u32,
    pub trace: u32,
    pub address: Option<u64>,
}

impl TraceEvent {
    fn same_call(&self, o: &TraceEvent) -> bool {
        (self.released, self.trace, self.address) == (o.released, o.trace, o.address)
    }
    fn describe(&self) -> String {
        let at = self
            .address
            .map_or("(not held)".to_string(), |a| format!("at {a:#x}"));
        let verb = if self.released {
            "released"
        } else {
            "replayed"
        };
        format!("{verb} trace {} {at} on chip {}", self.trace, self.chip)
    }
}

impl ReplayLog {
    /// Distinct runs kept for naming a divergence; past them only the digest and count grow.
    pub const KEPT: usize = 32;

    pub fn record(&mut self, e: TraceEvent) {
        // FNV-1a over the call's fields: equal on every rank that made the same calls.
        let mut h = if self.events == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.digest
        };
        let addr = e.address.map_or(u64::MAX, |a| a);
        for b in [e.released as u64, e.trace as u64, addr]
            .iter()
            .flat_map(|v| v.to_le_bytes())
        {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.digest = h;
        self.events += 1;
        let kept = self.runs.len();
        match self.runs.last_mut() {
            _ if self.past_kept => {}
            Some((last, n)) if last.same_call(&e) => *n += 1,
            _ if kept < Self::KEPT => self.runs.push((e, 1)),
            _ => self.past_kept = true,
        }
    }

    /// The log so far, leaving an empty one (a synchronisation starts the next).
    pub fn take(&mut self) -> ReplayLog {
        std::mem::take(self)
    }

    /// The `i`-th event (0-based), if it is within the kept runs.
    fn event(&self, mut i: u64) -> Option<TraceEvent> {
        for (e, n) in &self.runs {
            if i < *n {
                return Some(*e);
            }
            i -= n;
        }
        None
    }

    /// True if the kept runs hold every event.
    fn complete(&self) -> bool {
        !self.past_kept
    }
}

/// The index of the first call where `a` and `b` differ (one made a different call, or none
/// where the other made one), walking their runs; None if they agree as far as both kept.
fn first_difference(a: &ReplayLog, b: &ReplayLog) -> Option<u64> {
    let (mut ra, mut rb) = (a.runs.iter(), b.runs.iter());
    let (mut ca, mut cb) = (ra.next().copied(), rb.next().copied());
    let mut at = 0u64;
    loop {
        match (ca, cb) {
            (Some((ea, na)), Some((eb, nb))) => {
                if !ea.same_call(&eb) {
                    return Some(at);
                }
                let step = na.min(nb);
                at += step;
                ca = if na > step {
                    Some((ea, na - step))
                } else {
                    ra.next().copied()
                };
                cb = if nb > step {
                    Some((eb, nb - step))
                } else {
                    rb.next().copied()
                };
            }
            (None, None) => return None,
            // One log ends here: a divergence if it really ended, else past what it kept.
            (None, _) => return a.complete().then_some(at),
            (_, None) => return b.complete().then_some(at),
        }
    }
}

/// Checks that every rank made the same trace calls since the last synchronisation (`logs`
/// by rank): an error naming the first rank that differs from rank 0, its chip, the trace
/// ids and addresses, and which call it was.
pub(crate) fn compare_replay_logs(logs: &[ReplayLog]) -> std::result::Result<(), String> {
    let Some(first) = logs.first() else {
        return Ok(());
    };
    let Some((rank, other)) = logs
        .iter()
        .enumerate()
        .find(|(_, l)| (l.digest, l.events) != (first.digest, first.events))
    else {
        return Ok(());
    };
    let nth = |i: u64| match i + 1 {
        1 => "first".to_string(),
        2 => "second".to_string(),
        3 => "third".to_string(),
        n => format!("{n}th"),
    };
    let diverged = first_difference(first, other);
    let fix = "every rank must run the same program: capture, replay and release the same traces in the same order";
    let said = match diverged {
        Some(i) => {
            let what = |l: &ReplayLog, r: usize| match l.event(i) {
                Some(e) => format!("rank {r} {}", e.describe()),
                None if i >= l.events => format!(
                    "rank {r} made no such call (only {} since the last synchronize)",
                    l.events
                ),
                None => format!("rank {r}'s call is past what it kept"),
            };
            format!(
                "the {} trace call since the last synchronize differs: {}, where {}",
                nth(i),
                what(other, rank),
                what(first, 0)
            )
        }
        None => format!(
            "rank {rank} made {} trace calls since the last synchronize (digest {:016x}), rank \
             0 made {} (digest {:016x}); the first {} calls of each agree",
            other.events,
            other.digest,
            first.events,
            first.digest,
            ReplayLog::KEPT
        ),
    };
    Err(format!(
        "across ranks: {said}: the ranks' traces diverged; {fix}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(chip: u32, address: u64) -> Place {
        Place {
            chip,
            id: Some(1),
            address: Some(address),
        }
    }

    #[test]
    fn places_cross_ranks_as_bytes() {
        let places = [
            at(3, 0x1000),
            Place {
                chip: 9,
                id: None,
                address: None,
            },
        ];
        let bytes: Vec<u8> = places.iter().flat_map(encode_place).collect();
        assert_eq!(decode_places(&bytes).unwrap(), places.to_vec());
        assert!(decode_places(&bytes[1..]).is_none());
    }

    #[test]
    fn ranks_that_diverged_are_named_with_chip_and_addresses() {
        let same = [
            vec![at(0, 0x40), at(1, 0x40)],
            vec![at(2, 0x40), at(3, 0x40)],
        ];
        assert!(compare_ranks(&"end_trace_capture", &same).is_ok());
        let diverged = [
            vec![at(0, 0x40), at(1, 0x40)],
            vec![at(2, 0x40), at(3, 0x80)],
        ];
        let e = compare_ranks(&"end_trace_capture", &diverged)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chip 3 on rank 1 has id 1 at 0x80"), "{e}");
        assert!(e.contains("chip 0 on rank 0 has id 1 at 0x40"), "{e}");
    }

    fn replay(chip: u32, trace: u32, address: u64) -> TraceEvent {
        TraceEvent {
            released: false,
            chip,
            trace,
            address: Some(address),
        }
    }

    fn log_of(events: &[TraceEvent]) -> ReplayLog {
        let mut l = ReplayLog::default();
        for e in events {
            l.record(*e);
        }
        l
    }

    #[test]
    fn ranks_that_replayed_the_same_traces_agree_whatever_their_chips() {
        let r0 = log_of(&[
            replay(0, 1, 0x100),
            replay(0, 1, 0x100),
            replay(0, 2, 0x200),
        ]);
        let r1 = log_of(&[
            replay(16, 1, 0x100),
            replay(16, 1, 0x100),
            replay(16, 2, 0x200),
        ]);
        assert_eq!(r0.runs.len(), 2, "a replay loop is one run");
        assert!(compare_replay_logs(&[r0.clone(), r1]).is_ok());
        assert!(compare_replay_logs(&[r0, ReplayLog::default()]).is_err());
        assert!(compare_replay_logs(&[]).is_ok());
    }

    #[test]
    fn a_rank_that_replays_another_trace_is_named_with_chip_ids_and_addresses() {
        let mut a = vec![replay(0, 1, 0x100); 5];
        let mut b = vec![replay(16, 1, 0x100); 5];
        a.push(replay(0, 1, 0x100));
        b.push(replay(16, 2, 0x200));
        let logs = [log_of(&a), log_of(&a), log_of(&b)];
        let e = compare_replay_logs(&logs).unwrap_err();
        assert!(e.contains("the 6th trace call"), "{e}");
        assert!(
            e.contains("rank 2 replayed trace 2 at 0x200 on chip 16"),
            "{e}"
        );
        assert!(
            e.contains("rank 0 replayed trace 1 at 0x100 on chip 0"),
            "{e}"
        );
    }

    #[test]
    fn a_release_or_a_missing_call_is_named() {
        let released = TraceEvent {
            released: true,
            ..replay(16, 1, 0x100)
        };
        let a = log_of(&[replay(0, 1, 0x100)]);
        let b = log_of(&[replay(16, 1, 0x100), released]);
        let e = compare_replay_logs(&[a, b]).unwrap_err();
        assert!(e.contains("second trace call"), "{e}");
        assert!(
            e.contains("rank 1 released trace 1 at 0x100 on chip 16"),
            "{e}"
        );
        assert!(e.contains("rank 0 made no such call (only 1"), "{e}");
    }

    #[test]
    fn past_the_kept_runs_the_digests_still_differ() {
        let calls = |last: u32| {
            let mut v: Vec<TraceEvent> = (0..ReplayLog::KEPT as u32 + 3)
                .map(|t| replay(0, t, 0x100 * t as u64))
                .collect();
            v.push(replay(0, last, 0x40));
            log_of(&v)
        };
        let (a, b) = (calls(7), calls(8));
        assert_eq!(a.runs.len(), ReplayLog::KEPT);
        let e = compare_replay_logs(&[a, b]).unwrap_err();
        assert!(
            e.contains("rank 1 made 36 trace calls") && e.contains("digest"),
            "{e}"
        );
    }
}
