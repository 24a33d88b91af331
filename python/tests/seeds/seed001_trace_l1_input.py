"""Seed 001 (Metal Trace): input in L1, deallocated during the trace and reallocated at the
address the trace recorded (`assert input_trace_addr == input_l1_tensor.buffer_address()`).

The block between the markers is the seed's code as the document writes it.
"""

import seed_setup
import ttnn
from seed_setup import Model, check, finish, host_input, seed_device, to_host_tensor

device, opened_here = seed_device(globals())
model = Model(device)
run_model = model.run
host_tensor = to_host_tensor(host_input(0))
sharded_l1_mem_config = seed_setup.sharded_l1_mem_config()

# --- seed 001, as written ---------------------------------------------------------------------
# First run to compile the model
input_l1_tensor = host_tensor.to(device, sharded_l1_mem_config)
output_tensor = run_model(input_l1_tensor)
# Capture the trace of the model
# Record the address of the input tensor to trace so that we can validate we allocated our input tensor at the right address
input_l1_tensor = host_tensor.to(device, sharded_l1_mem_config)
input_trace_addr = input_l1_tensor.buffer_address()
shape = input_l1_tensor.shape
dtype = input_l1_tensor.dtype
layout = input_l1_tensor.layout
# Deallocate the previous output tensor here so that we will allocate our input tensor at the right address afterwards
output_tensor.deallocate(force=True)
tid = ttnn.begin_trace_capture(device, cq_id=0)
# It is important that we keep the output tensor on device returned here, so that we have the output tensor and associated address to read from after executing trace
output_tensor = run_model(input_l1_tensor)
# Try allocating our persistent input tensor here and verifying it matches the address that trace captured
input_l1_tensor = ttnn.allocate_tensor_on_device(shape, dtype, layout, device, sharded_l1_mem_config)
assert input_trace_addr == input_l1_tensor.buffer_address()
ttnn.end_trace_capture(device, tid, cq_id=0)
# Execute the trace
ttnn.copy_host_to_device_tensor(host_tensor, input_l1_tensor, cq_id=0)
ttnn.execute_trace(device, tid, cq_id=0, blocking=False)
host_output_tensor = output_tensor.cpu(blocking=False)
# --- end of the seed --------------------------------------------------------------------------

ttnn.synchronize_device(device)
print(f"input_trace_addr {input_trace_addr} == buffer_address() {input_l1_tensor.buffer_address()}")
check(host_output_tensor, model.reference(host_input(0)), "replay with the input at the recorded L1 address")
for i in (1, 2):
    ttnn.copy_host_to_device_tensor(to_host_tensor(host_input(i)), input_l1_tensor, cq_id=0)
    ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
    check(output_tensor.cpu(), model.reference(host_input(i)), f"replay with input {i}")
ttnn.release_trace(device, tid)
finish(device, opened_here)
print("PASS seed 001 trace, L1 input at the recorded address")
