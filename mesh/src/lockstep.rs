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
