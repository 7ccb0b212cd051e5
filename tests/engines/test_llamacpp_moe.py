"""llama.cpp's MoE offload options: --n-cpu-moe, --cpu-moe and -ot, as llama.cpp places tensors."""

import numpy as np
import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import tensor_groups as tg

BASE = {
    "hardware": "rtx-4090-desktop",
    "model": "gpt-oss-20b",
    "engine": "llamacpp",
    "precision": {"weights": "q4_k_m", "kv": "fp16"},
    "workload": {"batch": 1, "prompt": 4096, "generate": 32},
}


def _pred(**options):
    return predict(parse_scenario({**BASE, "options": options}), check=False)


def _experts_on_cpu(**options):
    sc = parse_scenario({**BASE, "options": options})
    table, on_gpu = llamacpp.tensor_devices(sc)
    routed = table.routed
    return sorted(set(table.position[routed & ~on_gpu].tolist())), bool(
        on_gpu[~routed & (table.position >= 0)].all()
    )


def test_n_cpu_moe_keeps_the_experts_of_the_first_n_layers_in_host_memory():
    layers, rest_on_gpu = _experts_on_cpu(n_cpu_moe=5)
    assert layers == [0, 1, 2, 3, 4] and rest_on_gpu
    assert _experts_on_cpu(cpu_moe=True)[0] == list(range(24))
    assert _experts_on_cpu(override_tensor=["exps=CPU"])[0] == list(range(24))
    # an override to the GPU that comes first wins over --cpu-moe (first match)
    assert _experts_on_cpu(override_tensor=[r"blk\.0\.=CUDA0"], cpu_moe=True)[0] == list(
        range(1, 24)
    )


def test_more_experts_on_the_cpu_is_slower_and_moves_bytes_from_gpu_to_host():
    preds = [_pred(n_cpu_moe=n) for n in (0, 6, 12, 24)]
    tpot = [p.tpot_s for p in preds]
    gpu = [p.memory.gpu for p in preds]
    total = [float(p.memory.gpu + p.memory.cpu) for p in preds]
    assert np.all(np.diff(tpot) > 0) and np.all(np.diff(gpu) < 0)
    assert total == pytest.approx([total[0]] * 4, rel=1e-12)  # bytes are moved, not made


def test_experts_on_the_cpu_beat_whole_layers_on_the_cpu_for_the_same_gpu_memory():
    moe = _pred(n_cpu_moe=12)
    # the -ngl value whose GPU memory is closest to (not above) the expert offload's
    ngl = max(
        (n for n in range(26) if _pred(n_gpu_layers=n).memory.gpu <= moe.memory.gpu),
        key=lambda n: _pred(n_gpu_layers=n).memory.gpu,
    )
    layers = _pred(n_gpu_layers=ngl)
    assert layers.memory.gpu <= moe.memory.gpu
    assert moe.tpot_s < layers.tpot_s


def test_each_expert_offloaded_layer_hands_over_twice():
    sc = parse_scenario({**BASE, "options": {"n_cpu_moe": 3}})
    table, gpus = llamacpp.tensor_gpus(sc)
    ups, downs, peers = llamacpp._hand_overs(sc, table, gpus)
    # embedding lookup -> GPU once; each of the 3 layers: GPU -> CPU (experts) -> GPU; logits back
    assert (ups, downs, peers) == (1 + 3, 3 + 1, 0)


@pytest.mark.parametrize(
    ("rules", "problem"),
    [(["exps"], "must be 'REGEX=CPU'"), (["exps=DISK"], "is not CPU or a GPU"), (["(=CPU"], "bad regular expression")],
)  # fmt: skip
def test_bad_overrides_are_refused_naming_the_option(rules, problem):
    with pytest.raises(InputError, match=problem) as err:
        parse_scenario({**BASE, "options": {"override_tensor": rules}}, name="s.yaml")
    assert "options" in str(err.value)


def test_the_json_says_what_the_overrides_moved():
    out = _pred(n_cpu_moe=4).to_json()
    assert out["engine_settings"]["n_cpu_moe"] == 4
    moved = out["engine_settings"]["weights_on_cpu_by_group"]
    assert set(moved) == {"experts", "embeddings"}
    t = tg.tensor_table(parse_scenario({**BASE}).model, parse_scenario({**BASE}).setup.weights)
    assert moved["experts"] == pytest.approx(float(t.nbytes[t.routed & (t.position < 4)].sum()))


@pytest.mark.parametrize(
    ("model", "weights", "n_cpu_moe"),
    [("gpt-oss-120b", "mxfp4", 24), ("qwen3-235b-a22b", "q4_k_m", 84)],
)
def test_the_big_moe_models_run_on_a_4090_desktop_with_experts_in_host_memory(
    tmp_path, model, weights, n_cpu_moe
):
    """The issue's case: `predict` with n_cpu_moe fits both tiers (the fit check is on)."""
    import json
    import subprocess
    import sys

    import yaml

    raw = {**BASE, "model": model, "precision": {"weights": weights, "kv": "fp16"},
           "options": {"n_cpu_moe": n_cpu_moe}}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    run = subprocess.run(
        [sys.executable, "-m", "kvoffload", "predict", str(path), "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    mem = json.loads(run.stdout)["memory"]
    assert mem["gpu_bytes"] <= mem["gpu_capacity_bytes"]
    assert mem["cpu_bytes"] <= mem["cpu_capacity_bytes"]
    # whole layers on the CPU within the same GPU memory are slower
    moe = predict(parse_scenario(raw), check=False)
    sc = parse_scenario({**raw, "options": {"n_gpu_layers": 0}})
    n = sc.model.n_layers + 1
    best_layers = max(
        (predict(parse_scenario({**raw, "options": {"n_gpu_layers": k}}), check=False) for k in range(n + 1)),
        key=lambda p: (p.memory.gpu <= moe.memory.gpu, -p.tpot_s if p.memory.gpu <= moe.memory.gpu else 0),
    )  # fmt: skip
    assert best_layers.memory.gpu <= moe.memory.gpu
    assert moe.tpot_s < best_layers.tpot_s
