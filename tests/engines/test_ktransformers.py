"""KTransformers: options bounded and refused in one line, experts bound by the host's memory."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.engines.each import ktransformers
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import cpu_rate

BASE = {
    "hardware": "rtx-4090-2s-xeon-6454s",
    "model": "deepseek-v3",
    "precision": {"weights": "q4_k_m", "kv": "bf16"},
    "engine": "ktransformers",
    "workload": {"batch": 1, "prompt": 969, "generate": 300},
}


AMX = {"optimize_config_path": "DeepSeek-V3-Chat-amx.yaml"}  # the experts from a BF16 GGUF


def _embedding_bytes() -> float:
    """Return the bf16 bytes of the input embeddings, which every rule keeps on the CPU."""
    from kvoffload.model import tensor_groups

    table = tensor_groups.tensor_table(_sc({}).model, _sc({}).setup.weights)
    embed = (table.group == tensor_groups.GROUPS.index("embeddings")) & (table.position < 0)
    return float(table.params[embed].sum()) * 2


def _sc(options: dict | None = None, **workload: int):
    raw = {**BASE, "options": options or {}, "workload": {**BASE["workload"], **workload}}
    if ktransformers.RULES.get((options or {}).get("optimize_config_path"), "").startswith("AMX"):
        raw["precision"] = {"weights": "bf16", "kv": "bf16"}  # KExpertsCPU.load's assertion
    return parse_scenario(raw, name="kt")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cpu_infer": 0}, "cpu_infer"),
        ({"cpu_infer": 5000}, "cpu_infer"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"optimize_config_path": "Nope.yaml"}, "optimize_config_path"),
        ({"backend": "avx2"}, "backend"),
        ({"use_cuda": True}, "use_cuda"),
        ({"mla_decode": "flash"}, "mla_decode"),
        ({"numactl_node": -1}, "numactl_node"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_field(options, field):
    with pytest.raises(InputError) as e:
        _sc(options)
    assert field in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_new_tokens": 100}, "max_new_tokens"),
        ({"cache_lens": 1000}, "cache_lens"),
        ({"numactl_node": 2}, "numactl_node"),  # the host has two sockets, nodes 0 and 1
        ({"numactl_node": 0, "use_numa": True}, "numactl_node"),
    ],
)
def test_lengths_past_the_engine_s_limits_are_refused(options, field):
    with pytest.raises(InputError) as e:
        predict(_sc(options))
    assert field in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"use_numa": True, "cpu_infer": 65},
        {"optimize_config_path": "DeepSeek-V3-Chat-amx.yaml"},
    ],
)
def test_experts_on_the_cpu_never_beat_the_host_memory(options):
    sc = _sc(options)
    p = predict(sc)
    parts = ktransformers._parts(sc)
    k, n = parts["k_n"]
    read = float(parts["expert_bytes"].sum()) * k / n  # at least the routed share per token
    fastest = cpu_rate.host_stream_rate(sc.system.host, ktransformers.threads(sc), "distribute")
    assert p.streams_s["cpu"] >= read / fastest * (1 - 1e-9)
    assert p.memory.cpu >= float(parts["expert_bytes"].sum())


def test_numa_copies_the_experts_onto_each_socket_and_streams_faster():
    one, both = predict(_sc({"cpu_infer": 65})), predict(_sc({"cpu_infer": 65, "use_numa": True}))
    embed = _embedding_bytes()  # one bf16 table on the CPU, not copied per socket
    assert float(both.memory.cpu) - embed == pytest.approx(2 * (float(one.memory.cpu) - embed))
    assert both.tpot_s < one.tpot_s


def test_the_amx_constants_are_the_published_kernel_rates_per_core():
    c = ktransformers.constants()
    assert c["amx_int8_per_core"]["value"] == pytest.approx(35e3 / 64)  # 65 threads, 2 sockets
    assert c["amx_bf16_per_core"]["value"] == pytest.approx(21e3 / 64)
    amx = predict(_sc({"optimize_config_path": "DeepSeek-V3-Chat-amx.yaml"}, prompt=4096))
    plain = predict(_sc({}, prompt=4096))
    assert amx.ttft_s < plain.ttft_s  # prefill faster with AMX


def test_the_bottleneck_names_the_cpu_experts_not_host_resident_kv():
    p = predict(_sc({"cpu_infer": 33}))
    assert max(p.streams_s, key=p.streams_s.get) == "cpu"  # the experts' CPU time leads
    assert p.bottleneck == "CPU-side matmuls (weights in host memory)"
    assert "KV" not in p.to_json()["bottleneck"]


def test_one_socket_under_numactl_is_slower_than_both_and_holds_one_copy():
    one = predict(_sc({"cpu_infer": 33, "numactl_node": 1}))
    both = predict(_sc({"cpu_infer": 65, "use_numa": True}))
    assert one.streams_s["cpu"] > both.streams_s["cpu"]
    # two sockets add less than a second socket's worth: the fitted share is below one
    share = ktransformers.constants()["numa_socket_share"]["value"]
    assert one.streams_s["cpu"] / both.streams_s["cpu"] == pytest.approx(1 + share, rel=1e-9)
    embed = _embedding_bytes()  # one bf16 table on the CPU, not copied per socket
    assert float(both.memory.cpu) - embed == pytest.approx(2 * (float(one.memory.cpu) - embed))


def test_the_triton_mla_kernel_grows_less_with_context_than_the_torch_one():
    def growth(kernel: str) -> float:
        o = {"cpu_infer": 65, "use_numa": True, "mla_decode": kernel}
        return predict(_sc(o, prompt=8000)).tpot_s - predict(_sc(o, prompt=1000)).tpot_s

    assert 0 < growth("triton") < growth("torch")


@pytest.mark.parametrize(
    ("model", "default"),
    [
        ("deepseek-v3", "DeepSeek-V3-Chat.yaml"),
        ("kimi-k2", "DeepSeek-V3-Chat.yaml"),
        ("qwen3-30b-a3b", "Qwen3Moe-serve.yaml"),
        ("mixtral-8x7b", "Mixtral.yaml"),
        ("glm-4.5-air", "Glm4Moe-serve.yaml"),
    ],
)
def test_each_family_gets_the_rule_its_architecture_defaults_to(model, default):
    sc = parse_scenario({**BASE, "model": model, "options": {}}, name="kt")
    assert ktransformers.rule(sc) == default
    assert predict(sc, check=False).settings["optimize_config_path"] == default


def test_a_rule_for_another_family_or_a_family_without_rules_is_refused():
    wrong = {**BASE, "model": "qwen3-30b-a3b", "options": {"optimize_config_path": "Mixtral.yaml"}}
    with pytest.raises(InputError) as e:
        predict(parse_scenario(wrong, name="kt"), check=False)
    assert "options.optimize_config_path" in str(e.value) and "Qwen3Moe-serve.yaml" in str(e.value)
    for model in ("gpt-oss-120b", "llama-3.1-8b"):
        with pytest.raises(InputError) as e:
            predict(parse_scenario({**BASE, "model": model, "options": {}}, name="kt"), check=False)
        assert "no optimize rule" in str(e.value) and "\n" not in str(e.value)


def test_without_a_numa_policy_every_thread_computes_at_the_full_per_core_rate():
    sc = _sc({"cpu_infer": 65, "optimize_config_path": "DeepSeek-V3-Chat-amx.yaml"})
    per_core = ktransformers.constants()["amx_int8_per_core"]["value"] * 1e9
    cores = sc.system.host.cores
    assert ktransformers.expert_compute_rate(sc, 60) == pytest.approx(per_core * min(65, cores))
    numa = _sc(
        {"cpu_infer": 65, "use_numa": True, "optimize_config_path": "DeepSeek-V3-Chat-amx.yaml"}
    )
    share = ktransformers.constants()["numa_socket_share"]["value"]
    assert ktransformers.expert_compute_rate(numa, 60) == pytest.approx(
        per_core * min(65, cores) * (1 + share) / 2
    )


def test_an_amx_kernel_is_refused_on_a_host_without_amx_and_runs_where_it_is_not_stated():
    amx = {"optimize_config_path": "Qwen3Moe-serve-amx.yaml"}
    qwen = {**BASE, "model": "qwen3-30b-a3b", "options": amx,
            "precision": {"weights": "bf16", "kv": "bf16"}}  # fmt: skip
    assert predict(parse_scenario(qwen, name="kt"), check=False).ttft_s > 0  # Sapphire Rapids
    for options, field in ((amx, "optimize_config_path"), ({"backend": "AMXBF16"}, "backend")):
        desktop = {**qwen, "hardware": "rtx-4090-desktop", "options": options}
        with pytest.raises(InputError) as e:
            predict(parse_scenario(desktop, name="kt"), check=False)
        assert f"options.{field}" in str(e.value) and "amx: false" in str(e.value)
    unknown = {**qwen, "hardware": "a6000-lambda"}  # the CPU is not stated: amx not given
    assert predict(parse_scenario(unknown, name="kt"), check=False).ttft_s > 0


def test_an_amx_kernel_needs_bf16_experts_as_the_loader_asserts():
    raw = {**BASE, "options": AMX}  # BASE's Q4_K_M file
    with pytest.raises(InputError) as e:
        predict(parse_scenario(raw, name="kt"), check=False)
    assert "precision.weights" in str(e.value) and "not Q4_K_M" in str(e.value)
    assert predict(_sc(AMX), check=False).tpot_s > 0


def test_the_gpu_holds_every_linear_as_marlin_int4_and_kv_b_in_bf16():
    """The optimize rules send each Linear to the GPU as KLinearMarlin (4 bits, group 64),
    kv_b_proj apart (a torch Linear in bf16): the GPU's bytes are those, whatever the GGUF."""
    from kvoffload.inputs.precision import WeightFormat
    from kvoffload.model import tensor_groups

    q4, bf16 = predict(_sc({})), predict(_sc(AMX))
    model = _sc({}).model
    marlin = tensor_groups.tensor_table(model, WeightFormat.INT4_G64)
    table = tensor_groups.tensor_table(model, WeightFormat.Q4_K_M)
    held = ktransformers.gpu_nbytes(model, table)
    kv_b = np.array([".attn_kv_b." in n for n in table.names])
    assert kv_b.sum() == model.n_layers and (held[kv_b] == table.params[kv_b] * 2).all()
    linear = (
        table.matrix
        & ~table.routed
        & ~kv_b
        & (table.group != tensor_groups.GROUPS.index("embeddings"))
    )
    assert (held[linear] == marlin.nbytes[linear]).all()
    # the matrices' bytes do not depend on the file's format, the vectors' do; the input
    # embeddings are on the CPU, in bf16 whatever the file
    gap = float(q4.memory.gpu) - float(bf16.memory.gpu)
    emb = tensor_groups.tensor_table(model, WeightFormat.BF16)
    on_cpu = (table.group == tensor_groups.GROUPS.index("embeddings")) & (table.position < 0)
    vectors = ~linear & ~kv_b & ~table.routed & ~on_cpu
    assert float(q4.memory.cpu) == pytest.approx(
        float(table.params[on_cpu].sum()) * 2
        + float(ktransformers._parts(_sc({}))["expert_bytes"].sum())
    )
    assert gap == pytest.approx(
        float(table.nbytes[vectors].sum() - emb.nbytes[vectors].sum()), rel=1e-6, abs=2e8
    )
