"""``ttnn.experimental``: the decode-step kernels TT-NN keeps there."""

from ttmesh import _ttmesh as _n

from ._ops import _cq, _out, _positions, _tensor


def rotary_embedding(input_tensor, cos_cache, sin_cache, token_index=None, *, memory_config=None, output_tensor=None, queue_id=None, cq_id=None, **kwargs):
    """Rotary embedding (HF rotate_half): x ``[1, B, heads, head_dim]``, caches ``[1, 1, max_seq,
    head_dim]``; ``token_index`` gives each user's position: a device UINT32 tensor of B values
    (ttmesh's form, traceable) or an int for every user."""
    x = _tensor("experimental.rotary_embedding", "input_tensor", input_tensor)
    cos = _tensor("experimental.rotary_embedding", "cos_cache", cos_cache)
    sin = _tensor("experimental.rotary_embedding", "sin_cache", sin_cache)
    if token_index is None:
        raise ValueError("ttnn.experimental.rotary_embedding: pass token_index (the positions: a UINT32 device tensor or an int)")
    pos = _positions("experimental.rotary_embedding", token_index, x.shape[1], x.device())
    return _n.rotary_embedding(x, cos, sin, pos, memory_config, _out("experimental.rotary_embedding", output_tensor), _cq(queue_id, cq_id))


def paged_update_cache(cache_tensor, input_tensor, *, update_idxs=None, update_idxs_tensor=None, share_cache=None, page_table=None, batch_offset=0, compute_kernel_config=None, queue_id=None, cq_id=None):
    """Writes each user's new K or V row into the cache at its position (in place)."""
    if page_table is not None:
        raise ValueError("ttnn.experimental.paged_update_cache: page tables are not emulated; pass page_table=None")
    cache = _tensor("experimental.paged_update_cache", "cache_tensor", cache_tensor)
    new = _tensor("experimental.paged_update_cache", "input_tensor", input_tensor)
    idx = update_idxs_tensor if update_idxs_tensor is not None else update_idxs
    if isinstance(idx, (list, tuple)):
        import numpy as np  # noqa: PLC0415

        from . import _tensor as tensors  # noqa: PLC0415

        idx = tensors.from_torch(np.asarray(idx, dtype=np.uint32), dtype=tensors.uint32, device=cache.device())
    pos = _positions("experimental.paged_update_cache", idx, new.shape[1], cache.device())
    _n.update_cache(cache, new, pos, _cq(queue_id, cq_id))
    return cache
