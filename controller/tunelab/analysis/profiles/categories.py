"""What kind of work a kernel or op is, from its name: the documented patterns.

The first rule that matches wins, so the order matters: communication and copies first (their
names can contain anything), then MoE before GEMM (a grouped GEMM is MoE's), attention before
GEMM (CUTLASS and cuDNN attention kernels carry ``cutlass``/``gemm``-like words), then GEMM,
then elementwise and normalisation; the rest is ``other``. Matching is case-insensitive on the
kernel or op name; the trace's event category decides copies (``gpu_memcpy``, ``gpu_memset``).

docs/profiles.md lists the same table; tests/unit/controller/test_profile_categories.py holds
a real name for each rule.
"""

from __future__ import annotations

import re
from typing import Final

GEMM: Final = "gemm"
ATTENTION: Final = "attention"
MOE: Final = "moe"
COMMUNICATION: Final = "communication"
MEMCPY: Final = "memcpy"
ELEMENTWISE: Final = "elementwise_norm"
OTHER: Final = "other"
CATEGORIES: Final = (GEMM, ATTENTION, MOE, COMMUNICATION, MEMCPY, ELEMENTWISE, OTHER)

COPY_EVENT_CATEGORIES: Final = frozenset({"gpu_memcpy", "gpu_memset"})

RULES: Final[tuple[tuple[str, str], ...]] = (
    # NCCL's kernels (ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ncclKernel_...), vLLM's custom
    # all-reduce (cross_device_reduce_1stage), c10d ops and the collectives by name.
    (
        COMMUNICATION,
        (
            r"nccl|cross_device_reduce|c10d::|all_?reduce|all_?gather|reduce_?scatter"
            r"|all_to_all|alltoall|send_recv"
        ),
    ),
    (MEMCPY, r"^memcpy|^memset|memcpy[a-z]*kernel|cudamemcpy|aten::copy_|aten::to$|aten::_to_copy"),
    # Triton's fused_moe_kernel (vLLM, SGLang), moe_align_block_size, topk_softmax, CUTLASS and
    # DeepGEMM grouped GEMMs, FlashInfer's cutlass_fused_moe and the cutedsl MoE kernels.
    (MOE, r"moe|grouped_?gemm|group_?gemm|m_grouped|expert"),
    # FlashAttention 2/3 (flash_fwd_kernel, flash_fwd_splitkv_kernel, FlashAttnFwdSm90), cuDNN's
    # SDPA (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_...), PyTorch's
    # mem-efficient fmha_cutlassF, FlashInfer (BatchPrefillWithPagedKVCacheKernel, BatchDecode...),
    # vLLM's paged_attention, reshape_and_cache and (CPU) unified_kv_cache_update /
    # cpu_attention_with_kv_cache, MLA kernels, scaled_dot_product ops.
    (
        ATTENTION,
        (
            r"flash|fmha|sdpa|scaled_dot_product|attention|attn|paged_?kv|batchdecode"
            r"|batchprefill|reshape_and_cache|kv_cache|mla_|_mla|mha_|xformers"
        ),
    ),
    # cuBLASLt's nvjet_* on Hopper (nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT), sm90_xmma_gemm_*,
    # ampere_*gemm*, cutlass kernels, cublas/cublasLt, splitKreduce, Triton and Inductor matmul
    # templates, DeepGEMM's fp8_gemm, and the CPU ops aten::mm/addmm/bmm/linear/matmul and oneDNN.
    (
        GEMM,
        (
            r"nvjet|gemm|xmma|cutlass|cublas|splitkreduce|wgmma|_mm_|mm_kernel|matmul"
            r"|aten::(?:mm|addmm|bmm|baddbmm|linear)$|onednn|mkldnn|dnnl|s16816|h16816|s884|h884"
        ),
    ),
    # PyTorch's elementwise/reduce kernels (vectorized_elementwise_kernel, unrolled_elementwise_,
    # reduce_kernel), Inductor's fused pointwise/reduction kernels (triton_poi_/triton_per_/
    # triton_red_), norms, activations, rotary embeddings, and the matching CPU ops.
    (
        ELEMENTWISE,
        (
            r"elementwise|reduce_kernel|triton_poi|triton_per|triton_red|norm|silu|gelu"
            r"|act_and_mul|swiglu|rotary|rope|softmax|aten::(?:add|mul|sub|div|neg|exp|pow|rsqrt|mean"
            r"|sum|cat|fill_|zero_|clone|where|index|gather|scatter|embedding|argmax|topk|sort)"
        ),
    ),
)
_COMPILED: Final = tuple((cat, re.compile(pattern, re.IGNORECASE)) for cat, pattern in RULES)


def categorize(name: str, event_category: str = "") -> str:
    """The category of a kernel or op named ``name`` (``event_category`` is the trace's ``cat``)."""
    if event_category in COPY_EVENT_CATEGORIES:
        return MEMCPY
    for category, pattern in _COMPILED:
        if pattern.search(name):
            return category
    return OTHER
