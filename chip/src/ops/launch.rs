//! The one way a program reaches a chip's queue. Every op goes through [`launch`]: the chip's
//! own ops (through `run_op`, which derives the launch from an [`OpLaunch`]) and the
//! collectives, which build their programs elsewhere. So the program cache, trace capture and
//! anything that watches launches see each op exactly once per chip.
//!
//! A mesh issues the same op to N identical chips. [`LaunchRecord`] lets it derive the launch
//! once (shape checks, output spec, attributes, program key) on the first chip and repeat it on
//! the others with their own tensors ([`RecordedLaunch::launch_on`]).

use std::sync::Arc;

use parking_lot::Mutex;

use super::{split_over_grid, OpOptions};
use crate::device::{Chip, CqId};
use crate::error::{ChipError, Result};
use crate::program::{program_key, Access, CoreSplit, Kernel, OperandInfo, Program, ProgramKey};
use crate::tensor::{Tensor, TensorSpec};

/// One program launch on one chip.
pub struct Launch<'a> {
    /// tt-metal-style op name, for errors.
    pub name: &'static str,
    /// Program cache key: a hash of everything that changes the program.
    pub key: ProgramKey,
    /// Operand tensors in the kernel's address order, with how the kernel uses each; all on
    /// one chip.
    pub operands: &'a [(&'a Tensor, Access)],
    pub split: LaunchSplit,
    pub cq: CqId,
}

/// How a program spreads over the chip's cores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchSplit {
    /// The last operand's pages over up to all compute cores; `extra_args` runtime args per
    /// core beyond the operand addresses and the unit range.
    Grid { extra_args: u16 },
    /// A fixed split (collectives run on a few ethernet-facing cores, not the grid).
    Cores(CoreSplit),
}

/// What a launch does with a buffer, as a deallocated tensor's error says it.
fn action(access: Access) -> &'static str {
    match access {
        Access::Read => "used as an input",
        Access::Write => "written as an output",
        Access::ReadWrite => "used",
    }
}

/// Enqueues one launch of the program `key` names, compiling it first when the chip's cache
/// misses (`kernel` builds the device code; `describe` names the op when a miss happens during
/// trace capture, where compiling is tt-metal's error). Returns the program launched.
pub fn launch(
    l: &Launch<'_>,
    describe: impl FnOnce() -> String,
    kernel: impl FnOnce() -> Result<Arc<dyn Kernel>>,
) -> Result<Arc<Program>> {
    let (first, _) = l
        .operands
        .first()
        .ok_or_else(|| ChipError::InvalidConfig(format!("{} needs operands", l.name)))?;
    let chip = first.chip();
    let mut addresses = Vec::with_capacity(l.operands.len());
    let mut ids = Vec::with_capacity(l.operands.len());
    for (t, access) in l.operands {
        if !Arc::ptr_eq(t.chip(), chip) {
            return Err(ChipError::InvalidConfig(format!(
                "{}: {} is on another chip than {}; move it first",
                l.name,
                t.name(),
                first.name()
            )));
        }
        let (address, id) = t.buffer(action(*access))?;
        addresses.push(address as u32);
        ids.push(id);
    }
    let misses_before = chip
        .launches_observed()
        .then(|| chip.program_cache().counters().misses);
    let program =
        chip.program_cache()
            .get_or_compile(l.key, !chip.is_capturing(l.cq), describe, || {
                let kernel = kernel()?;
                let arch = chip.arch();
                let mut operands = Vec::with_capacity(l.operands.len());
                for (t, access) in l.operands {
                    let req = t.spec().allocation_request(arch)?;
                    let per_bank = chip
                        .with_allocator(|a| a.per_bank_size(&req))
                        .map(|x| x.0)?;
                    operands.push(OperandInfo {
                        buffer_type: t.spec().memory_config.buffer_type,
                        access: *access,
                        per_bank_size: per_bank,
                        spec: t.spec().clone(),
                    });
                }
                let split = match &l.split {
                    LaunchSplit::Grid { extra_args } => split_over_grid(
                        arch.num_compute_cores(),
                        l.operands[l.operands.len() - 1].0.spec().num_pages(),
                        *extra_args,
                        operands.len(),
                    ),
                    LaunchSplit::Cores(split) => split.clone(),
                };
                Ok(Program::new(kernel, operands, split))
            })?;
    chip.enqueue_program(l.cq, &program, &addresses, &ids)?;
    if let Some(misses) = misses_before {
        observe_launch(l, chip, &program, misses);
    }
    Ok(program)
}

