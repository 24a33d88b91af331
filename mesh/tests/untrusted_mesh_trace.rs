//! A mesh trace's bytes are untrusted too: damage to one chip's copy of a tensor-parallel MLP
//! trace (matmuls and an all_reduce, whose collective kernel pairs with the other chip's over
//! the fabric) must end in success or an error naming the damaged record, within the
//! operation timeout; never a panic or a dead queue. The mesh then replays the good trace bit
//! for bit and closes promptly.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ttmesh::models::{random_host, TpMlp};
use ttmesh::*;
use ttmesh_chip::command::HEADER_BYTES;
use ttmesh_chip::device::TraceInfo;
use ttmesh_chip::error::RecordFault;
use ttmesh_chip::ChipError;

const CQ0: CqId = CqId(0);
/// Long, so that a replay ending before it shows that no chip waited for the damaged one: a
/// refused record stops the fabric, and the other chip's collective fails at once.
const TIMEOUT: Duration = Duration::from_secs(5);

struct Fixture {
    mesh: MeshDevice,
    /// The weights the trace reads: alive as long as the trace.
    _mlp: TpMlp,
    x: MeshTensor,
    x_host: HostTensor,
    y: MeshTensor,
    tid: MeshTraceId,
    /// Per chip: where its trace lies and its bytes as captured.
    traces: Vec<(TraceInfo, Vec<u8>, Vec<usize>)>,
    golden: Vec<Vec<f32>>,
}

/// Without the trace digest, which would refuse every mutation before a record ran: the
/// per-record checks are what most tests here are of.
fn fixture() -> Fixture {
    fixture_with_digest(false)
}

fn fixture_with_digest(trace_digest: bool) -> Fixture {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "n300".into(),
        trace_region_size: 1 << 20,
        operation_timeout: Some(TIMEOUT),
        trace_digest,
        ..Default::default()
    })
    .unwrap();
    let mlp = TpMlp::new(&mesh, 64, 128, 3).unwrap();
    let x_host = random_host(&[1, 1, 32, 64], DataType::BFloat16, 1, 1.0).unwrap();
    let x = MeshTensor::from_host(
        &x_host,
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CQ0,
    )
    .unwrap();
    let shards = |t: &MeshTensor| -> Vec<Vec<f32>> {
        t.to_host_shards(CQ0)
            .unwrap()
            .iter()
            .map(HostTensor::to_f32_vec)
            .collect()
    };
    let golden = shards(&mlp.forward(&x).unwrap());
    let tid = mesh.begin_trace_capture(CQ0).unwrap();
    let y = mlp.forward(&x).unwrap();
    mesh.end_trace_capture(tid, CQ0).unwrap();
    let traces = mesh
        .chips()
        .iter()
        .zip(mesh.trace_info(tid))
        .map(|(chip, info)| {
            let info = info.unwrap();
            let bytes = chip.read_trace_commands(&info).unwrap();
            let records = ttmesh_chip::command::record_offsets(&bytes).unwrap();
            (info, bytes, records)
        })
        .collect();
    let f = Fixture {
        mesh,
        _mlp: mlp,
        x,
        x_host,
        y,
        tid,
        traces,
        golden,
    };
    f.replay_good().unwrap();
    f
}

