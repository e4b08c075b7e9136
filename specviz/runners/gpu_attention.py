"""Attention for a few new tokens over a static KV cache, in Triton kernels (CUDA only).

Why: in a captured decode step of a small model, cuDNN's attention is a large share of the forward's kernel time
for one query row, it read the whole span, and the layout around it took two more kernels: the grouped query heads
are packed into rows and the mask repeated for them, then unpacked. These kernels read q in the layer's own
[K, heads, D] layout, the mask as the forward built it ([K, span], shared by every layer), and writes [K,
heads * D] for the output projection; it stops at the last slot any token may see (read from the device, so
one captured graph serves every length up to its span). docs/fast-path.md has what it saves.

In the target's layers (runners.llama.triton_decoder_layer) the kernel also takes the new tokens' own keys and values,
reads them from there and writes them into the cache: two kernels fewer a layer than writing the cache first.

One program serves BLOCK_M rows of one key-value head: row r is query head kv * group + r // K at token
r % K (the `group` query heads that share the kv head), so the keys and values are read once for all of
them. Online softmax over key blocks in float32 (Flash-Attention's recurrence); a masked key adds exactly
zero, so a row's result does not depend on the span or on the rows beside it.
"""
from __future__ import annotations

import math

import torch

BLOCK_M = 16  # rows a program serves (tl.dot needs 16)
BLOCK_N = 64  # keys a loop iteration reads, and the chunk of slots a program serves in a decode pass
SPLITS_BLOCK = 32  # chunks a combining program reads at once
MAX_SPLIT_TOKENS = 256  # inputs of up to this many tokens (decode and verify passes) split the keys in chunks

_kernel = None
_available: bool | None = None


