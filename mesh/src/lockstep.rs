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
/// chip and addresses. Nothing to do on a mesh wholly in this process.
pub(crate) fn check_across_ranks(
    mesh: &crate::MeshDevice,
    what: &dyn Display,
    places: &[Place],
) -> Result<()> {
    let Some(ranks) = mesh.ranks() else {
        return Ok(());
    };
    let mine: Vec<u8> = places
        .iter()
        .filter(|p| mesh.holds_chip(p.chip))
        .flat_map(encode_place)
        .collect();
    let timeout = mesh.chips()[0].operation_timeout();
    let what_here = format!("{what}: the lockstep check across ranks");
    let all = ranks.exchange(&what_here, mine, timeout)?;
    let per_rank = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            decode_places(b).ok_or_else(|| {
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
}