impl Fixture {
    fn replay_good(&self) -> Result<(), String> {
        for (chip, (info, bytes, _)) in self.mesh.chips().iter().zip(&self.traces) {
            chip.write_trace_commands(info, bytes).unwrap();
        }
        self.x
            .copy_from_host(&self.x_host, &ReplicateTensorToMesh, CQ0)
            .map_err(|e| e.to_string())?;
        self.mesh
            .execute_trace(self.tid, CQ0, Blocking::Yes)
            .map_err(|e| format!("the good trace failed after a bad one: {e}"))?;
        let got: Vec<Vec<f32>> = self
            .y
            .to_host_shards(CQ0)
            .map_err(|e| e.to_string())?
            .iter()
            .map(HostTensor::to_f32_vec)
            .collect();
        if got != self.golden {
            return Err("the good trace replayed to a wrong output".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(Index, u8),
    Truncate(Index),
    Opcode(Index, u8),
    Length(Index, u32),
    Arg(Index, u64),
    Payload(Index, Index, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let len = prop_oneof![Just(0u32), Just(u32::MAX), 0u32..2048, any::<u32>()];
    let word = prop_oneof![Just(0u32), Just(u32::MAX), 0u32..0x20_0000, any::<u32>()];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<Index>().prop_map(Mutation::Truncate),
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

/// Ok, or an error naming the damaged chip's record in this trace; no panic; and sooner than
/// the operation timeout (no chip waited for the damaged one).
fn check_outcome(
    f: &Fixture,
    damaged: usize,
    result: Result<()>,
    took: Duration,
) -> std::result::Result<(), String> {
    if took >= TIMEOUT {
        return Err(format!("the replay took {took:?}: {result:?}"));
    }
    let (info, _, _) = &f.traces[damaged];
    let damaged = f.mesh.chips()[damaged].id();
    match result {
        Ok(()) => Ok(()),
        Err(MeshError::Chip {
            chip,
            source: ChipError::BadRecord { site, fault },
        }) => {
            if let RecordFault::Panicked { .. } = fault {
                return Err(format!("a kernel panicked: {site}: {fault}"));
            }
            let named = chip == damaged
                && site.chip == damaged
                && site.cq == 0
                && site.trace == Some(f.tid.0)
                && (site.offset as u64) < info.command_bytes;
            if named {
                Ok(())
            } else {
                Err(format!(
                    "chip {damaged} was damaged; the error names another place: chip {chip}: {site}: {fault}"
                ))
            }
        }
        Err(e) => Err(format!(
            "chip {damaged} was damaged; the error names no record of it: {e}"
        )),
    }
}

#[test]
fn mutated_mesh_traces_fail_cleanly_and_the_mesh_recovers() {
    let f = fixture();
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(64),
        failure_persistence: None,
        // A failure that waited out the timeout costs that per shrinking step.
        max_shrink_iters: 16,
        // Damage the chip cannot see (a valid but wrong address given to a collective) can only
        // end in a fabric timeout, which a rare random case reaches; CI takes a fixed seed so a
        // run is repeatable. PROPTEST_RNG_SEED explores others.
        rng_seed: if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
            Config::default().rng_seed
        } else {
            proptest::test_runner::RngSeed::Fixed(0x7754_1119)
        },
        ..Config::default()
    });
    let outcome = runner.run(
        &(any::<Index>(), prop::collection::vec(mutation(), 1..4)),
        |(which, muts)| {
            let damaged = which.index(f.traces.len());
            let (info, original, records) = &f.traces[damaged];
            let mut bytes = original.clone();
            for m in &muts {
                apply(m, &mut bytes, records);
            }
            f.mesh.chips()[damaged]
                .write_trace_commands(info, &bytes)
                .unwrap();
            let started = Instant::now();
            let result = f.mesh.execute_trace(f.tid, CQ0, Blocking::Yes);
            check_outcome(&f, damaged, result, started.elapsed())
                .map_err(|e| TestCaseError::fail(format!("chip index {damaged}, {muts:?}: {e}")))?;
            f.replay_good().map_err(TestCaseError::fail)?;
            Ok(())
        },
    );
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let started = Instant::now();
    f.mesh.close().unwrap();
    drop(f);
    assert!(
        started.elapsed() < TIMEOUT,
        "close and drop took {:?}",
        started.elapsed()
    );
}

/// With the digest on, damage to one chip's trace is refused by that chip before any of its
/// records runs, naming the chip, the trace and the damaged byte; the other chip's collective
/// does not wait for it, and the mesh then replays the good trace.
#[test]
fn a_damaged_chip_trace_is_refused_by_its_digest() {
    let f = fixture_with_digest(true);
    for damaged in 0..f.traces.len() {
        let (info, original, _) = &f.traces[damaged];
        let offset = original.len() / 3;
        let mut bytes = original.clone();
        bytes[offset] ^= 0x04;
        f.mesh.chips()[damaged]
            .write_trace_commands(info, &bytes)
            .unwrap();
        let started = Instant::now();
        let e = f.mesh.execute_trace(f.tid, CQ0, Blocking::Yes).unwrap_err();
        assert!(started.elapsed() < TIMEOUT, "took {:?}", started.elapsed());
        let id = f.mesh.chips()[damaged].id();
        match &e {
            MeshError::Chip {
                chip,
                source:
                    ChipError::BadRecord {
                        site,
                        fault: RecordFault::Damaged { offset: at, .. },
                    },
            } => assert_eq!(
                (*chip, site.chip, site.trace, *at),
                (id, id, Some(f.tid.0), offset),
                "{e}"
            ),
            other => panic!("chip {id} damaged at byte {offset}: {other}"),
        }
        f.replay_good().unwrap();
    }
}

/// A fabric delivery into a chip's live trace (a collective given a wrong address) is refused
/// by the receiving chip, naming the delivery, the chip and the address.
#[test]
fn a_fabric_delivery_into_a_live_trace_is_refused() {
    let f = fixture_with_digest(true);
    let (info, _, _) = &f.traces[1];
    let to = f.mesh.chips()[1].id();
    let fabric = f.mesh.fabric().expect("n300 has a fabric");
    let tx = fabric.sender(f.mesh.chips()[0].id()).unwrap();
    let at = ttmesh_fabric::NocAddr::dram(0, info.address + 64);
    let sent = tx.unicast_write(to, at, &[0xAB; 128], 0);
    let e = sent.and_then(|_| tx.flush()).unwrap_err().to_string();
    let want = format!(
        "a fabric delivery of 128 B to chip {to} DRAM bank 0 at {:#x} would land inside live trace {}'s bytes",
        info.address + 64,
        f.tid.0
    );
    assert!(e.contains(&want), "{e}");
    // Nothing reached the trace.
    let now = f.mesh.chips()[1].read_trace_commands(info).unwrap();
    assert_eq!(now, f.traces[1].1);
}
