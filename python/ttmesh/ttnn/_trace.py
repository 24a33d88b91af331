"""Metal Trace and events as TT-NN's Python calls them."""

from ttmesh import _ttmesh as _n

from ._ops import _cq

MeshTraceId = _n.MeshTraceId_
MeshEvent = _n.MeshEvent


def _device(fn, device):
    if not isinstance(device, _n.MeshDevice):
        raise TypeError(f"ttnn.{fn}: device must be a ttnn.MeshDevice, not {type(device).__name__}")
    return device


def begin_trace_capture(device, cq_id=0):
    """Starts capturing the ops enqueued on ``cq_id`` of every chip; returns the trace id."""
    return _n.begin_trace_capture(_device("begin_trace_capture", device), _cq(None, cq_id))


def end_trace_capture(device, trace_id, cq_id=0):
    """Ends the capture: sizes each chip's trace and writes it into the TRACE region."""
    _n.end_trace_capture(_device("end_trace_capture", device), trace_id, _cq(None, cq_id))


def execute_trace(device, trace_id, cq_id=0, blocking=True):
    """Replays the trace on every chip in lockstep; ``blocking=True`` waits for it."""
    _n.execute_trace(_device("execute_trace", device), trace_id, _cq(None, cq_id), bool(blocking))


def release_trace(device, trace_id):
    _n.release_trace(_device("release_trace", device), trace_id)


def create_event(device):
    return _n.create_event(_device("create_event", device))


def record_event(*args, **kwargs):
    """Both of TT-NN's forms: ``record_event(cq_id, event)`` records ``event`` (from
    ``create_event``) on queue ``cq_id``; ``record_event(device, cq_id)`` creates, records and
    returns a new event."""
    if args and isinstance(args[0], _n.MeshDevice) or "device" in kwargs or "mesh_device" in kwargs:
        device = kwargs.pop("device", None) or kwargs.pop("mesh_device", None) or args[0]
        rest = list(args[1:]) if args and isinstance(args[0], _n.MeshDevice) else list(args)
        cq_id = kwargs.pop("cq_id", None)
        if cq_id is None:
            cq_id = rest.pop(0) if rest else 0
        kwargs.pop("sub_device_ids", None)
        if kwargs:
            raise TypeError(f"ttnn.record_event() got unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        event = create_event(device)
        _n.record_event(_cq(None, cq_id), event, device)
        return event
    cq_id = kwargs.pop("cq_id", args[0] if args else None)
    event = kwargs.pop("event", args[1] if len(args) > 1 else None)
    kwargs.pop("sub_device_ids", None)
    if kwargs:
        raise TypeError(f"ttnn.record_event() got unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
    if not isinstance(event, MeshEvent):
        raise TypeError(f"ttnn.record_event(cq_id, event): event must come from ttnn.create_event(device), not {type(event).__name__}")
    _n.record_event(_cq(None, cq_id), event, None)
    return event


def wait_for_event(cq_id, event):
    """Makes queue ``cq_id`` wait (on the device; the host goes on) until ``event`` completed."""
    if not isinstance(event, MeshEvent):
        raise TypeError(f"ttnn.wait_for_event: event must come from ttnn.create_event / record_event, not {type(event).__name__}")
    _n.wait_for_event(_cq(None, cq_id), event)


def event_synchronize(event):
    """Blocks the host until ``event`` completed."""
    if not isinstance(event, MeshEvent):
        raise TypeError(f"ttnn.event_synchronize: event must come from ttnn.create_event / record_event, not {type(event).__name__}")
    _n.event_synchronize(event)