def supported(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """On CUDA where Triton imports, for a power-of-two head size of 16 to 256 (tl.arange's and tl.dot's
    limits). Callers also ask EngineOptions.triton_attention."""
    global _available
    if device.type != "cuda":
        return False
    if dtype not in (torch.float16, torch.bfloat16,
                     torch.float32) or head_dim & (head_dim - 1) or not 16 <= head_dim <= 256:
        return False
    if _available is None:
        try:
            _build_kernel()
            _available = True
        except Exception:  # no Triton (a CPU build of torch, some Spaces images): scaled_dot_product_attention then
            _available = False
    return _available


def _build_kernel():
    global _kernel
    if _kernel is not None:
        return _kernel
    import triton
    import triton.language as tl

    # lengths vary from call to call: no specialisation on them (each would be a compile of its own)
    @triton.jit(do_not_specialize=["count", "span"])
    def partial_kernel(Q, K, V, Mask, Out, Best, Total, Acc, Last, KNew, VNew, count, span, scale,
                       q_token, q_head, k_head, k_slot, v_head, v_slot, o_token, o_head, mask_row,
                       kn_token, kn_head, vn_token, vn_head,
                       GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                       SPLIT: tl.constexpr, IEEE: tl.constexpr, WRITE: tl.constexpr):
        """Rows BLOCK_M * program_id(1) ... of kv head program_id(0) over the keys of chunk program_id(2)
        (BLOCK_N slots) when SPLIT, else over all keys. SPLIT: writes the chunk's running max, sum and
        unnormalised output for combine_kernel; else the normalised output. WRITE: the new tokens' keys and
        values (KNew, VNew [count, kv_heads, D], for the `count` slots up to Last) are read from there, and the
        programs of the first row block write them into the cache (no program reads the cache at those slots)."""
        kv = tl.program_id(0)
        block = tl.program_id(1)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < GROUP * count
        token = rows % count
        head = kv * GROUP + rows // count
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + token[:, None] * q_token + head[:, None] * q_head + dims[None, :], mask=row_ok[:, None],
                    other=0.0)
        best = tl.full([BLOCK_M], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        last_slot = tl.load(Last)
        end = tl.minimum(last_slot + 1, span)  # no token sees a slot past the last one written
        first_new = last_slot + 1 - count
        if SPLIT:
            low = tl.program_id(2) * BLOCK_N
            high = tl.minimum(low + BLOCK_N, end)
        else:
            low = 0
            high = end
        for first in range(low, high, BLOCK_N):
            keys_at = first + tl.arange(0, BLOCK_N)
            key_ok = keys_at < high
            if WRITE:
                fresh = keys_at >= first_new
                new_row = tl.maximum(keys_at - first_new, 0)
                k = tl.where(fresh[:, None],
                             tl.load(KNew + new_row[:, None] * kn_token + kv * kn_head + dims[None, :],
                                     mask=(key_ok & fresh)[:, None], other=0.0),
                             tl.load(K + kv * k_head + keys_at[:, None] * k_slot + dims[None, :],
                                     mask=(key_ok & ~fresh)[:, None], other=0.0))
                v = tl.where(fresh[:, None],
                             tl.load(VNew + new_row[:, None] * vn_token + kv * vn_head + dims[None, :],
                                     mask=(key_ok & fresh)[:, None], other=0.0),
                             tl.load(V + kv * v_head + keys_at[:, None] * v_slot + dims[None, :],
                                     mask=(key_ok & ~fresh)[:, None], other=0.0))
                if block == 0:
                    writes = (key_ok & fresh)[:, None]
                    tl.store(K + kv * k_head + keys_at[:, None] * k_slot + dims[None, :], k, mask=writes)
                    tl.store(V + kv * v_head + keys_at[:, None] * v_slot + dims[None, :], v, mask=writes)
            else:
                k = tl.load(K + kv * k_head + keys_at[:, None] * k_slot + dims[None, :], mask=key_ok[:, None],
                            other=0.0)
                v = tl.load(V + kv * v_head + keys_at[:, None] * v_slot + dims[None, :], mask=key_ok[:, None],
                            other=0.0)
            if IEEE:
                scores = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                scores = tl.dot(q, tl.trans(k))
            allowed = tl.load(Mask + token[:, None] * mask_row + keys_at[None, :],
                              mask=row_ok[:, None] & key_ok[None, :], other=0) != 0
            scores = tl.where(allowed, scores * scale, float("-inf"))
            new_best = tl.maximum(best, tl.max(scores, 1))
            safe = tl.where(new_best == float("-inf"), 0.0, new_best)  # a row that has seen nothing yet
            weights = tl.exp(scores - safe[:, None])
            rescale = tl.exp(best - safe)
            total = total * rescale + tl.sum(weights, 1)
            if IEEE:
                acc = acc * rescale[:, None] + tl.dot(weights, v, input_precision="ieee")
            else:
                acc = acc * rescale[:, None] + tl.dot(weights.to(v.dtype), v)
            best = new_best
        if SPLIT:
            blocks = tl.num_programs(1)
            at = (tl.program_id(2) * tl.num_programs(0) + kv) * blocks * BLOCK_M + block * BLOCK_M + tl.arange(0,
                                                                                                               BLOCK_M)
            tl.store(Best + at, best)
            tl.store(Total + at, total)
            tl.store(Acc + at[:, None] * HEAD_DIM + dims[None, :], acc)
        else:
            out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
            tl.store(Out + token[:, None] * o_token + head[:, None] * o_head + dims[None, :],
                     out.to(Out.dtype.element_ty), mask=row_ok[:, None])

    @triton.jit(do_not_specialize=["count", "rows_written"])
    def combine_kernel(Out, Best, Total, Acc, Last, count, o_token, o_head, rows_written,
                       GROUP: tl.constexpr, SPLITS_BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
                       CHUNK: tl.constexpr):
        """One row's chunks merged, SPLITS_BLOCK at a time, up to the last chunk holding a slot any token may
        see. A token's result is the same whatever the span: chunks are fixed by slot, and a chunk that
        holds no slot the row may see adds exactly nothing."""
        kv = tl.program_id(0)
        row = tl.program_id(1)
        kv_heads = tl.num_programs(0)
        dims = tl.arange(0, HEAD_DIM)
        used = tl.cdiv(tl.load(Last) + 1, CHUNK)
        best = float("-inf")
        total = 0.0
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for first in range(0, used, SPLITS_BLOCK):
            splits = first + tl.arange(0, SPLITS_BLOCK)
            ok = splits < used
            at = (splits * kv_heads + kv) * rows_written + row
            chunk_best = tl.load(Best + at, mask=ok, other=float("-inf"))
            new_best = tl.maximum(best, tl.max(chunk_best, 0))
            safe = tl.where(new_best == float("-inf"), 0.0, new_best)
            weight = tl.exp(chunk_best - safe)
            rescale = tl.exp(best - safe)
            total = total * rescale + tl.sum(weight * tl.load(Total + at, mask=ok, other=0.0), 0)
            chunk_acc = tl.load(Acc + at[:, None] * HEAD_DIM + dims[None, :], mask=ok[:, None], other=0.0)
            acc = acc * rescale + tl.sum(weight[:, None] * chunk_acc, 0)
            best = new_best
        out = acc / tl.where(total == 0.0, 1.0, total)
        token = row % count
        head = kv * GROUP + row // count
        tl.store(Out + token * o_token + head * o_head + dims, out.to(Out.dtype.element_ty))

    @triton.jit(do_not_specialize=["count", "span"])
    def path_kernel(Q, K, V, Best, Total, Acc, Start, Depths, Paths, KNew, VNew, count, span, scale,
                    q_token, q_head, k_head, k_slot, v_head, v_slot, paths_row, kn_token, kn_head, vn_token, vn_head,
                    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                    IEEE: tl.constexpr):
        """The exact mode's partial pass: the query heads (GROUP rows, of BLOCK_M) of token program_id(1) over
        the BLOCK_N logical positions of chunk program_id(2). Logical position j is the token's j-th key: a cache
        slot j before Start, then its path (Paths[token, d]: the new token at depth d, written at Start + that
        index), up to its own depth. A token's keys are thus read in the same order and the same chunks
        whether it is alone, in a chain or a node of a tree; the program's other rows are its own heads only.
        The new tokens' keys and values are read from KNew, VNew [count, kv_heads, D] (no program reads the
        cache from Start on), and the chunk-0 program of each token writes its own into the cache at Start +
        token. Writes the chunk's running max, sum and unnormalised output for combine_kernel (row h * count +
        token)."""
        kv = tl.program_id(0)
        token = tl.program_id(1)
        rows = tl.arange(0, BLOCK_M)
        row_ok = rows < GROUP
        head = kv * GROUP + rows
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + token * q_token + head[:, None] * q_head + dims[None, :], mask=row_ok[:, None], other=0.0)
        best = tl.full([BLOCK_M], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        start = tl.load(Start)
        if tl.program_id(2) == 0:
            tl.store(K + kv * k_head + (start + token) * k_slot + dims,
                     tl.load(KNew + token * kn_token + kv * kn_head + dims))
            tl.store(V + kv * v_head + (start + token) * v_slot + dims,
                     tl.load(VNew + token * vn_token + kv * vn_head + dims))
        end = tl.minimum(start + tl.load(Depths + token) + 1, span)  # logical positions the token sees
        low = tl.program_id(2) * BLOCK_N
        high = tl.minimum(low + BLOCK_N, end)
        for first in range(low, high, BLOCK_N):
            logical = first + tl.arange(0, BLOCK_N)
            seen = logical < high
            on_path = logical >= start
            fresh = seen & on_path
            old = seen & ~on_path
            step = tl.load(Paths + token * paths_row + tl.maximum(logical - start, 0), mask=fresh, other=0)
            k = tl.where(on_path[:, None],
                         tl.load(KNew + step[:, None] * kn_token + kv * kn_head + dims[None, :], mask=fresh[:, None],
                                 other=0.0),
                         tl.load(K + kv * k_head + logical[:, None] * k_slot + dims[None, :], mask=old[:, None],
                                 other=0.0))
            v = tl.where(on_path[:, None],
                         tl.load(VNew + step[:, None] * vn_token + kv * vn_head + dims[None, :], mask=fresh[:, None],
                                 other=0.0),
                         tl.load(V + kv * v_head + logical[:, None] * v_slot + dims[None, :], mask=old[:, None],
                                 other=0.0))
            if IEEE:
                scores = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                scores = tl.dot(q, tl.trans(k))
            scores = tl.where(seen[None, :], scores * scale, float("-inf"))
            new_best = tl.maximum(best, tl.max(scores, 1))
            safe = tl.where(new_best == float("-inf"), 0.0, new_best)
            weights = tl.exp(scores - safe[:, None])
            rescale = tl.exp(best - safe)
            total = total * rescale + tl.sum(weights, 1)
            if IEEE:
                acc = acc * rescale[:, None] + tl.dot(weights, v, input_precision="ieee")
            else:
                acc = acc * rescale[:, None] + tl.dot(weights.to(v.dtype), v)
            best = new_best
        at = (tl.program_id(2) * tl.num_programs(0) + kv) * GROUP * count + rows * count + token
        tl.store(Best + at, best, mask=row_ok)
        tl.store(Total + at, total, mask=row_ok)
        tl.store(Acc + at[:, None] * HEAD_DIM + dims[None, :], acc, mask=row_ok[:, None])

    _kernel = (triton, partial_kernel, combine_kernel, path_kernel)
    return _kernel


def launch(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
           last: torch.Tensor, new_keys: torch.Tensor | None = None, new_values: torch.Tensor | None = None
           ) -> torch.Tensor:
    """q [K, heads, D] (the last dimension contiguous); keys, values [kv_heads, span, D] (the cache up to the
    span); mask [K, span] bool (True = may attend); last [1] long (on the device): the last slot any token
    may see (the slots after it are not read). Returns [K, heads * D] in q's dtype. new_keys, new_values
    [K, kv_heads, D]: the K tokens' own keys and values, for the slots last - K + 1 .. last; the kernel
    writes them into the cache (else the caller has written them).

    Up to MAX_SPLIT_TOKENS tokens (every decode and verify pass), the keys are split into chunks of BLOCK_N
    slots, one program each, merged by a second kernel (flash-decoding: a few rows over a short cache are
    otherwise a handful of programs in a loop); the chunks are fixed by slot, so a token's result does not
    depend on the span either. Longer inputs (prefills) take one pass over all keys."""
    triton, partial_kernel, combine_kernel, _ = _build_kernel()
    q = q if q.stride(-1) == 1 else q.contiguous()
    write = new_keys is not None
    if write:
        new_keys = new_keys if new_keys.stride(-1) == 1 else new_keys.contiguous()
        new_values = new_values if new_values.stride(-1) == 1 else new_values.contiguous()
    else:
        new_keys = new_values = q  # not read
    count, heads, head_dim = q.shape
    kv_heads, span, _ = keys.shape
    group = heads // kv_heads
    out = torch.empty(count, heads, head_dim, device=q.device, dtype=q.dtype)
    blocks = triton.cdiv(group * count, BLOCK_M)
    split = count <= MAX_SPLIT_TOKENS
    splits = triton.cdiv(span, BLOCK_N) if split else 1
    if split:
        best = torch.empty(splits * kv_heads * blocks * BLOCK_M, device=q.device, dtype=torch.float32)
        total = torch.empty_like(best)
        acc = torch.empty(best.shape[0], head_dim, device=q.device, dtype=torch.float32)
    else:
        best = total = acc = out  # not written
    partial_kernel[(kv_heads, blocks, splits)](
        q, keys, values, mask, out, best, total, acc, last, new_keys, new_values, count, span,
        1.0 / math.sqrt(head_dim), q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), values.stride(0),
        values.stride(1), out.stride(0), out.stride(1), mask.stride(0),
        new_keys.stride(0), new_keys.stride(1), new_values.stride(0), new_values.stride(1),
        GROUP=group, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=head_dim, SPLIT=split,
        IEEE=q.dtype == torch.float32, WRITE=write, num_warps=4)
    if split:
        combine_kernel[(kv_heads, group * count)](out, best, total, acc, last, count, out.stride(0), out.stride(1),
                                                  blocks * BLOCK_M, GROUP=group, SPLITS_BLOCK=SPLITS_BLOCK,
                                                  HEAD_DIM=head_dim, CHUNK=BLOCK_N, num_warps=2)
    return out.view(count, heads * head_dim)


