"""The command line that runs a configuration, as each engine spells it, and its reading back.

llama.cpp's ``llama-server`` flags (ggml-org/llama.cpp common/arg.cpp): ``-m``, ``-ngl``,
``--cpu-moe``, ``--n-cpu-moe``, ``-ot``, ``--no-kv-offload``, ``--numa``, ``-ctk``/``-ctv``, ``-fa on`` (a quantised V cache
needs flash attention), ``-c`` (the context of every slot together) and ``-np`` (slots). vLLM's
``vllm serve`` engine arguments: ``--quantization``, ``--cpu-offload-gb``, ``--kv-cache-dtype``,
``--max-model-len`` and ``--max-num-seqs``. KTransformers (kvcache-ai/ktransformers at
95009ea6856c0799e517e93cb12be5e8494bc7ce, archive/ktransformers): ``local_chat.py``'s arguments
(``--model_path``, ``--gguf_path``, ``--optimize_config_path``, ``--cpu_infer``,
``--max_new_tokens``), and for a ``-serve`` rule (``Qwen3Moe-serve-amx.yaml`` too) the server's
(server/args.py: the same, with ``--architectures``, ``--backend_type balance_serve`` and ``--cache_lens``), as doc/en/AMX.md
starts it; ``numactl -N k -m k`` before it for ``numactl_node``, and for ``use_numa`` (a build
flag) the install run again with it, ``USE_NUMA=1 bash ./install.sh`` (doc/en/install.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models import Model

ALL_LAYERS = 99  # -ngl 99: every layer (llama.cpp's README); 999 where a model has more
_LLAMA_KV = {"fp16": "f16", "q8_0": "q8_0", "q4_0": "q4_0"}  # our KV format: -ctk/-ctv's name
_VLLM_KV = {"bf16": "auto", "fp8": "fp8"}
_VLLM_QUANT = {"fp8": "fp8", "int4": "awq"}  # --quantization; bf16 and mxfp4: the checkpoint's
# the server's --architectures for the model types its -serve rules match (config.json's names)
_KT_ARCHITECTURES = {
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM",
}
KT_RULES = "ktransformers/optimize/optimize_rules/"


def kv_name(engine: str, kv: str) -> str:
    """Return the cache format as the engine's flag names it (llama.cpp's f16, vLLM's auto);
    KTransformers has no such flag: the format's own name."""
    return {"llamacpp": _LLAMA_KV, "vllm": _VLLM_KV}.get(engine, {}).get(kv, kv)


def all_layers(model: Model) -> int:
    """Return the -ngl that puts every layer on the GPU: 99, or 999 past 98 layers."""
    return ALL_LAYERS if model.n_layers + 1 <= ALL_LAYERS else 999


def gguf_file(model: Model, weights: str, path: str = "") -> str:
    """Return the .gguf to load: the file given, else ``<model>-<FORMAT>.gguf``."""
    return path or f"{model.id}-{weights.upper()}.gguf"


def checkpoint(model: Model, weights: str, path: str = "") -> str:
    """Return what vLLM serves: the Hugging Face id (its AWQ checkpoint for int4), else the path."""
    base = model.hf_id or path or model.id
    return f"{base}-AWQ" if weights == "int4" else base


@dataclass(frozen=True)
class Command:
    """One configuration's command line read back: engine, formats, options, context, batch."""

    engine: str
    model: str
    weights: str
    kv: str
    options: Mapping[str, Any]
    context: int
    batch: int


def command_line(
    engine: str, model: Model, weights: str, kv: str, options: Mapping[str, Any],
    context: int, batch: int, path: str = "",
) -> str:  # fmt: skip
    """Return the command that runs the configuration (``path``: the user's model file)."""
    if engine == "llamacpp":
        args = ["llama-server", "-m", gguf_file(model, weights, path)]
        args += ["-ngl", str(options.get("n_gpu_layers", all_layers(model)))]
        if options.get("cpu_moe"):
            args.append("--cpu-moe")
        if options.get("n_cpu_moe"):
            args += ["--n-cpu-moe", str(options["n_cpu_moe"])]
        if options.get("override_tensor"):
            args += ["-ot", options["override_tensor"]]
        if options.get("no_kv_offload"):
            args.append("--no-kv-offload")
        if options.get("numa"):
            args += ["--numa", options["numa"]]
        if options.get("split_mode", "layer") != "layer":
            args += ["-sm", options["split_mode"]]
        if options.get("split_mode") == "tensor":  # docs/multi-gpu.md: -sm tensor needs -fit off
            args += ["-fit", "off"]
        if kv != "fp16":
            args += ["-ctk", _LLAMA_KV[kv], "-ctv", _LLAMA_KV[kv], "-fa", "on"]
        args += ["-c", str(context * batch)]
        if batch > 1:
            args += ["-np", str(batch)]
    elif engine == "ktransformers":
        args = _ktransformers_args(model, weights, options, context, path)
        if options.get("use_numa"):  # a build flag: install.sh again with it (doc/en/install.md)
            return "USE_NUMA=1 bash ./install.sh && " + shlex.join(args)
    else:
        args = ["vllm", "serve", checkpoint(model, weights, path)]
        if weights in _VLLM_QUANT:
            args += ["--quantization", _VLLM_QUANT[weights]]
        if options.get("cpu_offload_gb"):
            args += ["--cpu-offload-gb", f"{options['cpu_offload_gb']:g}"]
        if kv != "bf16":
            args += ["--kv-cache-dtype", _VLLM_KV[kv]]
        args += ["--max-model-len", str(context)]
        if batch > 1:
            args += ["--max-num-seqs", str(batch)]
    return shlex.join(args)


