"""llama.cpp's options (the scenario's ``options:``) and its engine constants."""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import FieldError
from kvoffload.inputs.limits import MAX_LAYERS
from kvoffload.inputs.text import Strict


@cache
def constants() -> dict:
    """Return llama.cpp's engine constants with their sources (catalog/engine_constants.yaml)."""
    return catalog.load("engine_constants")["llamacpp"]


def gpu_op_s_default(cuda_graphs: bool = True) -> float:
    """Return the fixed seconds each matmul on a GPU adds to a decode step, with CUDA graphs
    (PR #24216's 2026 build) or without (PR #6766)."""
    key = "gpu_op_us" if cuda_graphs else "gpu_op_us_no_graphs"
    return float(constants()[key]["value"]) * 1e-6


def mmq_share_default() -> float:
    """Return the share of the int8 tensor-core peak llama.cpp's MMQ prefill reaches (PR #7676)."""
    return float(constants()["mmq_int8_share"]["value"])


def ser_experts(o: Options, k: int) -> int:
    """Return the experts a token uses under ik_llama.cpp's ``-ser Kmin,t`` (``k``: the model's).

    ``ggml_argsort_thresh`` drops every expert after the first ``Kmin`` whose router probability
    is below ``t`` times the largest (ikawrakow/ik_llama.cpp ggml/src/ggml.c at
    9424c80ab1267afd023a71ff7f025e18da1b32c2, "SER - Smart Expert Reduction (#239)"), so with
    ``t >= 1`` a token keeps exactly ``min(Kmin, k)``. ik_llama.cpp stopped calling it on
    2025-10-19 (7a41b3b1f5778a06ef550c8f5a099c83c5f0435b: the selection is a plain top-k since,
    the flag still parsed): a run on a later build should leave ``ser`` out.
    """
    return min(int(o.ser[0]), k) if o.ser else k


def split_sync_s_default() -> float:
    """Return the seconds one CPU<->GPU hand-over costs (PR #7526)."""
    return float(constants()["split_sync_us"]["value"]) * 1e-6


Layers = Annotated[int, Meta(ge=0, le=MAX_LAYERS + 1)]  # -ngl counts the output layer too
MAX_OVERRIDES = 1000
MAX_DEVICES = 16  # llama.cpp's LLAMA_MAX_DEVICES
Proportion = Annotated[float, Meta(ge=0.0, le=1e9)]


