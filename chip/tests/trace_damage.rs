//! A damaged trace never gives a silently wrong result. Two defences, each tested here:
//! - every write that would land inside a live trace's bytes is refused, naming what wrote
//!   (a direct write, a host write's record, a kernel) and where;
//! - damage that gets past that (a fault injected with `write_trace_commands`, standing for
//!   what the emulator cannot see) is caught by the trace's digest before any record runs: the
//!   replay is an error naming the chip, trace and first damaged byte, never Ok with wrong
//!   output.

mod common;

use std::sync::Arc;

use common::{cases, chip_with, upload, values};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::command::HEADER_BYTES;
use ttmesh_chip::compute::Activation;
use ttmesh_chip::device::TraceInfo;
use ttmesh_chip::error::{LiveTraceWrite, RecordFault};
use ttmesh_chip::ops::{self, MatmulConfig, OpOptions};
use ttmesh_chip::program::{program_key, Access, CoreSplit, Kernel, KernelContext};
use ttmesh_chip::{
    Blocking, Chip, ChipError, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor, TraceId,
};

const CQ0: CqId = CqId(0);

/// A chip with a captured matmul + gelu + softmax trace and its untraced output.
struct Fixture {
    chip: Arc<Chip>,
    x: (Tensor, HostTensor),
    /// The weights: the trace reads them at every replay.
    _w: Tensor,
    out: Tensor,
    tid: TraceId,
    info: TraceInfo,
    original: Vec<u8>,
    records: Vec<usize>,
    golden: Vec<f32>,
}

fn fixture() -> Fixture {
    let chip = chip_with(|c| c.trace_region_size = 1 << 20);
    let upload_as = |shape: &[usize], seed| {
        let n = shape.iter().product();
        let host = HostTensor::from_f32(
            shape.to_vec(),
            DataType::BFloat16,
            values(seed, n, -1.0, 1.0),
        )
        .unwrap();
        let (t, _) = upload(
            &chip,
            shape,
            DataType::BFloat16,
            Layout::Tile,
            MemoryConfig::DRAM,
            host.to_f32_vec(),
        );
        (t, host)
    };
    let x = upload_as(&[1, 1, 64, 96], 1);
    let (w, _) = upload_as(&[96, 64], 2);
    let model = |out: Option<&Tensor>| {
        let h = ops::matmul(
            &x.0,
            &w,
            &MatmulConfig {
                activation: Some(Activation::Gelu { approximate: false }),
                ..Default::default()
            },
        )
        .unwrap();
        let opts = out.map_or_else(OpOptions::default, OpOptions::into_output);
        ops::softmax(&h, &opts).unwrap()
    };
    let out = model(None);
    let golden = out.to_host(CQ0).unwrap().to_f32_vec();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    model(Some(&out));
    chip.end_trace_capture(tid, CQ0).unwrap();
    let info = chip.trace_info(tid).unwrap();
    let original = chip.read_trace_commands(&info).unwrap();
    let records = ttmesh_chip::command::record_offsets(&original).unwrap();
    Fixture {
        chip,
        x,
        _w: w,
        out,
        tid,
        info,
        original,
        records,
        golden,
    }
}

impl Fixture {
    fn output(&self) -> Vec<f32> {
        self.out.to_host(CQ0).unwrap().to_f32_vec()
    }

    /// Fills the output with a value no replay gives, so one that ran anything shows.
    fn poison_output(&self) {
        let n = self.golden.len();
        let host =
            HostTensor::from_f32(vec![1, 1, 64, 64], DataType::BFloat16, vec![-7.0; n]).unwrap();
        self.out.copy_from_host(&host, CQ0).unwrap();
    }

    fn replay_good(&self) -> Result<(), String> {
        self.chip
            .write_trace_commands(&self.info, &self.original)
            .map_err(|e| e.to_string())?;
        self.x.0.copy_from_host(&self.x.1, CQ0).unwrap();
        self.poison_output();
        self.chip
            .execute_trace(self.tid, CQ0, Blocking::Yes)
            .map_err(|e| format!("the restored trace failed: {e}"))?;
        if self.output() != self.golden {
            return Err("the restored trace gave a wrong output".into());
        }
        Ok(())
    }
}

