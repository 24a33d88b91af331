"""Seed 003 (Step 4: Metal Trace), "Advanced Pattern: L1 Input": the input reallocated from its
TensorSpec at the address the trace recorded (`assert input_trace_addr == input_l1.buffer_address()`).

The block between the markers is the seed's code as the document writes it.
"""

import seed_setup
import ttnn
from seed_setup import Model, check, finish, host_input, seed_device, to_host_tensor

device, opened_here = seed_device(globals())
seed_model = Model(device)
model = seed_model.run
reference = seed_model.reference
host_tensor = to_host_tensor(host_input(0))
l1_config = seed_setup.sharded_l1_mem_config()

# --- seed 003, as written ---------------------------------------------------------------------
# Compile run
input_l1 = host_tensor.to(device, l1_config)
output = model(input_l1)

# Capture trace with address matching
input_l1 = host_tensor.to(device, l1_config)
input_trace_addr = input_l1.buffer_address()
spec = input_l1.spec

# Deallocate output to free space for input allocation
output.deallocate(force=True)

tid = ttnn.begin_trace_capture(device, cq_id=0)
output = model(input_l1)

# Reallocate input at same address
input_l1 = ttnn.allocate_tensor_on_device(spec, device)
assert input_trace_addr == input_l1.buffer_address()  # Verify address match

ttnn.end_trace_capture(device, tid, cq_id=0)

# Execute
ttnn.copy_host_to_device_tensor(host_tensor, input_l1)
ttnn.execute_trace(device, tid, cq_id=0, blocking=False)
# --- end of the seed --------------------------------------------------------------------------

check(output.cpu(), reference(host_input(0)), "replay with the input at the recorded L1 address")
ttnn.copy_host_to_device_tensor(to_host_tensor(host_input(1)), input_l1)
ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
check(output.cpu(), reference(host_input(1)), "replay with a new input")
ttnn.release_trace(device, tid)
finish(device, opened_here)
print("PASS seed 003 trace, L1 input at the recorded address")