def launch_paths(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: torch.Tensor,
                 depths: torch.Tensor, paths: torch.Tensor, last: torch.Tensor, new_keys: torch.Tensor,
                 new_values: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """The exact mode's attention (runners/exact.py): q [K, heads, D] of K new tokens, new_keys and new_values
    [K, kv_heads, D] their keys and values, written into the cache at slots start .. start + K - 1; keys, values
    [kv_heads, span, D]; start [1] and depths [K] long (token i sits at position start + depths[i]); paths
    [K, K] long, contiguous: paths[i, d] is the new token at depth d on token i's path (for a chain, d itself);
    last [1]: start + K - 1. Returns [rows, heads * D] (rows: K unless given): the K tokens' results first,
    the rows after them left as they were allocated (padding that nothing reads).

    Every token is its own program over chunks of BLOCK_N of its own keys in position order (the cache's, then
    its path's), merged by the same combining kernel as launch's: a token's result is bit for bit the same
    whatever the tokens beside it, alone, in a chain or in a tree. Query heads that share a key-value head:
    at most BLOCK_M (path_supported)."""
    triton, _, combine_kernel, path_kernel = _build_kernel()
    q = q if q.stride(-1) == 1 else q.contiguous()
    new_keys = new_keys if new_keys.stride(-1) == 1 else new_keys.contiguous()
    new_values = new_values if new_values.stride(-1) == 1 else new_values.contiguous()
    count, heads, head_dim = q.shape
    kv_heads, span, _ = keys.shape
    group = heads // kv_heads
    splits = triton.cdiv(span, BLOCK_N)
    partial_rows = group * count
    best = torch.empty(splits * kv_heads * partial_rows, device=q.device, dtype=torch.float32)
    total = torch.empty_like(best)
    acc = torch.empty(best.shape[0], head_dim, device=q.device, dtype=torch.float32)
    out = torch.empty(rows or count, heads, head_dim, device=q.device, dtype=q.dtype)
    path_kernel[(kv_heads, count, splits)](
        q, keys, values, best, total, acc, start, depths, paths, new_keys, new_values, count, span,
        1.0 / math.sqrt(head_dim), q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), values.stride(0),
        values.stride(1), paths.stride(0), new_keys.stride(0), new_keys.stride(1), new_values.stride(0),
        new_values.stride(1), GROUP=group, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=head_dim,
        IEEE=q.dtype == torch.float32, num_warps=4)
    combine_kernel[(kv_heads, partial_rows)](out, best, total, acc, last, count, out.stride(0), out.stride(1),
                                             partial_rows, GROUP=group, SPLITS_BLOCK=SPLITS_BLOCK,
                                             HEAD_DIM=head_dim, CHUNK=BLOCK_N, num_warps=2)
    return out.view(out.shape[0], heads * head_dim)


def path_supported(heads: int, kv_heads: int) -> bool:
    """launch_paths serves one token's query heads of a key-value head in one block of BLOCK_M rows."""
    return heads // kv_heads <= BLOCK_M


def _custom_op(fn):
    """torch.library.custom_op where this torch has it (2.4 and later), else the plain function."""
    if not hasattr(torch.library, "custom_op"):
        return fn
    op = torch.library.custom_op("specviz::attention", mutates_args=(), device_types="cuda")(fn)
    op.register_fake(lambda q, keys, values, mask, last: q.new_empty(q.shape[0], q.shape[1] * q.shape[2]))
    return op


@_custom_op
def attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
              last: torch.Tensor) -> torch.Tensor:
    """launch() as a custom op: compiled code that calls it (EAGLE's tree drafting) treats it as one opaque
    call (Inductor failed to compile the Triton kernels inside a compiled function)."""
    return launch(q, keys, values, mask, last)

