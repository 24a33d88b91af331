//! Seed 001 / 003 "Metal Trace" patterns on one chip, as the documents write them: the basic
//! trace with a persistent DRAM input, the L1-input trace that frees the output and checks the
//! re-allocated input lands at the captured address, and sizing the trace region from the
//! too-small error. Every replay gets a new input and its output is checked.

mod chip_seed_common;

use chip_seed_common::*;
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::Blocking;
use ttmesh_chip::{CqId, Layout, Tensor};

const CQ0: CqId = CqId(0);
const ITERS: u64 = 20;

#[test]
fn basic_trace_with_a_persistent_dram_input() {
    let chip = open(800_768, 1);
    let model = Model::new(&chip);
    let to_l1 =
        |x: &Tensor| ops::to_memory_config(x, &sharded_l1(), &OpOptions::default()).unwrap();
    // Allocate our persistent input tensor.
    let input_dram = Tensor::allocate(&chip, input_spec(sharded_dram())).unwrap();
    // First run to compile the model.
    input_dram.copy_from_host(&host_input(0), CQ0).unwrap();
    let output = model.run(&to_l1(&input_dram), CQ0);
    model.check(0, &output.to_host(CQ0).unwrap());
    // Capture the trace of the model; keep its output tensor.
    input_dram.copy_from_host(&host_input(0), CQ0).unwrap();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let output = model.run(&to_l1(&input_dram), CQ0);
    chip.end_trace_capture(tid, CQ0).unwrap();
    // Execute the trace with a new input each time; reads are non-blocking.
    let mut outputs = Vec::new();
    for i in 1..=ITERS {
        input_dram.copy_from_host(&host_input(i), CQ0).unwrap();
        chip.execute_trace(tid, CQ0, Blocking::No).unwrap();
        outputs.push(output.to_host_async(CQ0).unwrap());
    }
    chip.synchronize().unwrap();
    for (i, o) in (1..).zip(outputs) {
        model.check(i, &o.wait().unwrap());
    }
    assert_eq!(chip.trace_info(tid).unwrap().replays, ITERS);
}

#[test]
fn l1_input_trace_reallocates_the_input_at_the_captured_address() {
    let chip = open(800_768, 1);
    let model = Model::new(&chip);
    let to_device =
        |i| Tensor::from_host(&host_input(i), &chip, Layout::Tile, sharded_l1(), CQ0).unwrap();
    // First run to compile the model.
    let input_l1 = to_device(0);
    let output = model.run(&input_l1, CQ0);
    model.check(0, &output.to_host(CQ0).unwrap());
    // Record the input's address so the re-allocation can be checked against it.
    let input_l1 = to_device(0);
    let input_trace_addr = input_l1.buffer_address().unwrap();
    let spec = input_l1.spec().clone();
    // Free the previous output, so that the input lands at the right address afterwards.
    output.deallocate(true).unwrap();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let output = model.run(&input_l1, CQ0);
    // Allocate the persistent input again and check it sits where the trace reads it.
    let input_l1 = Tensor::allocate(&chip, spec).unwrap();
    assert_eq!(input_l1.buffer_address().unwrap(), input_trace_addr);
    chip.end_trace_capture(tid, CQ0).unwrap();
    let mut outputs = Vec::new();
    for i in 1..=ITERS {
        input_l1.copy_from_host(&host_input(i), CQ0).unwrap();
        chip.execute_trace(tid, CQ0, Blocking::No).unwrap();
        outputs.push(output.to_host_async(CQ0).unwrap());
    }
    chip.synchronize().unwrap();
    for (i, o) in (1..).zip(outputs) {
        model.check(i, &o.wait().unwrap());
    }
}

/// "Determining Trace Region Size": capture with no region, read the size from the error,
/// open the device with exactly that size, and the same capture fits.
#[test]
fn trace_region_size_from_the_error() {
    let capture = |region: u64| {
        let chip = open(region, 1);
        let model = Model::new(&chip);
        let input_dram = Tensor::allocate(&chip, input_spec(sharded_dram())).unwrap();
        input_dram.copy_from_host(&host_input(0), CQ0).unwrap();
        let run = |x: &Tensor| {
            let l1 = ops::to_memory_config(x, &sharded_l1(), &OpOptions::default()).unwrap();
            model.run(&l1, CQ0)
        };
        let _ = run(&input_dram);
        let tid = chip.begin_trace_capture(CQ0).unwrap();
        let output = run(&input_dram);
        chip.end_trace_capture(tid, CQ0).map(|_| {
            input_dram.copy_from_host(&host_input(7), CQ0).unwrap();
            chip.execute_trace(tid, CQ0, Blocking::Yes).unwrap();
            model.check(7, &output.to_host(CQ0).unwrap());
        })
    };
    let msg = capture(0).unwrap_err().to_string();
    let size: u64 = msg
        .strip_prefix("Creating trace buffers of size ")
        .and_then(|r| r.split('B').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected message: {msg}"));
    assert!(
        msg.starts_with(&format!(
            "Creating trace buffers of size {size}B on device 0, but only 0B is allocated for trace region."
        )),
        "{msg}"
    );
    capture(size).unwrap();
    let err = capture(size - 1).unwrap_err().to_string();
    assert!(
        err.contains(&format!("but only {}B is allocated", size - 1)),
        "{err}"
    );
}