/// Tells the chip's observers and the process's (graph capture) about a launch just enqueued.
fn observe_launch(l: &Launch<'_>, chip: &Chip, program: &Program, misses_before: u64) {
    let page_sizes: Vec<u64> = l
        .operands
        .iter()
        .map(|(t, _)| t.spec().page_size())
        .collect();
    let buffer_types: Vec<_> = l
        .operands
        .iter()
        .map(|(t, _)| t.spec().memory_config.buffer_type)
        .collect();
    let hit = misses_before == chip_misses(l);
    let launch = crate::observe::LaunchEvent {
        chip: chip.id(),
        cq: l.cq,
        name: l.name,
        program,
        program_cache_hit: hit,
        page_sizes: &page_sizes,
        buffer_types: &buffer_types,
        compute_grid: l
            .operands
            .first()
            .map_or((0, 0), |(t, _)| t.chip().arch().compute_grid),
    };
    chip.observe_launch(&launch);
}

fn chip_misses(l: &Launch<'_>) -> u64 {
    l.operands
        .first()
        .map_or(0, |(t, _)| t.chip().program_cache().counters().misses)
}

/// Everything an op hands to the common launch path.
pub(crate) struct OpLaunch<'a> {
    pub name: &'static str,
    /// Attributes that change the program (hashed into the cache key with the specs).
    pub attributes: String,
    pub inputs: Vec<&'a Tensor>,
    pub output_spec: TensorSpec,
    pub extra_args: u16,
}

/// Launches an op: checks its output (given or allocated), keys its program by name,
/// attributes and specs, and goes through [`launch`]. With `opts.record` set, leaves what it
/// derived there for the caller to repeat on identical chips.
pub(crate) fn run_op(
    op: OpLaunch<'_>,
    opts: &OpOptions,
    make_kernel: impl FnOnce(&[TensorSpec], &TensorSpec) -> Result<Arc<dyn Kernel>>,
) -> Result<Tensor> {
    let first = op
        .inputs
        .first()
        .ok_or_else(|| ChipError::InvalidConfig(format!("{} needs inputs", op.name)))?;
    let chip = first.chip();
    // The spec's error names the op only on failure: the check itself builds no string. (The
    // op's attributes string is built per call: once per mesh op, as a mesh records it.)
    if op.output_spec.validate(chip.arch(), "").is_err() {
        op.output_spec
            .validate(chip.arch(), &format!("{} output", op.name))?;
    }
    let output = output_for(op.name, chip, &op.output_spec, opts.output.as_ref())?;
    // Hashing references hashes the specs themselves: the key is what it was with owned
    // specs, without cloning them on every dispatch.
    let in_specs: Vec<&TensorSpec> = op.inputs.iter().map(|t| t.spec()).collect();
    let key = program_key(&(op.name, &op.attributes, &in_specs, &op.output_spec));
    let parts = OpParts {
        name: op.name,
        attributes: &op.attributes,
        inputs: &op.inputs,
        output_spec: &op.output_spec,
        extra_args: op.extra_args,
    };
    let program = launch_op(&parts, key, &output, opts.cq, |ins, out| {
        let owned: Vec<TensorSpec> = ins.iter().map(|s| (*s).clone()).collect();
        make_kernel(&owned, out)
    })?;
    if let Some(record) = &opts.record {
        record.put(RecordedLaunch {
            name: op.name,
            key,
            input_ids: op.inputs.iter().map(|t| t.id()).collect(),
            input_specs: in_specs.into_iter().cloned().collect(),
            output_spec: op.output_spec,
            attributes: op.attributes,
            extra_args: op.extra_args,
            cq: opts.cq,
            kernel: program.kernel.clone(),
        });
    }
    Ok(output)
}

/// An op's launch, borrowed: what [`launch_op`] needs from an [`OpLaunch`] or a recording.
struct OpParts<'a> {
    name: &'static str,
    attributes: &'a str,
    inputs: &'a [&'a Tensor],
    output_spec: &'a TensorSpec,
    extra_args: u16,
}

/// The inputs, then the output, through [`launch`].
fn launch_op(
    op: &OpParts<'_>,
    key: ProgramKey,
    output: &Tensor,
    cq: CqId,
    make_kernel: impl FnOnce(&[&TensorSpec], &TensorSpec) -> Result<Arc<dyn Kernel>>,
) -> Result<Arc<Program>> {
    let mut operands = Vec::with_capacity(op.inputs.len() + 1);
    operands.extend(op.inputs.iter().map(|t| (*t, Access::Read)));
    operands.push((output, Access::Write));
    let in_specs = || op.inputs.iter().map(|t| t.spec());
    launch(
        &Launch {
            name: op.name,
            key,
            operands: &operands,
            split: LaunchSplit::Grid {
                extra_args: op.extra_args,
            },
            cq,
        },
        || {
            format!(
                "{}({}) on {:?}",
                op.name,
                op.attributes,
                in_specs().map(|s| s.to_string()).collect::<Vec<_>>()
            )
        },
        || make_kernel(&in_specs().collect::<Vec<_>>(), op.output_spec),
    )
}

