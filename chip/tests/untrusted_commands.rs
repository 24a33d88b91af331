//! Command bytes are untrusted: a trace in DRAM can be damaged by any write, so replaying a
//! mutated trace must end in success or in an error naming the record (chip, CQ, trace, byte
//! offset), within the operation timeout, never in a panic, an abort or a dead queue; afterwards
//! the chip replays the good trace correctly and closes promptly.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cases, chip_with, upload, values};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::command::{Opcode, HEADER_BYTES};
use ttmesh_chip::compute::Activation;
use ttmesh_chip::device::TraceInfo;
use ttmesh_chip::error::RecordFault;
use ttmesh_chip::ops::{self, MatmulConfig, OpOptions};
use ttmesh_chip::program::{program_key, Access, CoreSplit, Kernel, KernelContext};
use ttmesh_chip::{
    Blocking, Chip, ChipError, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor,
};

const CQ0: CqId = CqId(0);
/// Short, so that a wait a mutation could cause would show quickly; nothing here is slow.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A chip with a captured MLP-like trace (matmul + bias + gelu, a move to L1, an add, a
/// softmax): DRAM and L1 operands, one to three inputs per launch.
struct Fixture {
    chip: Arc<Chip>,
    inputs: Vec<(Tensor, HostTensor)>,
    out: Tensor,
    tid: ttmesh_chip::TraceId,
    info: TraceInfo,
    /// The trace's command bytes as captured (EXEC_BUF_END included).
    original: Vec<u8>,
    /// Byte offset of every record in `original`.
    records: Vec<usize>,
    /// The untraced model's output: what every good replay must give, bit for bit.
    golden: Vec<f32>,
}

fn fixture() -> Fixture {
    // Without the trace digest, which would refuse every mutation here before a record ran:
    // these tests are of the dispatcher's checks of each record, its second line of defence
    // (the digest's own tests are in trace.rs and trace_damage.rs).
    let chip = chip_with(|c| {
        c.trace_region_size = 1 << 20;
        c.operation_timeout = TIMEOUT;
        c.trace_digest = false;
    });
    let input = |shape: &[usize], mc: MemoryConfig, seed: u64| {
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
            mc,
            host.to_f32_vec(),
        );
        (t, host)
    };
    let inputs = vec![
        input(&[1, 1, 64, 96], MemoryConfig::DRAM, 1),
        input(&[96, 32], MemoryConfig::DRAM, 2),
        input(&[1, 32], MemoryConfig::L1, 3),
    ];
    let model = |out: Option<&Tensor>| {
        let (x, w, b) = (&inputs[0].0, &inputs[1].0, &inputs[2].0);
        let h = ops::matmul(
            x,
            w,
            &MatmulConfig {
                bias: Some(b.clone()),
                activation: Some(Activation::Gelu { approximate: false }),
                ..Default::default()
            },
        )
        .unwrap();
        let l1 = ops::to_memory_config(&h, &MemoryConfig::L1, &OpOptions::default()).unwrap();
        let s = ops::add(&l1, &h, &OpOptions::default()).unwrap();
        let opts = out.map_or_else(OpOptions::default, OpOptions::into_output);
        ops::softmax(&s, &opts).unwrap()
    };
    let out = model(None);
    let golden = out.to_host(CQ0).unwrap().to_f32_vec();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    model(Some(&out));
    chip.end_trace_capture(tid, CQ0).unwrap();
    let info = chip.trace_info(tid).unwrap();
    let original = chip.read_trace_commands(&info).unwrap();
    let records = ttmesh_chip::command::record_offsets(&original).unwrap();
    let f = Fixture {
        chip,
        inputs,
        out,
        tid,
        info,
        original,
        records,
        golden,
    };
    f.replay_good().unwrap();
    f
}

