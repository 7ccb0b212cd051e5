"""A Model from a GGUF file's header: its shape from the metadata, its tensors as the file has them.

The metadata keys (``<arch>.block_count``, ``.embedding_length``, ...) are llama.cpp's LLM_KV
names (src/llama-arch.cpp); they are mapped to the config.json fields ``from_hf_config`` reads, so
a GGUF model is checked and shaped as a config.json one is. Its tensors are the file's: each
tensor info's name gives its role and layer, its dims and ggml type its exact bytes (weights
``gguf``); the other weight formats re-type the same tensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import display_name
from kvoffload.inputs.gguf import GgufHeader, TensorInfo, read_model_headers
from kvoffload.inputs.models.architecture import Tensor
from kvoffload.inputs.models.config import from_hf_config
from kvoffload.inputs.models.model import Model
from kvoffload.inputs.precision import WeightFormat

# general.architecture -> config.json model_type (llama with experts is Mixtral)
_ARCHS = {
    "llama": "llama", "mistral3": "mistral", "qwen2": "qwen2", "qwen2moe": "qwen2_moe",
    "qwen3": "qwen3", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "deepseek2": "deepseek_v3",
    "gemma2": "gemma2", "gemma3": "gemma3", "phi3": "phi3",
}  # fmt: skip
# config.json field <- the GGUF key after "<arch>."
_KEYS = {
    "num_hidden_layers": "block_count",
    "hidden_size": "embedding_length",
    "intermediate_size": "feed_forward_length",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "max_position_embeddings": "context_length",
    "num_local_experts": "expert_count",
    "num_experts_per_tok": "expert_used_count",
    "moe_intermediate_size": "expert_feed_forward_length",
    "n_shared_experts": "expert_shared_count",
    "first_k_dense_replace": "leading_dense_block_count",
    "sliding_window": "attention.sliding_window",
    "rope_theta": "rope.freq_base",
    "kv_lora_rank": "attention.kv_lora_rank",
    "q_lora_rank": "attention.q_lora_rank",
    "shared_expert_intermediate_size": "expert_shared_feed_forward_length",
}
# tensor base name (llama.cpp LLM_TENSOR_NAMES) -> role (inputs/models/tensors.py)
_ROLES = {
    "token_embd": "embed", "output": "output", "output_norm": "norm_final",
    "attn_q": "attn_q", "attn_k": "attn_k", "attn_v": "attn_v", "attn_output": "attn_o",
    "attn_qkv": "attn_q", "attn_q_a": "attn_q_a", "attn_q_b": "attn_q_b",
    "attn_kv_a_mqa": "attn_kv_a", "attn_kv_b": "attn_kv_b", "attn_k_b": "attn_kv_b",
    "attn_v_b": "attn_kv_b", "attn_sinks": "sinks",
    "ffn_gate": "ffn_gate", "ffn_up": "ffn_up", "ffn_down": "ffn_down",
    "ffn_gate_exps": "exp_gate", "ffn_up_exps": "exp_up", "ffn_down_exps": "exp_down",
    "ffn_gate_up_exps": "exp_up", "ffn_gate_shexp": "shexp_gate", "ffn_up_shexp": "shexp_up",
    "ffn_down_shexp": "shexp_down", "ffn_gate_inp": "router",
    "ffn_gate_inp_shexp": "shexp_gate_inp",
}  # fmt: skip
_NAME = re.compile(r"^(?:blk\.(\d{1,6})\.)?([A-Za-z0-9_.]+?)(?:\.(weight|bias))?$")


@dataclass(frozen=True, eq=False)
class GgufModel(Model):
    """A model read from a GGUF file: the file's tensors with their ggml types and bytes."""

    gguf_tensors: tuple[tuple[Tensor, int], ...] = ()
    gguf_types: tuple[str, ...] = ()  # each tensor's ggml type, in the order of gguf_tensors

    __hash__ = Model.__hash__

    def tensors(self) -> tuple[Tensor, ...]:
        """Return the file's tensors."""
        return tuple(t for t, _ in self.gguf_tensors)

    def tensor_bytes(self, fmt: WeightFormat) -> tuple[tuple[Tensor, int], ...]:
        """Return each tensor with its bytes: as the file stores it (``gguf``), else in ``fmt``."""
        return self.gguf_tensors if fmt is WeightFormat.GGUF else super().tensor_bytes(fmt)

    def type_bytes(self) -> dict[str, int]:
        """Return the file's bytes per ggml type."""
        out: dict[str, int] = {}
        for (_, size), kind in zip(self.gguf_tensors, self.gguf_types, strict=True):
            out[kind] = out.get(kind, 0) + size
        return out