/// The output tensor of a launch: the one given (checked to have the spec and the chip), or a
/// new one.
fn output_for(
    name: &'static str,
    chip: &Arc<crate::device::Chip>,
    spec: &TensorSpec,
    given: Option<&Tensor>,
) -> Result<Tensor> {
    let Some(out) = given else {
        return Tensor::allocate(chip, spec.clone());
    };
    if out.spec() != spec {
        return Err(ChipError::ShapeMismatch {
            op: name.into(),
            detail: format!(
                "the output tensor given is {} but the op produces {}; pass an output with that spec",
                out.name(),
                spec
            ),
        });
    }
    if !Arc::ptr_eq(out.chip(), chip) {
        return Err(ChipError::InvalidConfig(format!(
            "{}: output {} is on another chip",
            name,
            out.name()
        )));
    }
    Ok(out.clone())
}

/// Where `run_op` leaves the launch it derived, so that a caller issuing the same op to
/// identical chips derives it once. Holds nothing useful if the op launched more than once
/// (the caller then runs the op on each chip).
#[derive(Clone, Default)]
pub struct LaunchRecord(Arc<Mutex<Recorded>>);

#[derive(Default)]
enum Recorded {
    #[default]
    Nothing,
    One(Box<RecordedLaunch>),
    Several,
}

impl std::fmt::Debug for LaunchRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LaunchRecord")
    }
}

impl LaunchRecord {
    fn put(&self, launch: RecordedLaunch) {
        let mut r = self.0.lock();
        *r = match *r {
            Recorded::Nothing => Recorded::One(Box::new(launch)),
            _ => Recorded::Several,
        };
    }

    /// The single launch recorded, with its inputs found among `given` (the tensors the op
    /// was called with, in the caller's order); `None` if the op did not launch exactly once
    /// on those tensors.
    pub fn take(&self, given: &[&Tensor]) -> Option<RecordedLaunch> {
        let Recorded::One(mut launch) = std::mem::take(&mut *self.0.lock()) else {
            return None;
        };
        let positions = launch
            .input_ids
            .iter()
            .map(|id| given.iter().position(|t| t.id() == *id))
            .collect::<Option<Vec<_>>>()?;
        launch.input_ids = positions.into_iter().map(|p| p as u64).collect();
        Some(*launch)
    }
}

/// An op's launch as derived on one chip, to repeat on chips that hold tensors of the same
/// specs. Its kernel is shared: kernels carry specs, never a chip's state.
pub struct RecordedLaunch {
    name: &'static str,
    key: ProgramKey,
    /// Tensor ids while recording; after [`LaunchRecord::take`], positions in the caller's inputs.
    input_ids: Vec<u64>,
    input_specs: Vec<TensorSpec>,
    output_spec: TensorSpec,
    attributes: String,
    extra_args: u16,
    cq: CqId,
    kernel: Arc<dyn Kernel>,
}

impl RecordedLaunch {
    /// Launches the op again on the chip that holds `inputs` (the same places in the caller's
    /// order as the recorded call), into `output` or a new tensor.
    pub fn launch_on(&self, inputs: &[&Tensor], output: Option<&Tensor>) -> Result<Tensor> {
        let mut launched = Vec::with_capacity(self.input_ids.len());
        for (&p, spec) in self.input_ids.iter().zip(&self.input_specs) {
            let t = *inputs.get(p as usize).ok_or_else(|| {
                ChipError::InvalidConfig(format!(
                    "{}: {} inputs given where the recorded launch took input {p}",
                    self.name,
                    inputs.len()
                ))
            })?;
            if t.spec() != spec {
                return Err(ChipError::ShapeMismatch {
                    op: self.name.into(),
                    detail: format!(
                        "{} differs from the spec {spec} the op was derived for; every chip's tensor must have the same spec",
                        t.name()
                    ),
                });
            }
            launched.push(t);
        }
        let chip = launched
            .first()
            .ok_or_else(|| ChipError::InvalidConfig(format!("{} needs inputs", self.name)))?
            .chip();
        let output = output_for(self.name, chip, &self.output_spec, output)?;
        let op = OpParts {
            name: self.name,
            attributes: &self.attributes,
            inputs: &launched,
            output_spec: &self.output_spec,
            extra_args: self.extra_args,
        };
        launch_op(&op, self.key, &output, self.cq, |_, _| {
            Ok(self.kernel.clone())
        })?;
        Ok(output)
    }
}
