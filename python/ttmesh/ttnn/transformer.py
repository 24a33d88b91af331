"""``ttnn.transformer``: decode attention."""

import math

from ttmesh import _ttmesh as _n

from ._ops import _cq, _out, _tensor


def scaled_dot_product_attention_decode(
    input_tensor_q,
    input_tensor_k,
    input_tensor_v,
    *,
    is_causal=True,
    attn_mask=None,
    cur_pos=None,
    cur_pos_tensor=None,
    scale=None,
    program_config=None,
    compute_kernel_config=None,
    memory_config=None,
    queue_id=None,
    cq_id=None,
    **kwargs,
):
    """TT-NN's decode attention: q ``[1, B, q_heads, head_dim]``, caches ``[B, kv_heads,
    max_seq, head_dim]`` (GQA); user b attends to rows ``0..=cur_pos[b]``. The positions come
    from ``cur_pos_tensor`` (a device UINT32 tensor, traceable) or ``cur_pos`` (a list, written
    to the device first). ``scale`` defaults to 1/sqrt(head_dim)."""
    q = _tensor("transformer.scaled_dot_product_attention_decode", "input_tensor_q", input_tensor_q)
    k = _tensor("transformer.scaled_dot_product_attention_decode", "input_tensor_k", input_tensor_k)
    v = _tensor("transformer.scaled_dot_product_attention_decode", "input_tensor_v", input_tensor_v)
    if attn_mask is not None or not is_causal:
        raise ValueError("ttnn.transformer.scaled_dot_product_attention_decode: only causal attention without attn_mask is emulated")
    if cur_pos_tensor is None:
        if cur_pos is None:
            raise ValueError("ttnn.transformer.scaled_dot_product_attention_decode: pass cur_pos_tensor= (a UINT32 device tensor) or cur_pos= (a list of ints)")
        import numpy as np  # noqa: PLC0415

        from . import _tensor as tensors  # noqa: PLC0415

        cur_pos_tensor = tensors.from_torch(np.asarray(cur_pos, dtype=np.uint32), dtype=tensors.uint32, device=q.device())
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return _n.sdpa_decode(q, k, v, cur_pos_tensor, float(scale), memory_config, None, _cq(queue_id, cq_id))
