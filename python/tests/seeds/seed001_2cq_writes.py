"""Seed 001 (multiple command queues): CQ 1 only writes inputs, CQ 0 runs the model and reads
back, two events between them.

The block between the markers is the seed's code as the document writes it.
"""

import seed_setup
import ttnn
from seed_setup import Model, check, finish, host_input, seed_device, to_host_tensor

device, opened_here = seed_device(globals())
model = Model(device)
run_model = model.run
host_tensor = to_host_tensor(host_input(0))
shape, dtype, layout = ttnn.Shape(seed_setup.SHAPE), ttnn.float32, ttnn.TILE_LAYOUT
sharded_dram_mem_config = seed_setup.sharded_dram_mem_config()
sharded_l1_mem_config = seed_setup.sharded_l1_mem_config()

# --- seed 001, as written ---------------------------------------------------------------------
# This example uses 1 CQ for only writing inputs (CQ 1), and one CQ for executing programs/reading back the output (CQ 0)
# Create the event for signalling when the first operation is completed. This is the consumer of the input tensor so once this is completed, we can issue the next write
op_event = ttnn.create_event(device)
# Create the event for when input write is completed. This is used to signal that the input tensor can be read/consumed
write_event = ttnn.create_event(device)
# Allocate our persistent input tensor
input_dram_tensor = ttnn.allocate_tensor_on_device(shape, dtype, layout, device, sharded_dram_mem_config)
# Dummy record an op event on CQ 0 since we wait on this first in the loop
ttnn.record_event(0, op_event)
outputs = []
for iter in range(0, 2):
    # Stall CQ 1 for the input tensor consumer (CQ 0) to signal it has finished so we can start overwriting the previous input tensor with the new one
    ttnn.wait_for_event(1, op_event)
    # Write the next input tensor on CQ 1
    ttnn.copy_host_to_device_tensor(host_tensor, input_dram_tensor, cq_id=1)
    # Signal that the write has finished on CQ 1
    ttnn.record_event(1, write_event)
    # Make CQ 0 stall until CQ 1 has signalled that the write has finished
    ttnn.wait_for_event(0, write_event)
    # Run the first operation of the model on CQ 0
    input_l1_tensor = ttnn.to_memory_config(input_dram_tensor, sharded_l1_mem_config)
    # Signal to the producer (CQ 1) that CQ 0 is finished with the input and it can be overwritten
    ttnn.record_event(0, op_event)
    # Run the rest of the model and issue output readback on the default CQ (0)
    output_tensor = run_model(input_l1_tensor)
    outputs.append(output_tensor.cpu(blocking=False))
# --- end of the seed --------------------------------------------------------------------------

ttnn.synchronize_device(device)
assert len(outputs) == 2
for i, output in enumerate(outputs):
    check(output, model.reference(host_input(0)), f"iteration {i}")
finish(device, opened_here)
print("PASS seed 001 two CQs, CQ 1 writes")
