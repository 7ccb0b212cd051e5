"""Chapter 10's comparison of llama.cpp and KTransformers with every routed expert on the CPU."""

from __future__ import annotations

import pytest

from kvoffload.engines.each import ktransformers
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.report import moe_charts
from kvoffload.studies import cpu_experts
from kvoffload.studies.advise_commands import command_line, parse_command

DESKTOP = "rtx-4090-desktop"
SERVER = "rtx-4090-2s-xeon-6454s"  # two sockets: each engine's NUMA row as well


@pytest.fixture(scope="module")
def server():
    return cpu_experts.compare(SERVER, "deepseek-v3")


def test_a_model_without_a_rule_runs_the_stand_in_and_says_so():
    r = cpu_experts.compare(DESKTOP, "gpt-oss-120b")
    assert r.stand_in and r.model == cpu_experts.STAND_IN
    assert r.sentence.startswith("KTransformers has no optimize rule for gpt-oss-120b")
    kept = cpu_experts.compare(DESKTOP, "qwen3-30b-a3b")
    assert not kept.stand_in and "no optimize rule" not in kept.sentence


def test_one_socket_has_no_numa_rows_and_two_sockets_add_one_per_engine(server):
    one = cpu_experts.compare(DESKTOP, "qwen3-30b-a3b")
    assert list(one.rows["setting"]) == ["--cpu-moe", "its default rule"]
    assert (
        list(server.rows["engine"]) == [cpu_experts.LLAMACPP] * 2 + [cpu_experts.KTRANSFORMERS] * 2
    )
    assert "--numa distribute" in server.rows["command"].iloc[1]


def test_each_row_is_its_engines_own_prediction(server):
    for _, row in server.rows.iterrows():
        engine = "llamacpp" if row["engine"] == cpu_experts.LLAMACPP else "ktransformers"
        options = (
            {"cpu_moe": True, **({"numa": "distribute"} if "numa" in row["setting"] else {})}
            if engine == "llamacpp"
            else ({"use_numa": True} if "USE_NUMA" in row["setting"] else {})
        )
        sc = parse_scenario(
            {"hardware": SERVER, "model": "deepseek-v3", "engine": engine,
             "precision": {"weights": "q4_k_m", "kv": "fp16"},
             "workload": {"batch": 1, "prompt": 4096, "generate": cpu_experts.GENERATE},
             "options": options}
        )  # fmt: skip
        p = predict(sc, check=False)
        assert row["decode_tokens_per_s"] == pytest.approx(1 / p.tpot_s)
        assert row["prefill_tokens_per_s"] == pytest.approx(4096 / p.ttft_s)


def test_both_engines_keep_the_experts_in_host_memory_and_use_numa_doubles_them(server):
    rows = server.rows.set_index("setting")
    experts = rows.loc["--cpu-moe", "cpu_bytes"]
    # the same placement: the routed experts (nearly all of DeepSeek-V3) in host memory
    assert rows.loc["its default rule", "cpu_bytes"] == pytest.approx(experts, rel=0.02)
    assert rows.loc["built with USE_NUMA=1", "cpu_bytes"] == pytest.approx(2 * experts, rel=0.02)
    assert (rows["gpu_bytes"] < load_system(SERVER).gpu_memory).all()


def test_the_sentence_names_each_metrics_winner_and_its_ratio(server):
    for metric in ("decode_tokens_per_s", "prefill_tokens_per_s"):
        a = server.best_of(cpu_experts.LLAMACPP, metric)[metric]
        b = server.best_of(cpu_experts.KTRANSFORMERS, metric)[metric]
        assert f"{max(a, b) / min(a, b):.3g}×" in server.sentence


def test_the_commands_read_back_as_the_rows_options(server):
    llama = server.rows[server.rows["engine"] == cpu_experts.LLAMACPP]
    back = [parse_command(c, load_model("deepseek-v3")).options for c in llama["command"]]
    assert back == [{"cpu_moe": True}, {"cpu_moe": True, "numa": "distribute"}]
    kt = server.rows[server.rows["engine"] == cpu_experts.KTRANSFORMERS]["command"].iloc[0]
    assert kt.startswith("python -m ktransformers.local_chat ")
    assert "optimize_rules/DeepSeek-V3-Chat.yaml" in kt and "--cpu_infer 61" in kt
    numa = server.rows[server.rows["engine"] == cpu_experts.KTRANSFORMERS]["command"].iloc[1]
    assert numa == "USE_NUMA=1 bash ./install.sh && " + kt  # a build flag, the same command
    qwen = cpu_experts.compare(DESKTOP, "qwen3-30b-a3b").rows["command"].iloc[1]
    assert "ktransformers/server/main.py --architectures Qwen3MoeForCausalLM" in qwen
    assert "--backend_type balance_serve --cache_lens 4096" in qwen


def test_the_page_table_has_a_row_per_setup_and_the_command_as_a_note(server):
    table = moe_charts.cpu_experts_table(server)
    assert len(table) == len(server.rows) and table["command"].str.len().min() > 20
    assert table["host memory (GB)"].iloc[0] == pytest.approx(server.rows["cpu_bytes"][0] / 1e9)


def test_the_stand_in_has_a_rule():
    assert cpu_experts.takes(cpu_experts.STAND_IN)
    assert not cpu_experts.takes("gpt-oss-120b")
    assert load_model(cpu_experts.STAND_IN).model_type in ktransformers.DEFAULT_RULES


def test_a_server_rule_starts_the_server_whatever_its_backend():
    model = load_model("qwen3-235b-a22b")
    for rule in ("Qwen3Moe-serve.yaml", "Qwen3Moe-serve-amx.yaml"):
        line = command_line("ktransformers", model, "bf16", "bf16",
                            {"optimize_config_path": rule}, 8192, 1)  # fmt: skip
        assert line.startswith("python ktransformers/server/main.py --architectures ")
        assert line.endswith(
            f"optimize_rules/{rule} --backend_type balance_serve --cache_lens 8192"
        )


def test_an_engine_that_does_not_fit_is_never_named_the_faster():
    r = cpu_experts.compare(DESKTOP, "deepseek-v3")  # 64 GB of host memory
    kt = r.rows[r.rows["engine"] == cpu_experts.KTRANSFORMERS]
    assert (
        not kt["fits"].any() and r.best_of(cpu_experts.KTRANSFORMERS, "decode_tokens_per_s") is None
    )
    assert "only llama.cpp fits this machine" in r.sentence and "faster" not in r.sentence