/// The refusal inside `e`, wherever it was raised.
fn refusal(e: &ChipError) -> &LiveTraceWrite {
    match e {
        ChipError::IntoLiveTrace(w)
        | ChipError::BadRequest {
            fault: RecordFault::IntoLiveTrace(w),
            ..
        }
        | ChipError::BadRecord {
            fault: RecordFault::IntoLiveTrace(w),
            ..
        } => w,
        other => panic!("expected a refused write into a live trace, got: {other}"),
    }
}

/// A kernel with a stray write: 32 B at a fixed DRAM address, wherever its operands are.
struct StrayWriter {
    at: u64,
}

impl Kernel for StrayWriter {
    fn name(&self) -> &str {
        "StrayWriter"
    }
    fn execute(&self, ctx: &KernelContext, _: &[u32]) -> ttmesh_chip::Result<()> {
        ctx.memory.write(MemSpace::Dram, 2, self.at, &[0xAB; 32])
    }
}

#[test]
fn writes_into_a_live_trace_are_refused_naming_what_wrote() {
    let f = fixture();
    let at = f.info.address;
    let per_bank = f.info.buffer_size / f.chip.arch().num_dram_banks as u64;

    // A direct write, one overlapping the trace's first byte, and one touching its last.
    for (bank, addr, len) in [(3, at + 8, 16), (0, at - 8, 16), (11, at + per_bank - 1, 1)] {
        let e = f
            .chip
            .memory()
            .write(MemSpace::Dram, bank, addr, &vec![1; len])
            .unwrap_err();
        let w = refusal(&e);
        assert_eq!(
            (w.by.as_str(), w.chip, w.bank, w.address, w.len, w.trace),
            ("a write", 0, bank, addr, len as u64, f.tid.0),
            "{e}"
        );
        assert_eq!(w.trace_bytes, (at, at + per_bank));
        assert!(e.to_string().starts_with(&format!(
            "a write of {len} B to chip 0 DRAM bank {bank} at {addr:#x} would land inside live trace {}'s bytes",
            f.tid.0
        )));
    }
    // Up to the trace's first byte, and from just past its last, writes go through.
    let below = f.info.address - 64;
    f.chip
        .memory()
        .write(MemSpace::Dram, 0, below, &[0; 64])
        .unwrap();
    f.chip
        .memory()
        .write(MemSpace::Dram, 0, at + per_bank, &[0; 64])
        .unwrap();

    // A host write: its record is refused on the device (before any of its pages is
    // written), naming the record and the page; the error comes at the next wait.
    f.chip
        .enqueue_write_pages(
            CQ0,
            MemSpace::Dram,
            1024,
            &[(0, (at - 1024) as u32), (1, at as u32)],
            &[5; 2048],
        )
        .unwrap();
    let e = f.chip.finish(CQ0).unwrap_err();
    assert_eq!(refusal(&e).by, "its page 1's write");
    assert!(
        e.to_string().starts_with(
            "chip 0 CQ 0, host commands, WritePaged record at byte 0: its page 1's write of 1024 B"
        ),
        "{e}"
    );
    let mut page0 = [0u8; 16];
    f.chip
        .memory()
        .read(MemSpace::Dram, 0, at - 1024, &mut page0)
        .unwrap();
    assert_eq!(
        page0, [0; 16],
        "page 0 was written although its record was refused"
    );

    // A kernel's stray write: the kernel, its program and the record that launched it.
    let (t, _) = upload(
        &f.chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(5, 1024, -1.0, 1.0),
    );
    let operands = [(&t, Access::ReadWrite)];
    ops::launch(
        &ops::Launch {
            name: "StrayWriter",
            key: program_key(&"stray writer"),
            operands: &operands,
            split: ops::LaunchSplit::Cores(CoreSplit {
                cores: 1,
                units_per_core: 1,
                args_per_core: 3,
            }),
            cq: CQ0,
        },
        || "stray writer".into(),
        || Ok(Arc::new(StrayWriter { at: at + 100 })),
    )
    .unwrap();
    let e = f.chip.finish(CQ0).unwrap_err();
    let w = refusal(&e);
    assert!(
        w.by.starts_with("kernel StrayWriter (program ")
            && w.by
                .contains("launched by chip 0 CQ 0, host commands, GoSignal record at byte"),
        "{e}"
    );
    assert_eq!((w.bank, w.address, w.len), (2, at + 100, 32));

    // Nothing reached the trace: it replays as captured, with its digest intact.
    f.replay_good().unwrap();
    // Once released, its bytes are ordinary memory again.
    f.chip.release_trace(f.tid).unwrap();
    f.chip
        .memory()
        .write(MemSpace::Dram, 3, at + 8, &[1; 16])
        .unwrap();
}

