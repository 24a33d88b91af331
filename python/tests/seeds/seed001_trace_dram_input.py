"""Seed 001 (Metal Trace): the basic trace, persistent input in DRAM moved to L1 by the first op.

The block between the markers is the seed's code as the document writes it; above it, the
names it leaves undefined (seed_setup's stand-ins); below, the checks.
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
# Allocate our persistent input tensor
input_dram_tensor = ttnn.allocate_tensor_on_device(shape, dtype, layout, device, sharded_dram_mem_config)
# First run to compile the model
ttnn.copy_host_to_device_tensor(host_tensor, input_dram_tensor, cq_id=0)
input_l1_tensor = ttnn.to_memory_config(input_dram_tensor, sharded_l1_mem_config)
output_tensor = run_model(input_l1_tensor)
# Capture the trace of the model
ttnn.copy_host_to_device_tensor(host_tensor, input_dram_tensor, cq_id=0)
tid = ttnn.begin_trace_capture(device, cq_id=0)
input_l1_tensor = ttnn.to_memory_config(input_dram_tensor, sharded_l1_mem_config)
# It is important that we keep the output tensor on device returned here, so that we have the output tensor and associated address to read from after executing trace
output_tensor = run_model(input_l1_tensor)
ttnn.end_trace_capture(device, tid, cq_id=0)
# Execute the trace
ttnn.copy_host_to_device_tensor(host_tensor, input_dram_tensor, cq_id=0)
ttnn.execute_trace(device, tid, cq_id=0, blocking=False)
host_output_tensor = output_tensor.cpu(blocking=False)
# --- end of the seed --------------------------------------------------------------------------

ttnn.synchronize_device(device)
check(host_output_tensor, model.reference(host_input(0)), "replay of the captured model")
# A new input through the same persistent tensor: the replay reads it, not the old one.
for i in (1, 2):
    ttnn.copy_host_to_device_tensor(to_host_tensor(host_input(i)), input_dram_tensor, cq_id=0)
    ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
    check(output_tensor.cpu(), model.reference(host_input(i)), f"replay with input {i}")
ttnn.release_trace(device, tid)
finish(device, opened_here)
print("PASS seed 001 trace, DRAM input")