class Options(Strict):
    """llama.cpp's options that decide placement."""

    n_gpu_layers: Layers | None = None  # default: all, the head included
    no_kv_offload: bool = False
    n_cpu_moe: Layers = 0  # --n-cpu-moe N
    cpu_moe: bool = False  # --cpu-moe
    # -ot, each "REGEX=CPU" or "REGEX=CUDA0" (or =cpu/=gpu); a string is split at its commas, as
    # -ot splits it, so once validated this is always a tuple
    override_tensor: tuple[str, ...] | str = ()
    threads: Annotated[int, Meta(ge=1, le=4096)] | None = None  # -t; default: host.threads
    numa: Literal["distribute", "isolate", "numactl"] | None = None  # --numa; default: no policy
    no_mmap: bool = False  # --no-mmap: weights copied into host buffers, so they must fit
    # the CUDA backend replays each token's kernels as one CUDA graph (GGML_CUDA_GRAPHS, on since
    # PR #6766, April 2024; Volta and Turing since PR #25749): false for an older build, a card
    # before Volta or GGML_CUDA_DISABLE_GRAPHS=1
    cuda_graphs: bool = True
    # fixed µs per matmul on a GPU and decode step (launches, tails); default: engine_constants.yaml
    gpu_op_us: Annotated[float, Meta(ge=0, le=100_000)] | None = None
    split_sync_us: Annotated[float, Meta(ge=0, le=100_000)] | None = None  # default: PR #7526
    cache_ram: Annotated[int, Meta(ge=-1, le=1 << 32)] = 8192  # MiB; 0: off, -1: no limit
    n_ubatch: Annotated[int, Meta(ge=1, le=1 << 20)] = 512  # -ub: tokens per physical batch
    # -b: tokens per logical batch; a physical batch is at most one (cparams.n_ubatch =
    # min(n_batch, n_ubatch), src/llama-context.cpp)
    n_batch: Annotated[int, Meta(ge=1, le=1 << 24)] = 2048
    # --no-op-offload: the prefill never sends an op on host-resident weights to the GPU
    no_op_offload: bool = False
    threads_batch: Annotated[int, Meta(ge=1, le=4096)] | None = None  # -tb; default: threads
    # --mlock: the mapped weights locked in RAM, where the fit already counts them; no term
    mlock: bool = False
    no_pinned: bool = False  # GGML_CUDA_NO_PINNED=1: the CUDA host buffer is pageable memory
    # which code base: llama.cpp, or ik_llama.cpp (its -ngl keeps the output layer on the CPU,
    # and it offloads a MoE op only when its experts see 32 tokens each on average)
    fork: Literal["llama.cpp", "ik_llama"] = "llama.cpp"
    # -ts: each GPU's share of the layers (proportions; "3,1" is split at its commas); all zero
    # or none given: by free memory, i.e. equal shares on the profile's alike GPUs
    tensor_split: tuple[Proportion, ...] | str = ()
    # -sm: layers split over the GPUs (layer); row, the same layers with each matrix also split
    # by rows over every GPU (placement.split_rows); all on main_gpu (none); or every layer's
    # weights and KV split over all GPUs with all-reduces between them: llama.cpp's tensor,
    # ik_llama.cpp's graph (tensor_parallel.py)
    split_mode: Literal["layer", "row", "none", "tensor", "attn", "graph"] = "layer"
    main_gpu: Annotated[int, Meta(ge=0, lt=MAX_DEVICES)] = 0  # -mg: the GPU split_mode none uses
    # llama-server's cache (kv_cells.py): -c (cells allocated up front; None: what the requests
    # hold, as llama-bench sizes it), -np slots (None: one a request), -kvu one stream for all,
    # --swa-full sliding layers as large as the rest
    ctx_size: Annotated[int, Meta(ge=1, le=1 << 25)] | None = None
    parallel: Annotated[int, Meta(ge=1, le=1 << 16)] | None = None
    kv_unified: bool = False
    swa_full: bool = False
    # -fit on|off (default on) and --fit-target MiB: with no -ngl, -ot or --n-cpu-moe given,
    # the placement common_params_fit picks over the GPUs (fit.py)
    # None: the fork's default, on for llama.cpp, off for ik_llama.cpp (its --fit opts in,
    # fit.fitted_ik: experts of each GPU's last layers to the CPU, --fit-margin MiB left free)
    fit: Literal["on", "off"] | bool | None = None
    fit_target: Annotated[int, Meta(ge=0, le=1 << 20)] = 1024
    fit_margin: Annotated[int, Meta(ge=0, le=1 << 20)] | None = None
    # -fa: flash attention; auto (llama.cpp's default) is on wherever the CUDA backend has its
    # kernels, as for every model here; off (or false) materialises the scores (attention.py)
    flash_attn: Literal["on", "off", "auto"] | bool = "auto"
    # ik_llama.cpp's -ser Kmin,t (smart expert reduction): "6,1" or [6, 1]; see ser_experts
    ser: tuple[Annotated[float, Meta(ge=0, le=1e6)], ...] | str = ()
    # ik_llama.cpp's -rtr (run-time repack): sets use_mmap = false, so it implies no_mmap
    rtr: bool = False
    # ik_llama.cpp's -mla (common.h at 8337e4cd3861406fc04e0854b1409cd1b027fbc9: default 3):
    # what a DeepSeek-style model caches: 0 every head's K and V (standard attention), 1 the
    # latent and a transposed copy of it for V, 2 and 3 the latent alone (3 with flash
    # attention in decode too); a model without MLA ignores it
    mla: Literal[0, 1, 2, 3] | None = None
    # ik_llama.cpp's -amb (MiB of attention scores at once, without flash attention only) and
    # -fmoe / -no-fmoe (the fused up-gate MoE op, on by default at that commit): accepted, no
    # term of their own (the prefill's score buffer is not modelled; the fused op's speed is
    # the matvec rates')
    amb: Annotated[int, Meta(ge=0, le=1 << 20)] | None = None
    fmoe: bool | None = None
    # flags a published command carries that change no modelled quantity, accepted so that the
    # command can be written down (common/arg.cpp): the threads' scheduling (--prio, --poll,
    # --cpu-strict, -C/--cpu-mask, -Cr/--cpu-range; the CPU rates are fitted on default runs),
    # load time (--no-warmup, -dio/--direct-io), --cache-reuse (KV shifting between requests'
    # prompts: one request is modelled) and --repack/--no-repack (CPU weight repacking, on by
    # default as in the fitted runs; off is not modelled)
    prio: Annotated[int, Meta(ge=-1, le=3)] | None = None
    poll: Annotated[int, Meta(ge=0, le=100)] | None = None
    cpu_strict: bool | None = None
    cpu_mask: Annotated[str, Meta(max_length=256, pattern=r"^(0[xX])?[0-9a-fA-F]+$")] | None = None
    cpu_range: Annotated[str, Meta(max_length=32, pattern=r"^\d{1,5}-\d{1,5}$")] | None = None
    no_warmup: bool | None = None
    direct_io: bool | None = None
    cache_reuse: Annotated[int, Meta(ge=0, le=1 << 24)] | None = None
    repack: bool | None = None

    @property
    def ubatch(self) -> int:
        """Return the tokens of one physical batch: ``n_ubatch``, at most ``n_batch``."""
        return min(self.n_ubatch, self.n_batch)

    def __post_init__(self) -> None:
        """Split a comma-separated ``override_tensor`` and ``tensor_split``; check each rule."""
        super().__post_init__()
        split = self.tensor_split
        if isinstance(split, str):
            try:
                split = tuple(float(x) for x in split.replace("/", ",").split(",") if x.strip())
            except ValueError:
                raise FieldError("tensor_split", "must be proportions such as '3,1'") from None
            msgspec.structs.force_setattr(self, "tensor_split", split)
        if len(split) > MAX_DEVICES or not all(0.0 <= x <= 1e9 for x in split):
            raise FieldError(
                "tensor_split", f"must be at most {MAX_DEVICES} proportions from 0 to 1e9"
            )
        ser = self.ser
        if isinstance(ser, str):
            try:
                ser = tuple(float(x) for x in ser.split(",") if x.strip())
            except ValueError:
                raise FieldError("ser", "must be 'Kmin,t' such as '6,1'") from None
            msgspec.structs.force_setattr(self, "ser", ser)
        if ser and (
            len(ser) != 2
            or not all(math.isfinite(x) and 0 <= x <= 1e6 for x in ser)
            or ser[0] != int(ser[0])
            or ser[0] < 1
        ):
            raise FieldError(
                "ser", "must be 'Kmin,t' such as '6,1': a whole Kmin from 1 and a t up to 1e6"
            )
        own = {"ser": bool(ser), "rtr": self.rtr, "mla": self.mla is not None,
               "amb": self.amb is not None, "fmoe": self.fmoe is not None,
               "fit_margin": self.fit_margin is not None}  # fmt: skip
        given = [name for name, used in own.items() if used]
        if given and self.fork != "ik_llama":
            raise FieldError(given[0], "is ik_llama.cpp's option: say fork: ik_llama with it")
        if ser and ser[1] < 1:
            raise FieldError(
                "ser",
                "with t below 1 the experts a token keeps depend on the router's probabilities, "
                "which the model does not have; 'Kmin,1' keeps exactly Kmin",
            )
        if isinstance(self.fit, str):
            msgspec.structs.force_setattr(self, "fit", self.fit == "on")
        if self.fit is None:
            msgspec.structs.force_setattr(self, "fit", self.fork == "llama.cpp")
        if isinstance(self.flash_attn, bool):
            msgspec.structs.force_setattr(self, "flash_attn", "on" if self.flash_attn else "off")
        _check_split_mode(self.split_mode, self.fork)
        if self.rtr:  # common.cpp: -rtr sets params.use_mmap = false
            msgspec.structs.force_setattr(self, "no_mmap", True)
        rules = self.override_tensor
        if isinstance(rules, str):
            rules = tuple(x for x in rules.split(",") if x.strip())
            msgspec.structs.force_setattr(self, "override_tensor", rules)
        if len(rules) > MAX_OVERRIDES:
            raise FieldError(
                "override_tensor", "must be a list of 'REGEX=CPU' or 'REGEX=CUDA0' entries"
            )
        for entry in rules:
            try:
                _parse_rule(entry)
            except ValueError as exc:
                raise FieldError("override_tensor", str(exc)) from None