impl Fixture {
    /// Restores the trace and the inputs (a mutated launch may have written over them), replays,
    /// and checks the output bit for bit.
    fn replay_good(&self) -> Result<(), String> {
        self.chip
            .write_trace_commands(&self.info, &self.original)
            .unwrap();
        for (t, host) in &self.inputs {
            t.copy_from_host(host, CQ0).map_err(|e| e.to_string())?;
        }
        self.chip
            .execute_trace(self.tid, CQ0, Blocking::Yes)
            .map_err(|e| format!("the good trace failed after a bad one: {e}"))?;
        let got = self
            .out
            .to_host(CQ0)
            .map_err(|e| e.to_string())?
            .to_f32_vec();
        if got != self.golden {
            return Err("the good trace replayed to a wrong output".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Flip one bit anywhere in the command bytes.
    Flip(Index, u8),
    /// Lose everything from a point on (the bytes read as zero).
    Truncate(Index),
    /// Put an EXEC_BUF_END over a record (refused: only the last record may end a trace).
    EndAt(Index),
    /// Change a record's opcode (known opcodes and a few unknown ones).
    Opcode(Index, u8),
    /// Change a record's payload length.
    Length(Index, u32),
    /// Change a record's 64-bit argument (program ids, page counts, addresses, events).
    Arg(Index, u64),
    /// Change one u32 of a record's payload (runtime args, page fields).
    Payload(Index, Index, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let len = prop_oneof![Just(0u32), Just(u32::MAX), 0u32..2048, any::<u32>()];
    let word = prop_oneof![Just(0u32), Just(u32::MAX), 0u32..0x20_0000, any::<u32>()];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<Index>().prop_map(Mutation::Truncate),
        any::<Index>().prop_map(Mutation::EndAt),
        (any::<Index>(), 0u8..0x12).prop_map(|(i, op)| Mutation::Opcode(i, op)),
        (any::<Index>(), len).prop_map(|(i, l)| Mutation::Length(i, l)),
        (any::<Index>(), any::<u64>()).prop_map(|(i, v)| Mutation::Arg(i, v)),
        (any::<Index>(), any::<Index>(), word).prop_map(|(i, j, w)| Mutation::Payload(i, j, w)),
    ]
}

fn apply(m: &Mutation, bytes: &mut [u8], records: &[usize]) {
    let record = |i: &Index| records[i.index(records.len())];
    match m {
        Mutation::Flip(i, bit) => bytes[i.index(bytes.len())] ^= 1 << bit,
        Mutation::Truncate(i) => {
            let at = i.index(bytes.len());
            bytes[at..].fill(0);
        }
        Mutation::EndAt(i) => {
            let at = record(i);
            bytes[at..at + HEADER_BYTES].fill(0);
            bytes[at] = Opcode::ExecBufEnd as u8;
        }
        Mutation::Opcode(i, op) => bytes[record(i)] = *op,
        Mutation::Length(i, len) => {
            let at = record(i) + 4;
            bytes[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
        Mutation::Arg(i, v) => {
            let at = record(i) + 8;
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::Payload(i, j, w) => {
            let start = record(i) + HEADER_BYTES;
            let end = records
                .iter()
                .find(|&&o| o > record(i))
                .copied()
                .unwrap_or(bytes.len());
            let words = (end - start) / 4;
            if words > 0 {
                let at = start + 4 * j.index(words);
                bytes[at..at + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}

/// Ok, or an error that names this chip, CQ 0, the trace and a record inside it; no panic.
fn check_outcome(f: &Fixture, result: Result<(), ChipError>, took: Duration) -> Result<(), String> {
    // The finish that ends a blocking replay waits at most ~1.5 x the timeout.
    if took > 2 * TIMEOUT {
        return Err(format!("the replay took {took:?}"));
    }
    match result {
        Ok(()) => Ok(()),
        Err(ChipError::BadRecord { site, fault }) => {
            if let RecordFault::Panicked { .. } = fault {
                return Err(format!("a kernel panicked: {site}: {fault}"));
            }
            let named = site.chip == f.chip.id()
                && site.cq == 0
                && site.trace == Some(f.tid.0)
                && (site.offset as u64) < f.info.command_bytes;
            if named {
                Ok(())
            } else {
                Err(format!("the error names the wrong place: {site}: {fault}"))
            }
        }
        Err(e) => Err(format!("an error that names no record: {e}")),
    }
}

#[test]
fn mutated_traces_fail_cleanly_and_the_chip_recovers() {
    let f = fixture();
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
        let started = Instant::now();
        let result = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes);
        check_outcome(&f, result, started.elapsed()).map_err(TestCaseError::fail)?;
        f.replay_good().map_err(TestCaseError::fail)?;
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let started = Instant::now();
    f.chip.close().unwrap();
    drop(f);
    assert!(
        started.elapsed() < TIMEOUT,
        "close and drop took {:?}",
        started.elapsed()
    );
}

/// The case found first from outside: the runtime-args record of a launch turned into a stall.
/// The go signal then has no operand addresses; it is refused with the record's place.
#[test]
fn a_launch_without_its_runtime_args_is_refused_at_its_go_signal() {
    let f = fixture();
    let mut bytes = f.original.clone();
    let (at, go) = {
        let mut iter = f.records.iter().copied();
        let at = iter
            .find(|&o| bytes[o] == Opcode::WritePacked as u8)
            .unwrap();
        (at, iter.next().unwrap())
    };
    bytes[at] = Opcode::Stall as u8;
    f.chip.write_trace_commands(&f.info, &bytes).unwrap();
    let e = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "chip 0 CQ 0, trace {}, GoSignal record at byte {go}: program 0 (Matmul) was given 0 operand addresses but has 4 operands; its runtime-args record is missing or corrupt",
            f.tid
        )
    );
    f.replay_good().unwrap();
    // A program id no launch ever compiled: refused at its launch record.
    let mut bytes = f.original.clone();
    bytes[8..12].copy_from_slice(&77u32.to_le_bytes());
    f.chip.write_trace_commands(&f.info, &bytes).unwrap();
    let e = f
        .chip
        .execute_trace(f.tid, CQ0, Blocking::Yes)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "chip 0 CQ 0, trace {}, LaunchProgram record at byte 0: launch of unknown program 77",
            f.tid
        )),
        "{e}"
    );
    f.replay_good().unwrap();
}

/// A record a capture cannot produce (here a Terminate, which would stop the dispatcher for
/// good) is refused inside a trace; the queue lives on.
#[test]
fn records_a_capture_cannot_make_are_refused_in_a_trace() {
    let f = fixture();
    for op in [
        Opcode::Terminate,
        Opcode::RecordEvent,
        Opcode::WaitEvent,
        Opcode::HostCallback,
        Opcode::ExecBuf,
        Opcode::Discard,
    ] {
        let mut bytes = f.original.clone();
        // The first record (a launch) keeps its length, so the header still decodes.
        bytes[0] = op as u8;
        f.chip.write_trace_commands(&f.info, &bytes).unwrap();
        let e = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
        match &e {
            ChipError::BadRecord {
                site,
                fault: RecordFault::NotInTrace,
            } if site.offset == 0 && site.opcode == Some(op) => {}
            ChipError::BadRecord {
                fault: RecordFault::Corrupt { .. },
                site,
            } if site.offset == 0 => {}
            other => panic!("{op:?}: {other}"),
        }
        f.replay_good().unwrap();
    }
}

/// The public read with a page size no memory has: an error at the call, nothing allocated.
#[test]
fn a_read_larger_than_the_memory_is_refused() {
    let chip = chip_with(|_| {});
    let locations = vec![(0u32, 0u32); 23];
    for space in [MemSpace::Dram, MemSpace::L1] {
        let e = match chip.enqueue_read_pages(CQ0, space, u32::MAX, &locations) {
            Err(e) => e,
            Ok(_) => panic!("a read of 23 pages of 4 GiB was accepted"),
        };
        assert!(
            matches!(
                &e,
                ChipError::BadRequest {
                    fault: RecordFault::ReadTooLarge { pages: 23, .. },
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().starts_with(
            "chip 0 CQ 0: enqueue_read_pages refused: 23 pages of 4294967295 B to read exceed"
        ));
    }
    // One page past a bank's end, and a bank the chip does not have.
    let bank_size = chip.memory().bank_size(MemSpace::L1);
    for (bank, addr) in [(0, bank_size as u32 - 16), (500, 0)] {
        let e = chip
            .enqueue_read_pages(CQ0, MemSpace::L1, 32, &[(bank, addr)])
            .err()
            .unwrap();
        assert!(
            matches!(
                &e,
                ChipError::BadRequest {
                    fault: RecordFault::PageOutOfRange { .. },
                    ..
                }
            ),
            "{e}"
        );
    }
    chip.finish(CQ0).unwrap();
}

struct PanickingKernel;

impl Kernel for PanickingKernel {
    fn name(&self) -> &str {
        "Panicking"
    }
    fn execute(&self, _: &KernelContext, addresses: &[u32]) -> ttmesh_chip::Result<()> {
        panic!("a bug in a kernel (given {} addresses)", addresses.len())
    }
}

/// A kernel's panic (a bug) is caught on the dispatcher: an error naming the record, and the
/// queue keeps working; close returns promptly.
#[test]
fn a_panicking_kernel_is_an_error_and_the_queue_lives_on() {
    let chip = chip_with(|c| c.operation_timeout = TIMEOUT);
    let (t, _) = upload(
        &chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(5, 1024, -1.0, 1.0),
    );
    let operands = [(&t, Access::ReadWrite)];
    ops::launch(
        &ops::Launch {
            name: "Panicking",
            key: program_key(&"panicking"),
            operands: &operands,
            split: ops::LaunchSplit::Cores(CoreSplit {
                cores: 1,
                units_per_core: 1,
                args_per_core: 3,
            }),
            cq: CQ0,
        },
        || "panicking".into(),
        || Ok(Arc::new(PanickingKernel)),
    )
    .unwrap();
    let e = chip.finish(CQ0).unwrap_err();
    match &e {
        ChipError::BadRecord {
            site,
            fault: RecordFault::Panicked { kernel, message },
        } => {
            assert_eq!((site.chip, site.cq, site.trace), (0, 0, None));
            assert_eq!(site.opcode, Some(Opcode::GoSignal));
            assert_eq!(kernel, "Panicking");
            assert_eq!(message, "a bug in a kernel (given 1 addresses)");
        }
        other => panic!("{other}"),
    }
    let held = common::read(&t);
    let again = ops::relu(&t, &OpOptions::default()).unwrap();
    let want: Vec<f32> = held.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(
        common::read(&again),
        want,
        "the queue works after the panic"
    );
    let started = Instant::now();
    chip.close().unwrap();
    drop((t, again, chip));
    assert!(started.elapsed() < TIMEOUT);
}

/// A capture ends a trace with one end marker. An early one would skip the rest of the trace
/// unseen (on a mesh, a collective the other chips then wait for), and a trace without its
/// own is damaged further than can be seen: both are refused, the latter before anything runs.
#[test]
fn an_end_marker_anywhere_but_last_is_refused() {
    let f = fixture();
    let end = f.info.command_bytes as usize - HEADER_BYTES;
    assert_eq!(*f.records.last().unwrap(), end);
    let go = f.records[2];
    assert_eq!(f.original[go], Opcode::GoSignal as u8);
    let mut bytes = f.original.clone();
    bytes[go] = Opcode::ExecBufEnd as u8;
    f.chip.write_trace_commands(&f.info, &bytes).unwrap();
    let e = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "chip 0 CQ 0, trace {}, ExecBufEnd record at byte {go}: an end marker (EXEC_BUF_END) before the trace's own at byte {end} would stop the replay early, skipping the rest; the trace's bytes in DRAM were overwritten: release_trace and capture again",
            f.tid
        )
    );
    f.replay_good().unwrap();

    let mut bytes = f.original.clone();
    bytes[end] = Opcode::Stall as u8;
    f.chip.write_trace_commands(&f.info, &bytes).unwrap();
    let before = f.chip.dispatch_stats().launches;
    let e = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "chip 0 CQ 0, trace {}, Stall record at byte {end}: the trace's last record, at byte {end}, is not its end marker (EXEC_BUF_END); the trace's bytes in DRAM were overwritten: release_trace and capture again",
            f.tid
        )
    );
    assert_eq!(f.chip.dispatch_stats().launches, before, "nothing ran");
    f.replay_good().unwrap();
}

/// A launch's records have the shape its program gives them. A LaunchProgram whose length
/// grew over the runtime args and go signal after it would otherwise skip that launch unseen.
#[test]
fn launch_records_of_the_wrong_shape_are_refused() {
    let f = fixture();
    let (launch, go_end) = (f.records[0], f.records[3]);
    assert_eq!(f.original[launch], Opcode::LaunchProgram as u8);
    let mut bytes = f.original.clone();
    let swallowing = (go_end - launch - HEADER_BYTES) as u32;
    bytes[launch + 4..launch + 8].copy_from_slice(&swallowing.to_le_bytes());
    f.chip.write_trace_commands(&f.info, &bytes).unwrap();
    let e = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "chip 0 CQ 0, trace {}, LaunchProgram record at byte 0: program 0 (Matmul) has 192 config bytes, but its record says {swallowing}; the record is corrupt",
            f.tid
        )
    );
    f.replay_good().unwrap();

    let args = f.records[1];
    assert_eq!(f.original[args], Opcode::WritePacked as u8);
    let mut bytes = f.original.clone();
    bytes[args + 2..args + 4].copy_from_slice(&1u16.to_le_bytes());
    f.chip.write_trace_commands(&f.info, &bytes).unwrap();
    let e = f.chip.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
    assert!(
        matches!(
            &e,
            ChipError::BadRecord {
                fault: RecordFault::LaunchMismatch {
                    what: "runtime args per core",
                    found: 1,
                    ..
                },
                site,
            } if site.offset == args
        ),
        "{e}"
    );
    f.replay_good().unwrap();
}
