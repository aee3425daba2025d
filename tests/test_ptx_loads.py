"""What the compiler makes of a kernel, read without a GPU: Triton compiles for sm_90 offline (its
bundled ptxas), so a memory-bound starter's load width can be checked here. A 16-byte vector load
(ld.global...v4.b32) is what reaching copy bandwidth needs; two-byte loads (b16) cap it far below."""

from __future__ import annotations

import importlib.util
import re

import pytest


triton = pytest.importorskip("triton")


def _global_loads(fn, signature: dict, constants: dict, aligned_args: tuple[int, ...], num_warps: int) -> set[str]:
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:  # a Triton without this API
        pytest.skip(f"cannot compile for sm_90 offline here: {e}")
    if "nvidia" not in triton.backends.backends:
        pytest.skip("this Triton has no NVIDIA backend")
    # A compile error is the kernel's (or this test's signature's) fault, never a reason to skip.
    source = ASTSource(fn, signature, constants, {(i,): [["tt.divisibility", 16]] for i in aligned_args})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    return set(re.findall(r"ld\.global[\w.:]*", kernel.asm["ptx"]))


def test_cross_entropy_with_the_aligned_window_reads_an_odd_vocabulary_with_16_byte_vectors(monkeypatch, tmp_path):
    """The starter's ALIGNED_WINDOW move (VEC > 1, whole-row and looped tiles): 16-byte loads for the rows read
    over their windows, where the plain row pointer (VEC = 1, the starter's default: the window measured
    slower) gives two-byte ones. The last row is read plain in both, so the window's kernel has some too."""
    from autokernel.playbook.templates import complete, get_template

    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    template = get_template("cross_entropy")
    path = tmp_path / "candidate.py"
    path.write_text(template.render(complete(template, {"aligned_window": True, "rows_per_program": 2,
                                                        "target_from_tile": True})))
    spec = importlib.util.spec_from_file_location("_ce_window_candidate_ptx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {"logits_ptr": "*bf16", "targets_ptr": "*i64", "losses_ptr": "*fp32", "ticket_ptr": "*i64",
                 "out_ptr": "*fp32", "rows": "i32", "vocab": "i32", "stride_row": "i32"}
    constexprs = {"ROWS": 2, "PERSISTENT": False, "EVICTION": "evict_first", "EXP2": True, "ONLINE": True,
                  "TARGET_FROM_TILE": True, "USE_TMA": False}
    streaming = lambda loads: {ld for ld in loads if "evict_first" in ld}  # noqa: E731 (the logits' loads)
    for block_v, warps in ((8192, 8), (1024, 4)):  # the whole row in one tile (4097), and a loop; warps as the starter's
        consts = {**constexprs, "BLOCK_V": block_v, "MEAN_BLOCK": 128}
        sig = {**signature, **{name: "constexpr" for name in consts}}
        window = _global_loads(module._cross_entropy_kernel, sig, {**consts, "VEC": 8}, (0, 1, 2, 3), warps)
        plain = _global_loads(module._cross_entropy_kernel, sig, {**consts, "VEC": 1}, (0, 1, 2, 3), warps)
        assert any(ld.endswith(".v4.b32") for ld in streaming(window)), (block_v, window)
        assert streaming(plain) and all(ld.endswith(".b16") for ld in streaming(plain)), (block_v, plain)


def test_fused_mlp_starter_descriptor_kernels_compile_to_tma_copies_and_wgmma(monkeypatch):
    """The Hopper form of the fused_mlp starter (host tensor descriptors, K-major weight tiles): its sm_90
    code must load tiles with the bulk tensor copy and multiply with wgmma, the two things that made it
    match cuBLAS on the H100 (a fallback to cp.async/mma.sync would still pass every correctness check)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        pytest.skip(f"cannot compile for sm_90 offline here: {e}")
    if "nvidia" not in triton.backends.backends:
        pytest.skip("this Triton has no NVIDIA backend")
    from autokernel.kernels import get_spec

    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    path = get_spec("fused_mlp").starters["triton"]
    spec = importlib.util.spec_from_file_location("_fused_mlp_starter_ptx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bm, bn, bk, warps, stages = module.GATE_UP_TMA_TILES[0]  # a shape both kernels take
    desc = lambda rows, cols: f"tensordesc<bf16[{rows}, {cols}]>"  # noqa: E731
    consts = {"UPCAST": False, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}
    ints = {"M": "i32", "N": "i32", "K": "i32"}
    kernels = (
        (module._gate_up_tma_kernel, {"x_desc": desc(bm, bk), "wg_desc": desc(bn, bk), "wu_desc": desc(bn, bk),
                                      "h_desc": desc(bm, bn)}),
        (module._matmul_tma_kernel, {"a_desc": desc(bm, bk), "b_desc": desc(bn, bk), "c_desc": desc(bm, bn)}),
    )
    for fn, descs in kernels:
        signature = {**descs, **ints, **{k: "constexpr" for k in consts}}
        compiled = triton.compile(ASTSource(fn, signature, consts), target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": warps, "num_stages": stages})
        ptx = compiled.asm["ptx"]
        assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx, fn.__name__