def _check_split_mode(mode: str, fork: str) -> None:
    """Refuse a split mode the fork does not have, and ik_llama.cpp's ``attn`` (not modelled).

    llama.cpp's ``-sm`` takes none, layer, row and tensor (common/arg.cpp; ``tensor`` a Meta
    device over the GPUs, src/llama.cpp at 01649e61c782d88825d9f5affb6acbad0f57fb9b);
    ik_llama.cpp's none, layer, attn and graph (common/common.cpp at
    8337e4cd3861406fc04e0854b1409cd1b027fbc9), no row. ``tensor`` and ``graph`` are modelled
    as tensor parallelism (``tensor_parallel.py``, which also refuses what they refuse).
    """
    own = {
        "llama.cpp": ("layer", "row", "none", "tensor"),
        "ik_llama": ("layer", "none", "attn", "graph"),
    }
    if mode not in own[fork]:
        raise FieldError(
            "split_mode", f"{fork} has no split mode {mode!r} (it takes {', '.join(own[fork])})"
        )
    if mode == "attn":
        raise FieldError(
            "split_mode",
            "ik_llama.cpp's 'attn' splits only the attention over the GPUs, which is not "
            "modelled; use graph, layer or none",
        )


_DEVICES = {"cpu": "cpu", "gpu": "gpu"}


def _parse_rule(entry: Any) -> tuple[str, str]:
    """Return (pattern, device) from one ``-ot`` entry, refusing what llama.cpp would.

    The device is 'cpu', 'gpu<N>' for a numbered GPU buffer (CUDA1: 'gpu1') or 'gpu' for an
    unnumbered one (the main GPU).
    """
    if not isinstance(entry, str) or "=" not in entry or len(entry) > 1000:
        raise ValueError(f"override {entry!r} must be 'REGEX=CPU' or 'REGEX=CUDA0'")
    pattern, _, buffer = entry.rpartition("=")
    name = buffer.strip().lower()
    numbered = re.fullmatch(r"(?:cuda|rocm|vulkan|metal|gpu)(\d{1,2})?", name)
    device = _DEVICES.get(name) or (("gpu" + (numbered.group(1) or "")) if numbered else "")
    if not pattern or not device:
        raise ValueError(f"override {entry!r}: buffer {buffer!r} is not CPU or a GPU (CUDA0, ...)")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"override {entry!r}: bad regular expression ({exc})") from None
    return pattern, device