#[derive(Clone, Debug)]
enum Mutation {
    /// A random byte anywhere.
    Byte(Index, u8),
    /// One bit flipped anywhere.
    Flip(Index, u8),
    /// One u32 of a record's payload (runtime args, addresses, page fields) changed.
    Payload(Index, Index, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![Just(0u32), Just(u32::MAX), 0u32..0x20_0000, any::<u32>()];
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<Index>(), any::<Index>(), word).prop_map(|(i, j, w)| Mutation::Payload(i, j, w)),
    ]
}

fn apply(m: &Mutation, bytes: &mut [u8], records: &[usize]) {
    match m {
        Mutation::Byte(i, b) => bytes[i.index(bytes.len())] = *b,
        Mutation::Flip(i, bit) => bytes[i.index(bytes.len())] ^= 1 << bit,
        Mutation::Payload(i, j, w) => {
            let r = i.index(records.len());
            let start = records[r] + HEADER_BYTES;
            let end = records.get(r + 1).copied().unwrap_or(bytes.len());
            let words = end.saturating_sub(start) / 4;
            if words > 0 {
                let at = start + 4 * j.index(words);
                bytes[at..at + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}

/// Every replay of a mutated trace is either refused before anything runs, naming the chip,
/// the trace and exactly the first changed byte, or (when the mutations changed nothing) Ok
/// and bit-identical to the undamaged output.
#[test]
fn a_mutated_trace_is_refused_at_replay_or_gives_the_undamaged_output() {
    let f = fixture();
    f.replay_good().unwrap();
    let mut runner = TestRunner::new(Config {
        cases: cases(300),
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&prop::collection::vec(mutation(), 1..4), |muts| {
        let mut bytes = f.original.clone();
        for m in &muts {
            apply(m, &mut bytes, &f.records);
        }
        f.chip.write_trace_commands(&f.info, &bytes).unwrap();
        f.x.0.copy_from_host(&f.x.1, CQ0).unwrap();
        f.poison_output();
        let result = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes);
        let first = bytes.iter().zip(&f.original).position(|(a, b)| a != b);
        match (first, result) {
            (None, Ok(())) => prop_assert_eq!(f.output(), f.golden.clone()),
            (None, Err(e)) => return Err(TestCaseError::fail(format!("unchanged bytes: {e}"))),
            (Some(at), Ok(())) => {
                return Err(TestCaseError::fail(format!(
                    "byte {at} changed and the replay returned Ok"
                )))
            }
            (Some(at), Err(e)) => {
                let ChipError::BadRecord {
                    site,
                    fault: RecordFault::Damaged { offset, .. },
                } = &e
                else {
                    return Err(TestCaseError::fail(format!("not a digest refusal: {e}")));
                };
                prop_assert_eq!(*offset, at, "{}", e);
                prop_assert_eq!((site.chip, site.cq, site.trace), (0, 0, Some(f.tid.0)));
                // Named at the captured record that holds the byte.
                let record = f.records.iter().rev().find(|&&r| r <= at).copied();
                prop_assert_eq!(Some(site.offset), record);
                let named = format!("first at byte {at} ");
                prop_assert!(e.to_string().contains(&named), "{}", e);
                let untouched = f.output().iter().all(|v| *v == -7.0);
                prop_assert!(untouched, "a refused replay ran something");
            }
        }
        f.replay_good().map_err(TestCaseError::fail)?;
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
