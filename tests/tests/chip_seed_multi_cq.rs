//! Seed 001 "Multiple Command Queues": the two 2-CQ patterns, as the document writes them, for
//! many iterations with a new input each, under random host and device delays. Events are the
//! only thing ordering the queues, so a missing stall shows as a wrong (stale) output.

mod chip_seed_common;

use chip_seed_common::*;
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::{CqId, Tensor};

const CQ0: CqId = CqId(0);
const CQ1: CqId = CqId(1);
const ITERS: u64 = 50;

/// CQ 1 only writes inputs; CQ 0 runs the model and reads the outputs. Two events.
#[test]
fn cq1_writes_inputs_cq0_computes_and_reads() {
    for seed in [1u64, 2, 3] {
        let chip = open(0, 2);
        let model = Model::new(&chip);
        let mut jitter = Jitter::new(seed);
        let op_event = chip.create_event();
        let write_event = chip.create_event();
        let input_dram = Tensor::allocate(&chip, input_spec(sharded_dram())).unwrap();
        // Dummy record an op event on CQ 0 since we wait on this first in the loop.
        chip.record_event(CQ0, &op_event).unwrap();
        let mut outputs = Vec::new();
        for i in 0..ITERS {
            // CQ 1 waits until CQ 0 has consumed the previous input, then overwrites it.
            chip.wait_for_event(CQ1, &op_event).unwrap();
            jitter.device(&chip, CQ1);
            input_dram.copy_from_host(&host_input(i), CQ1).unwrap();
            chip.record_event(CQ1, &write_event).unwrap();
            jitter.host();
            // CQ 0 waits for the write, runs the first op, then lets CQ 1 go on.
            chip.wait_for_event(CQ0, &write_event).unwrap();
            jitter.device(&chip, CQ0);
            let input_l1 =
                ops::to_memory_config(&input_dram, &sharded_l1(), &OpOptions::on_cq(CQ0)).unwrap();
            chip.record_event(CQ0, &op_event).unwrap();
            jitter.device(&chip, CQ0);
            let output = model.run(&input_l1, CQ0);
            outputs.push(output.to_host_async(CQ0).unwrap());
            jitter.host();
        }
        chip.synchronize().unwrap();
        for (i, o) in (0..).zip(outputs) {
            model.check(i, &o.wait().unwrap());
        }
    }
}

/// CQ 1 writes inputs and reads outputs through a persistent DRAM output; CQ 0 only runs
/// programs. Four events; the next write is enqueued before the current read.
#[test]
fn cq1_writes_and_reads_cq0_computes() {
    for seed in [4u64, 5, 6] {
        let chip = open(0, 2);
        let model = Model::new(&chip);
        let mut jitter = Jitter::new(seed);
        let first_op_event = chip.create_event();
        let write_event = chip.create_event();
        let last_op_event = chip.create_event();
        let read_event = chip.create_event();
        let input_dram = Tensor::allocate(&chip, input_spec(sharded_dram())).unwrap();
        let output_dram = Tensor::allocate(&chip, input_spec(output_sharded_dram())).unwrap();
        chip.record_event(CQ0, &first_op_event).unwrap();
        chip.record_event(CQ1, &read_event).unwrap();
        // Write the first input outside the loop.
        chip.wait_for_event(CQ1, &first_op_event).unwrap();
        input_dram.copy_from_host(&host_input(0), CQ1).unwrap();
        chip.record_event(CQ1, &write_event).unwrap();
        let mut outputs = Vec::new();
        for i in 0..ITERS {
            chip.wait_for_event(CQ0, &write_event).unwrap();
            jitter.device(&chip, CQ0);
            let input_l1 =
                ops::to_memory_config(&input_dram, &sharded_l1(), &OpOptions::on_cq(CQ0)).unwrap();
            chip.record_event(CQ0, &first_op_event).unwrap();
            let output = model.run(&input_l1, CQ0);
            // CQ 0 may overwrite the persistent output only once CQ 1 has read it.
            chip.wait_for_event(CQ0, &read_event).unwrap();
            jitter.device(&chip, CQ0);
            ops::reshard(&output, &output_sharded_dram(), Some(&output_dram), CQ0).unwrap();
            chip.record_event(CQ0, &last_op_event).unwrap();
            jitter.host();
            // CQ 1: the next input as soon as the current one is consumed, then the read.
            chip.wait_for_event(CQ1, &first_op_event).unwrap();
            jitter.device(&chip, CQ1);
            input_dram.copy_from_host(&host_input(i + 1), CQ1).unwrap();
            chip.record_event(CQ1, &write_event).unwrap();
            chip.wait_for_event(CQ1, &last_op_event).unwrap();
            // A slow read: CQ 0's next reshard must still wait for it.
            jitter.device_up_to(&chip, CQ1, 20_000);
            outputs.push(output_dram.to_host_async(CQ1).unwrap());
            chip.record_event(CQ1, &read_event).unwrap();
            jitter.host();
        }
        chip.synchronize().unwrap();
        for (i, o) in (0..).zip(outputs) {
            model.check(i, &o.wait().unwrap());
        }
    }
}
