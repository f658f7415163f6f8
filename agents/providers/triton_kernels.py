# Triton types these kernels through triton.language; Python annotations would change them.
# mypy: disable-error-code="untyped-decorator,no-untyped-def"
"""The Triton GEMM kernel (imported only where Triton is installed)."""

import triton
import triton.language as tl


@triton.jit
def gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_ab,
    stride_am,
    stride_ak,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_cb,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    IEEE: tl.constexpr,
    SPLIT_K: tl.constexpr = 1,
):
    """C = A @ B; with SPLIT_K > 1, program (.., .., s) writes the fp32 partial of K slice s
    to c_ptr[s] (a [SPLIT_K, M, N] workspace) for `splitk_reduce_kernel` to sum."""
    pid = tl.program_id(0)
    batch = tl.program_id(1)
    split = tl.program_id(2)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % per_group) % group_m)
    pid_n = (pid % per_group) // group_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_blocks = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    k_first = split * k_blocks * BLOCK_K
    offs_k = tl.arange(0, BLOCK_K)
    rows = offs_m % M  # wrapped rows are loaded but never stored
    cols = offs_n % N
    a_ptrs = (
        a_ptr
        + batch * stride_ab
        + rows[:, None] * stride_am
        + (k_first + offs_k[None, :]) * stride_ak
    )
    b_ptrs = (
        b_ptr
        + batch * stride_bb
        + (k_first + offs_k[:, None]) * stride_bk
        + cols[None, :] * stride_bn
    )
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, k_blocks):
        k_left = K - k_first - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = (
        c_ptr
        + (split + batch) * stride_cb
        + offs_m[:, None] * stride_cm
        + offs_n[None, :] * stride_cn
    )
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def splitk_reduce_kernel(
    ws_ptr, c_ptr, M, N, stride_cm, stride_cn, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr
):
    """Sum the SPLIT_K fp32 partials of a [SPLIT_K, M, N] workspace into C, cast once."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    rows = offs // N
    cols = offs % N
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gemv_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cs,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr = 1,
):
    """C = A @ B for a few rows of A, on the CUDA cores rather than the tensor cores.

    A product of a handful of rows is bound by reading B once; each program streams a
    [BLOCK_N, BLOCK_K] slab of B per step (contiguous along K when B is stored [N, K], as in
    nn.Linear) and keeps BLOCK_M x BLOCK_N fp32 sums. With SPLIT_K > 1, program (.., s)
    writes the partial of K slice s to c_ptr[s], for `splitk_reduce_kernel` to sum.
    """
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    cols = offs_n % N  # wrapped columns are loaded but never stored
    k_blocks = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    k_first = split * k_blocks * BLOCK_K
    row_ok = offs_m < M
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, k_blocks):
        kk = k_first + i * BLOCK_K + offs_k
        k_ok = kk < K
        b = tl.load(
            b_ptr + cols[:, None] * stride_bn + kk[None, :] * stride_bk,
            mask=k_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.sum(a[:, None, :] * b[None, :, :], axis=2)
    c_ptrs = c_ptr + split * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n[None, :] < N))
