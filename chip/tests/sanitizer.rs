//! The replay sanitizer: a trace replays addresses fixed at capture, so execute_trace refuses
//! when a buffer it uses was freed or replaced since, or when a buffer allocated after capture
//! overlaps memory the trace writes; errors name the chip, address and buffer. Off, the trace
//! runs regardless (as on hardware).

mod common;

use common::{chip_with, read, upload, values};
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::Blocking;
use ttmesh_chip::{ChipError, CqId, DataType, Layout, MemoryConfig, Tensor, TensorSpec};

const CQ0: CqId = CqId(0);

fn spec(shape: &[usize], mc: MemoryConfig) -> TensorSpec {
    TensorSpec::new(shape.to_vec(), DataType::BFloat16, Layout::Tile, mc)
}

/// A chip with a traced `relu(relu(x))` whose intermediate lives in L1; returns the chip, the
/// DRAM input and the L1 output (kept), and the trace.
fn traced() -> (
    std::sync::Arc<ttmesh_chip::Chip>,
    Tensor,
    Tensor,
    ttmesh_chip::TraceId,
) {
    let chip = chip_with(|c| {
        c.trace_region_size = 1 << 20;
        c.id = 5;
    });
    let (x, _) = upload(
        &chip,
        &[64, 64],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(1, 4096, -1.0, 1.0),
    );
    let model = |x: &Tensor| {
        let h = ops::relu(
            x,
            &OpOptions {
                memory_config: Some(MemoryConfig::L1),
                ..Default::default()
            },
        )
        .unwrap();
        ops::relu(&h, &OpOptions::default()).unwrap()
    };
    let _ = model(&x);
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let y = model(&x);
    chip.end_trace_capture(tid, CQ0).unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    (chip, x, y, tid)
}

fn trace_error(r: ttmesh_chip::Result<()>) -> String {
    match r {
        Err(ChipError::Trace(msg)) => msg,
        other => panic!("expected the sanitizer to refuse, got {other:?}"),
    }
}

#[test]
fn a_freed_input_is_refused_and_runs_with_the_sanitizer_off() {
    let (chip, x, _y, tid) = traced();
    let a = x.allocation("test").unwrap();
    x.deallocate(true).unwrap();
    let msg = trace_error(chip.execute_trace(tid, CQ0, Blocking::No));
    assert!(
        msg.starts_with(&format!(
            "trace 0 on chip 5: captured DRAM buffer #{} at {:#x} ({} B per bank) was freed after capture;",
            a.id, a.address, a.per_bank_size
        )),
        "{msg}"
    );
    assert_eq!(
        chip.trace_info(tid).unwrap().replays,
        1,
        "a refused replay does not count"
    );
    chip.set_replay_sanitizer(false);
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    chip.set_replay_sanitizer(true);
    assert!(
        chip.execute_trace(tid, CQ0, Blocking::No).is_err(),
        "the check is not cached across a switch"
    );
}

#[test]
fn a_reallocated_buffer_at_a_captured_address_is_refused() {
    let (chip, x, _y, tid) = traced();
    let a = x.allocation("test").unwrap();
    drop(x);
    // DRAM is first fit bottom-up: a larger buffer lands at the freed input's address.
    let z = Tensor::allocate(&chip, spec(&[512, 64], MemoryConfig::DRAM)).unwrap();
    let za = z.allocation("test").unwrap();
    assert_eq!(za.address, a.address);
    assert_eq!((a.per_bank_size, za.per_bank_size), (2048, 6144));
    let msg = trace_error(chip.execute_trace(tid, CQ0, Blocking::No));
    assert!(
        msg.contains(&format!(
            "captured DRAM buffer #{} at {:#x}",
            a.id, a.address
        )) && msg.contains(&format!(
            "buffer #{} ({} B per bank at {:#x}) now sits there",
            za.id, za.per_bank_size, a.address
        )),
        "{msg}"
    );
    // The same size is still another owner: refused too.
    drop(z);
    let _same = Tensor::allocate(&chip, spec(&[64, 64], MemoryConfig::DRAM)).unwrap();
    assert!(trace_error(chip.execute_trace(tid, CQ0, Blocking::No)).contains("now sits there"));
}