def _ktransformers_args(
    model: Model, weights: str, options: Mapping[str, Any], context: int, path: str
) -> list[str]:
    """Return KTransformers' command: the server for a ``-serve`` rule, else ``local_chat``."""
    rule = options["optimize_config_path"]
    gguf = path or f"{model.id}-{weights.upper()}/"  # --gguf_path: the folder of the GGUF parts
    args = []
    if options.get("numactl_node") is not None:
        node = str(options["numactl_node"])
        args += ["numactl", "-N", node, "-m", node]
    if "-serve" in rule:
        args += ["python", "ktransformers/server/main.py", "--architectures",
                 _KT_ARCHITECTURES[model.model_type]]  # fmt: skip
    else:
        args += ["python", "-m", "ktransformers.local_chat"]
    args += ["--model_path", model.hf_id or model.id, "--gguf_path", gguf]
    args += ["--optimize_config_path", KT_RULES + rule.rsplit("/", 1)[-1]]
    if options.get("cpu_infer"):
        args += ["--cpu_infer", str(options["cpu_infer"])]
    if "-serve" in rule:
        args += ["--backend_type", "balance_serve", "--cache_lens", str(context)]
    return args


def _flags(words: list[str]) -> dict[str, str | bool]:
    """Return ``--flag value`` pairs (a flag with no value: True)."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-"):
            raise InputError(f"{w!r} is not a flag")
        if i + 1 < len(words) and not words[i + 1].startswith("-"):
            out[w], i = words[i + 1], i + 2
        else:
            out[w], i = True, i + 1
    return out


def parse_command(line: str, model: Model, path: str = "") -> Command:
    """Return the configuration a command line from ``command_line`` runs (``path``: as given)."""
    words = shlex.split(line)
    if words[:1] == ["llama-server"]:
        f = _flags(words[1:])
        kv = {v: k for k, v in _LLAMA_KV.items()}[str(f.get("-ctk", "f16"))]
        opts: dict[str, Any] = {}
        ngl = int(f["-ngl"])
        if ngl < model.n_layers + 1:
            opts["n_gpu_layers"] = ngl
        if "--cpu-moe" in f:
            opts["cpu_moe"] = True
        if "--n-cpu-moe" in f:
            opts["n_cpu_moe"] = int(f["--n-cpu-moe"])
        if "-ot" in f:
            opts["override_tensor"] = f["-ot"]
        if "--no-kv-offload" in f:
            opts["no_kv_offload"] = True
        if "--numa" in f:
            opts["numa"] = str(f["--numa"])
        if "-sm" in f:
            opts["split_mode"] = str(f["-sm"])
        name = str(f["-m"])
        weights = "gguf" if path else name.rsplit("-", 1)[-1].removesuffix(".gguf").lower()
        batch = int(f.get("-np", 1))
        return Command("llamacpp", name, weights, kv, opts, int(f["-c"]) // batch, batch)
    if words[:2] == ["vllm", "serve"]:
        f = _flags(words[3:])
        quant = {v: k for k, v in _VLLM_QUANT.items()}
        own = "mxfp4" if model.ships_mxfp4_experts else "bf16"
        weights = quant[str(f["--quantization"])] if "--quantization" in f else own
        kv = {v: k for k, v in _VLLM_KV.items()}[str(f.get("--kv-cache-dtype", "auto"))]
        opts = {"cpu_offload_gb": float(f["--cpu-offload-gb"])} if "--cpu-offload-gb" in f else {}
        batch = int(f.get("--max-num-seqs", 1))
        return Command("vllm", words[2], weights, kv, opts, int(f["--max-model-len"]), batch)
    raise InputError(f"not a llama-server or vllm serve command: {line[:80]!r}")
