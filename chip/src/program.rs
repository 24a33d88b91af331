//! Programs, kernels and the program cache.
//!
//! A kernel is the device code of one op, compiled for fixed input specs: it knows shapes and
//! layouts ("compile-time args") and receives only buffer addresses at launch ("runtime args"),
//! exactly what a traced launch may vary. Kernels from other crates (the collectives) implement
//! the same trait, so the chip runs them without knowing what they do.

use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::allocator::BufferType;
use crate::arch::{ArchSpec, MathFidelity};
use crate::error::{ChipError, Result};
use crate::memory::DeviceMemory;

/// What a kernel sees while it runs on a chip's dispatcher.
pub struct KernelContext<'a> {
    pub chip: u32,
    pub arch: &'a ArchSpec,
    pub memory: &'a DeviceMemory,
    pub timeout: Duration,
}

/// What one launch does, for a device-time model: the kernel states its work, the model (which
/// lives above the chip) turns it into time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KernelCost {
    pub flops: f64,
    pub dram_bytes: f64,
    pub l1_bytes: f64,
    /// Bytes over the busiest link direction the op uses (collectives).
    pub fabric_bytes: f64,
    /// 32x32x32 tile multiplies of a matmul (0 for other ops), at `math_fidelity`.
    pub matmul_tiles: f64,
    pub math_fidelity: MathFidelity,
    /// Set by collectives: who takes part and how data travels.
    pub collective: Option<CollectiveCost>,
}

/// The shape of one collective launch, as a device-time model needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectiveCost {
    /// Bit `i` set: chip `i` takes part (chip ids below 64; every shipped mesh fits).
    pub participants: u64,
    /// Chips on the line or ring.
    pub chips: u32,
    /// Sequential steps that each pay one hop's latency (n-1 per phase on a ring or a line).
    pub steps: u32,
    /// Parallel ethernet links the op spreads its packets over.
    pub links: u32,
    /// Collectives run back to back, each with its own start-up: 1, or 2 for an all_reduce
    /// (a reduce_scatter, then an all_gather, as tt-metal runs it).
    pub phases: u32,
}

pub trait Kernel: Send + Sync {
    /// tt-metal-style op name ("Matmul", "BinaryNg", "AllGather", ...).
    fn name(&self) -> &str;
    /// Runs the whole op on the chip. `addresses` are the operand buffer addresses, in the
    /// order of `Program::operands`: exactly one per operand, each inside its buffer type's
    /// range (the dispatcher checks both before the call, so a kernel may index them).
    fn execute(&self, ctx: &KernelContext, addresses: &[u32]) -> Result<()>;
    /// What the dispatcher calls: like `execute`, but a kernel whose work another thread
    /// finishes (a small collective, whose whole line runs on the last chip to arrive) may
    /// return once it has handed its part over. The chip then runs nothing else on the queue
    /// until the work is done, and reports its result as the kernel's.
    fn launch(&self, ctx: &KernelContext, addresses: &[u32]) -> Result<Launched> {
        self.execute(ctx, addresses).map(|()| Launched::Done)
    }
    /// True if `launch` only prepares this chip's part and hands it over, never waiting for
    /// other chips (at most it runs the whole line, if it is the last to arrive). The host
    /// may then run the launch itself when the queue is idle, instead of waking the queue's
    /// thread: a collective over 8 or 32 chips then costs no thread wake-up at all.
    fn hands_off(&self) -> bool {
        false
    }
    fn cost(&self) -> KernelCost {
        KernelCost::default()
    }
}

/// How a launch ended: done, or handed to another thread that finishes it.
pub enum Launched {
    Done,
    Deferred(Arc<dyn Deferred>),
}

/// Work a kernel handed to another thread (see [`Kernel::launch`]).
pub trait Deferred: Send + Sync {
    /// True once the work is done; never blocks.
    fn is_done(&self) -> bool;
    /// Blocks until the work is done, bounded by the operation timeout (a wait that gives
    /// up names what it waited for); the kernel's result.
    fn wait(&self) -> Result<()>;
    /// When the work was done, once it is.
    fn done_at(&self) -> Option<std::time::Instant>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// One operand buffer of a program, as its launch addresses it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OperandInfo {
    pub buffer_type: BufferType,
    pub access: Access,
    /// Bytes the operand spans in each bank it uses (for the trace sanitizer).
    pub per_bank_size: u64,
    /// The tensor the program was compiled for (shape, dtype, layout, memory), for reports.
    pub spec: crate::tensor::TensorSpec,
}

/// How the real op would split over the compute grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreSplit {
    pub cores: u32,
    /// Work units (output tiles, rows, ...) per core, for the first and the last cores.
    pub units_per_core: u32,
    /// u32 runtime arguments each core receives (operand addresses, then its own ranges).
    pub args_per_core: u16,
}

pub struct Program {
    pub id: u32,
    pub kernel: Arc<dyn Kernel>,
    pub operands: Vec<OperandInfo>,
    pub split: CoreSplit,
    /// The kernel config image each launch writes (launch message, kernel text descriptors):
    /// its size is what makes launches and traces realistically large.
    pub config_image: Vec<u8>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("id", &self.id)
            .field("kernel", &self.kernel.name())
            .field("operands", &self.operands)
            .field("split", &self.split)
            .finish()
    }
}