def _role(info: TensorInfo, n_layers: int, shown: str) -> tuple[str, int | None]:
    match = _NAME.match(info.name)
    if not match:
        shown_name = display_name(info.name, 60)
        raise InputError(f"tensor name {shown_name!r} is not a llama.cpp tensor name", file=shown)
    layer = None if match[1] is None else int(match[1])
    if layer is not None and layer >= n_layers:
        raise InputError(f"tensor {info.name} is past the model's {n_layers} layers", file=shown)
    base, suffix = match[2], match[3]
    if suffix == "bias" or (base.endswith("_b") and len(info.dims) == 1):
        return "bias", layer
    role = _ROLES.get(base)
    if role is None:  # norms, rope factors, scales and tensors this tool does not name
        if len(info.dims) == 1 or base.endswith("norm"):
            role = "norm" if layer is not None else "norm_embed"
        elif layer is None:
            role = "embed" if "embd" in base else "output"
        else:
            role = next((r for p, r in _PREFIX if base.startswith(p)), "attn_q")
    if len(info.dims) == 1 and role not in (
        "norm",
        "norm_final",
        "norm_embed",
        "sinks",
    ):
        role = "norm" if layer is not None else "norm_embed"
    return role, layer


_PREFIX = (("ssm", "ssm_in"), ("ffn", "ffn_up"), ("attn", "attn_q"))


def _tensor(info: TensorInfo, role: str, layer: int | None) -> Tensor:
    dims = info.dims
    count = 1
    for d in dims[2:]:
        count *= d
    rows = dims[1] if len(dims) > 1 else 1
    expert = role.startswith("exp_") or (role == "bias" and "_exps" in info.name)
    return Tensor(role, layer, rows, dims[0], count=count, vector=len(dims) == 1, expert=expert)


def _config(meta: dict[str, Any], tensors: dict[str, TensorInfo], shown: str) -> dict:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise InputError("general.architecture is missing", file=shown)
    mt = _ARCHS.get(arch)
    if mt is None:
        known = ", ".join(sorted(_ARCHS))
        raise InputError(
            f"GGUF architecture {arch!r} is not read; known: {known}",
            file=shown,
            field="general.architecture",
        )
    cfg: dict[str, Any] = {"model_type": mt}
    for field, key in _KEYS.items():
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values (head_count_kv, ...): the widest
            value = max(value) if value else None
        if value is not None:
            cfg[field] = value
    if mt == "llama" and cfg.get("num_local_experts"):
        mt = cfg["model_type"] = "mixtral"
    if mt == "deepseek_v3":  # MLA: the key is nope + rope wide (key_length_mla in newer files)
        rope = meta.get(f"{arch}.rope.dimension_count", 64)
        key = meta.get(f"{arch}.attention.key_length_mla", cfg.get("head_dim", 0))
        value = meta.get(f"{arch}.attention.value_length_mla") or meta.get(
            f"{arch}.attention.value_length", 128
        )
        cfg.update(qk_rope_head_dim=rope, qk_nope_head_dim=key - rope, v_head_dim=value)
        cfg.pop("head_dim", None)
        cfg["n_routed_experts"] = cfg.pop("num_local_experts", None)
    embed = tensors.get("token_embd.weight")
    if embed is None or len(embed.dims) != 2:
        raise InputError("the file has no 2-D token_embd.weight tensor", file=shown)
    cfg["vocab_size"] = embed.dims[1]
    cfg["tie_word_embeddings"] = "output.weight" not in tensors
    cfg["torch_dtype"] = "gguf"
    return cfg


def from_gguf(path: str | Path) -> GgufModel:
    """Return the model a GGUF file (or split set, given any part) holds."""
    headers: tuple[GgufHeader, ...] = read_model_headers(path)
    shown = headers[0].name
    infos = [t for h in headers for t in h.tensors]
    by_name = {t.name: t for t in infos}
    meta = headers[0].metadata
    cfg = _config(meta, by_name, shown)
    stem = Path(str(path)).name.rsplit(".", 1)[0]
    ident = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-")[:100] or "gguf"
    name = meta.get("general.name")
    try:
        base = from_hf_config(
            cfg,
            ident=ident,
            name=name if isinstance(name, str) and name.isprintable() and name else ident,
            source=shown,
        )
    except InputError as exc:
        raise exc.within(file=shown) from None
    tensors = []
    for info in infos:
        role, layer = _role(info, base.n_layers, shown)
        tensors.append((_tensor(info, role, layer), info.nbytes))
    fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
    return GgufModel(
        **fields,
        gguf_tensors=tuple(tensors),
        gguf_types=tuple(t.type.name for t in infos),
    )