#[test]
fn an_allocation_over_an_intermediate_the_trace_writes_is_refused() {
    let (chip, _x, y, tid) = traced();
    // L1 is top-down: the first buffer after capture lands where the freed intermediate was.
    let z = Tensor::allocate(&chip, spec(&[64, 64], MemoryConfig::L1)).unwrap();
    let za = z.allocation("test").unwrap();
    let yaddr = y.buffer_address().unwrap();
    assert_ne!(za.address, yaddr);
    let msg = trace_error(chip.execute_trace(tid, CQ0, Blocking::No));
    assert!(msg.starts_with("trace 0 on chip 5 writes L1 ["), "{msg}");
    assert!(
        msg.contains(&format!(
            "but buffer #{} allocated after capture at {:#x} ({} B per bank) overlaps it",
            za.id, za.address, za.per_bank_size
        )),
        "{msg}"
    );
    // Freed again, the trace is safe; unrelated buffers (DRAM here) do not trip it.
    drop(z);
    let _d = Tensor::allocate(&chip, spec(&[64, 64], MemoryConfig::DRAM)).unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
}

#[test]
fn a_freed_output_is_refused_and_a_config_can_turn_the_sanitizer_off() {
    let (chip, _x, y, tid) = traced();
    let a = y.allocation("test").unwrap();
    drop(y);
    let msg = trace_error(chip.execute_trace(tid, CQ0, Blocking::No));
    assert!(
        msg.contains(&format!("captured L1 buffer #{} at {:#x}", a.id, a.address)),
        "{msg}"
    );

    let chip = chip_with(|c| {
        c.trace_region_size = 1 << 20;
        c.replay_sanitizer = false;
    });
    let (x, held) = upload(
        &chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(2, 1024, -1.0, 1.0),
    );
    let out = Tensor::allocate(&chip, x.spec().clone()).unwrap();
    ops::relu(&x, &OpOptions::into_output(&out)).unwrap();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    ops::relu(&x, &OpOptions::into_output(&out)).unwrap();
    chip.end_trace_capture(tid, CQ0).unwrap();
    let addr = x.buffer_address().unwrap();
    drop(x);
    // Off: hardware's behaviour, the replay reads whatever the address holds now.
    let (x2, _) = upload(
        &chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        vec![-1.0; 1024],
    );
    assert_eq!(x2.buffer_address().unwrap(), addr);
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    assert_eq!(read(&out), vec![0.0; 1024]);
    assert_ne!(held, vec![0.0; 1024]);
}

/// The seed's L1-input pattern is legal: the input freed inside the capture and allocated again
/// at the captured address before the capture ends is the buffer the trace guards.
#[test]
fn the_input_reallocated_during_capture_is_accepted() {
    let chip = chip_with(|c| c.trace_region_size = 1 << 20);
    let (x, _) = upload(
        &chip,
        &[64, 64],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(3, 4096, -1.0, 1.0),
    );
    let model = |x: Tensor| {
        let y = ops::relu(&x, &OpOptions::default()).unwrap();
        x.deallocate(true).unwrap();
        y
    };
    let y = model(x);
    let (x, _) = upload(
        &chip,
        &[64, 64],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::L1,
        values(4, 4096, -1.0, 1.0),
    );
    let addr = x.buffer_address().unwrap();
    y.deallocate(true).unwrap();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let y = model(x);
    let x = Tensor::allocate(&chip, spec(&[64, 64], MemoryConfig::L1)).unwrap();
    assert_eq!(x.buffer_address().unwrap(), addr);
    chip.end_trace_capture(tid, CQ0).unwrap();
    let h = ttmesh_chip::HostTensor::from_f32(
        vec![64, 64],
        DataType::BFloat16,
        values(5, 4096, -1.0, 1.0),
    )
    .unwrap();
    x.copy_from_host(&h, CQ0).unwrap();
    chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
    let want: Vec<f32> = h.as_f32().unwrap().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(read(&y), want);
}