impl Program {
    pub fn new(kernel: Arc<dyn Kernel>, operands: Vec<OperandInfo>, split: CoreSplit) -> Program {
        // Launch message (96 B) + kernel text descriptors (3 RISCs x 32 B): the few hundred
        // bytes tt-metal's dispatch writes per program.
        let image = vec![0u8; 96 + 96];
        let split = CoreSplit {
            args_per_core: split.args_per_core.max(operands.len() as u16 + 2),
            ..split
        };
        Program {
            id: 0,
            kernel,
            operands,
            split,
            config_image: image,
        }
    }

    /// Runtime args of a launch: every core gets the operand addresses, then its unit range.
    pub fn runtime_args(&self, addresses: &[u32], out: &mut Vec<u32>) {
        let per_core = self.split.args_per_core as usize;
        out.clear();
        out.reserve(per_core * self.split.cores as usize);
        for core in 0..self.split.cores {
            out.extend_from_slice(addresses);
            out.push(core * self.split.units_per_core);
            out.push(self.split.units_per_core);
            for _ in addresses.len() + 2..per_core {
                out.push(0);
            }
        }
    }
}

/// Key of the program cache: a hash of op name + attributes + input and output specs. Hashing
/// (rather than rendering a string) keeps a cache hit cheap on the host dispatch path.
pub type ProgramKey = u64;

/// Hashes anything hashable into a program key, with foldhash's quality variant at a fixed
/// seed. The cache trusts the 64 bits (two keys that collide would share a program), so the
/// hash must mix every field well, as SipHash did; it need not resist an attacker, as nothing
/// outside the process chooses or sees keys. SipHash, fed a spec's fields a few bytes per call,
/// was 15% of the host's untraced dispatch (perf on `replay_one dispatch`). rustc-hash's Fx
/// was not taken: one multiply-add per word with no final mixing of the whole, so small
/// differences in several fields of a spec can in principle cancel (not observed: the test
/// below passes with it too).
pub fn program_key(parts: &impl std::hash::Hash) -> ProgramKey {
    use std::hash::BuildHasher;
    const SEED: u64 = 0x7474_6d65_7368; // "ttmesh"
    foldhash::quality::FixedState::with_seed(SEED).hash_one(parts)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
}

/// Compiled programs of one chip, by key; and by id for the dispatcher.
#[derive(Default)]
pub struct ProgramCache {
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    /// Keys are hashes already: Fx is enough, and every launch looks one up.
    by_key: FxHashMap<ProgramKey, Arc<Program>>,
    by_id: Vec<Arc<Program>>,
    hits: u64,
    misses: u64,
}

impl ProgramCache {
    /// Returns the cached program, or compiles it. `allow_compile` is false during trace capture:
    /// a miss then is tt-metal's error (every op must have run once before capture).
    pub fn get_or_compile(
        &self,
        key: ProgramKey,
        allow_compile: bool,
        describe: impl FnOnce() -> String,
        compile: impl FnOnce() -> Result<Program>,
    ) -> Result<Arc<Program>> {
        let mut inner = self.inner.lock();
        if let Some(p) = inner.by_key.get(&key) {
            let p = p.clone();
            inner.hits += 1;
            return Ok(p);
        }
        if !allow_compile {
            return Err(ChipError::Trace(format!(
                "Program cache miss during trace capture for {}: every op must run once (compile) before begin_trace_capture; run the model once untraced first",
                describe()
            )));
        }
        inner.misses += 1;
        let mut program = compile()?;
        program.id = inner.by_id.len() as u32;
        let program = Arc::new(program);
        inner.by_id.push(program.clone());
        inner.by_key.insert(key, program.clone());
        Ok(program)
    }

    /// Snapshot of the id table for a dispatcher (programs are never removed, only added).
    pub fn table(&self) -> Vec<Arc<Program>> {
        self.inner.lock().by_id.clone()
    }

    pub fn counters(&self) -> CacheCounters {
        let i = self.inner.lock();
        CacheCounters {
            hits: i.hits,
            misses: i.misses,
            entries: i.by_id.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::program_key;
    use crate::tensor::{DataType, Layout, MemoryConfig, TensorSpec};

    /// The cache trusts a key's 64 bits, so near-identical launches (shapes a tile apart in
    /// several dims, another dtype, layout or memory) must never share one. A hash that only
    /// adds its input up fails this; subtler weaknesses need more than a test to rule out.
    #[test]
    fn near_identical_launches_get_distinct_program_keys() {
        let mut seen = HashSet::new();
        let mut count = 0;
        for dtype in [DataType::BFloat16, DataType::Float32, DataType::BFloat8B] {
            for layout in [Layout::Tile, Layout::RowMajor] {
                for memory in [MemoryConfig::DRAM, MemoryConfig::L1] {
                    for a in 1..=8 {
                        for b in 1..=8 {
                            for c in 1..=12 {
                                let shape = vec![a, b, 32 * c, 32 * (13 - c)];
                                let spec = TensorSpec::new(shape, dtype, layout, memory.clone());
                                let out =
                                    TensorSpec::new(vec![a, 32 * c], dtype, layout, memory.clone());
                                for attributes in ["Add", "Sub"] {
                                    seen.insert(program_key(&(
                                        "BinaryNg",
                                        attributes,
                                        [&spec],
                                        &out,
                                    )));
                                    count += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(seen.len(), count, "program keys collided");
    }
}
