//! Seed 001 "Putting it all together": Metal Trace with two command queues. Events are not
//! captured; the first op (which consumes the persistent DRAM input) stays outside the trace
//! and writes the trace's L1 input in place, at the address the capture checked. Both variants
//! of the document: CQ 1 writes inputs (CQ 0 reads), and CQ 1 writes inputs and reads outputs
//! through a persistent DRAM output. Many iterations, a new input each, random delays.

mod chip_seed_common;

use chip_seed_common::*;
use std::sync::Arc;
use ttmesh_chip::Blocking;

use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::{Chip, CqId, Event, Tensor, TraceId};

const CQ0: CqId = CqId(0);
const CQ1: CqId = CqId(1);
const ITERS: u64 = 40;

/// CQ 1: wait until CQ 0 consumed the input, write input `i`, signal.
fn write_input(chip: &Chip, input_dram: &Tensor, i: u64, op_event: &Event, write_event: &Event) {
    chip.wait_for_event(CQ1, op_event).unwrap();
    input_dram.copy_from_host(&host_input(i), CQ1).unwrap();
    chip.record_event(CQ1, write_event).unwrap();
}

/// Compile run, then capture with the L1-input trick; returns the trace, the trace's input
/// (persistent in L1 from now on) and its output.
fn compile_and_capture(
    chip: &Arc<Chip>,
    model: &Model,
    input_dram: &Tensor,
    op_event: &Event,
    write_event: &Event,
    after_compile: impl FnOnce(&Tensor),
) -> (TraceId, Tensor, Tensor) {
    let first_op = || {
        chip.wait_for_event(CQ0, write_event).unwrap();
        let l1 = ops::to_memory_config(input_dram, &sharded_l1(), &OpOptions::on_cq(CQ0)).unwrap();
        chip.record_event(CQ0, op_event).unwrap();
        l1
    };
    // First run to compile the model.
    write_input(chip, input_dram, 0, op_event, write_event);
    let output = model.run(&first_op(), CQ0);
    after_compile(&output);
    // Capture: the input to trace is the output of the first op.
    write_input(chip, input_dram, 0, op_event, write_event);
    let input_l1 = first_op();
    let input_trace_addr = input_l1.buffer_address().unwrap();
    let spec = input_l1.spec().clone();
    output.deallocate(true).unwrap();
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    let output = model.run(&input_l1, CQ0);
    let input_l1 = Tensor::allocate(chip, spec).unwrap();
    assert_eq!(input_l1.buffer_address().unwrap(), input_trace_addr);
    chip.end_trace_capture(tid, CQ0).unwrap();
    (tid, input_l1, output)
}

#[test]
fn trace_with_cq1_writing_inputs() {
    for seed in [11u64, 12] {
        let chip = open(800_768, 2);
        let model = Model::new(&chip);
        let mut jitter = Jitter::new(seed);
        let op_event = chip.create_event();
        let write_event = chip.create_event();
        let input_dram = Tensor::allocate(&chip, input_spec(sharded_dram())).unwrap();
        chip.record_event(CQ0, &op_event).unwrap();
        let (tid, input_l1, output) =
            compile_and_capture(&chip, &model, &input_dram, &op_event, &write_event, |_| {});
        let mut outputs = Vec::new();
        for i in 1..=ITERS {
            jitter.device(&chip, CQ1);
            write_input(&chip, &input_dram, i, &op_event, &write_event);
            jitter.host();
            chip.wait_for_event(CQ0, &write_event).unwrap();
            jitter.device(&chip, CQ0);
            // Write the trace's input in place, at the captured address.
            ops::reshard(&input_dram, &sharded_l1(), Some(&input_l1), CQ0).unwrap();
            chip.record_event(CQ0, &op_event).unwrap();
            chip.execute_trace(tid, CQ0, Blocking::No).unwrap();
            outputs.push(output.to_host_async(CQ0).unwrap());
            jitter.host();
        }
        chip.synchronize().unwrap();
        for (i, o) in (1..).zip(outputs) {
            model.check(i, &o.wait().unwrap());
        }
        assert_eq!(chip.trace_info(tid).unwrap().replays, ITERS);
    }
}

#[test]
fn trace_with_cq1_writing_inputs_and_reading_outputs() {
    for seed in [13u64, 14] {
        let chip = open(800_768, 2);
        let model = Model::new(&chip);
        let mut jitter = Jitter::new(seed);
        let first_op_event = chip.create_event();
        let write_event = chip.create_event();
        let last_op_event = chip.create_event();
        let read_event = chip.create_event();
        let input_dram = Tensor::allocate(&chip, input_spec(sharded_dram())).unwrap();
        chip.record_event(CQ0, &first_op_event).unwrap();
        chip.record_event(CQ1, &read_event).unwrap();
        // The compile run also runs (and so compiles) the last op, which allocates the
        // persistent DRAM output.
        let mut output_dram = None;
        let (tid, input_l1, output) = compile_and_capture(
            &chip,
            &model,
            &input_dram,
            &first_op_event,
            &write_event,
            |out| {
                chip.wait_for_event(CQ0, &read_event).unwrap();
                output_dram = Some(ops::reshard(out, &output_sharded_dram(), None, CQ0).unwrap());
                chip.record_event(CQ0, &last_op_event).unwrap();
            },
        );
        let output_dram = output_dram.unwrap();
        write_input(&chip, &input_dram, 1, &first_op_event, &write_event);
        let mut outputs = Vec::new();
        for i in 1..=ITERS {
            chip.wait_for_event(CQ0, &write_event).unwrap();
            jitter.device(&chip, CQ0);
            ops::reshard(&input_dram, &sharded_l1(), Some(&input_l1), CQ0).unwrap();
            chip.record_event(CQ0, &first_op_event).unwrap();
            chip.execute_trace(tid, CQ0, Blocking::No).unwrap();
            // The persistent output is overwritten only after CQ 1 read the previous one.
            chip.wait_for_event(CQ0, &read_event).unwrap();
            ops::reshard(&output, &output_sharded_dram(), Some(&output_dram), CQ0).unwrap();
            chip.record_event(CQ0, &last_op_event).unwrap();
            jitter.host();
            jitter.device(&chip, CQ1);
            write_input(&chip, &input_dram, i + 1, &first_op_event, &write_event);
            chip.wait_for_event(CQ1, &last_op_event).unwrap();
            jitter.device_up_to(&chip, CQ1, 20_000);
            outputs.push(output_dram.to_host_async(CQ1).unwrap());
            chip.record_event(CQ1, &read_event).unwrap();
            jitter.host();
        }
        chip.synchronize().unwrap();
        for (i, o) in (1..).zip(outputs) {
            model.check(i, &o.wait().unwrap());
        }
    }
}
