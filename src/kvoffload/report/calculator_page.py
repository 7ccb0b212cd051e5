"""The offline calculator page: one HTML file, its script and stylesheet, the model's data inline.

The page (``calculator.html`` at the site's root) evaluates the generic engine's step model in the
browser with ``calculator/model.js`` (every function mirrors one in ``kvoffload.model``), and
llama.cpp's placement with ``calculator/llamacpp.js``, over the
JSON ``studies.calculator_data`` exports; the page's other modules (``CALCULATOR_MODULES``) are
joined after it, in order, into its one script. It loads nothing from another host and needs no
server: it works from ``file://``.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from kvoffload.studies import calculator_data

PAGE = "calculator.html"
SCRIPT = "_static/calculator/calculator.js"
STYLE = "_static/calculator/calculator.css"

_OVERLAP = {
    "none": "none: every stream of every layer in turn",
    "pipeline": "pipeline: layer i computes while the link loads layer i+1",
    "flexgen": "flexgen: FlexGen's cost model (the load, then the longest of the rest)",
    "perfect": "perfect: every resource back to back (the lower bound)",
}


# the browser modules under report/calculator/, in the order they run: each defines one global
MODEL_MODULES = ("format.js", "model.js", "chart.js")  # the step model and its chart: shared
CALCULATOR_MODULES = (
    *MODEL_MODULES,
    "llamacpp.js",
    "reuse.js",
    "form.js",
    "scenario.js",
    "advice.js",
    "ui.js",
)
# where the cached blocks are when the request arrives (model/reuse.py's TIERS)
_TIER_NAMES = {"gpu": "GPU memory (still there)", "cpu": "host memory", "disk": "disk"}


def _asset(name: str) -> str:
    return resources.files("kvoffload.report").joinpath(name).read_text(encoding="utf-8")


def modules_script(names: tuple[str, ...]) -> str:
    """Return the report/calculator/ modules ``names`` joined, in order, as one script's text."""
    return "\n".join(_asset(f"calculator/{name}") for name in names)


def script_json(data: dict[str, Any]) -> str:
    """Return ``data`` as JSON safe inside a <script> element (no '<', '>' or '&' left)."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _number_field(ident: str, label: str, value: str, *, note: str = "") -> str:
    hint = f'<span class="kvo-hint">{escape(note)}</span>' if note else ""
    return (
        f'<label class="kvo-field"><span>{escape(label)}</span>'
        f'<input id="{ident}" type="text" inputmode="decimal" autocomplete="off" '
        f'value="{escape(value)}">{hint}</label>'
    )


# llama.cpp's --numa, as engines/each/llamacpp/options.py takes it ("": no policy)
NUMA_CHOICES = {"": "none", "distribute": "distribute", "isolate": "isolate", "numactl": "numactl"}


def _select(ident: str, label: str, options: dict[str, str] | None = None) -> str:
    opts = "".join(
        f'<option value="{escape(k)}">{escape(v)}</option>' for k, v in (options or {}).items()
    )
    return (
        f'<label class="kvo-field"><span>{escape(label)}</span>'
        f'<select id="{ident}">{opts}</select></label>'
    )


def _split(group: str, label: str, cpu: str) -> str:
    return (
        f'<div class="kvo-split"><span class="kvo-split-title">{escape(label)}</span>'
        + _number_field(f"kvo-{group}-cpu", "in host memory (%)", cpu)
        + _number_field(f"kvo-{group}-disk", "on disk (%)", "0")
        + f'<p class="kvo-split-gpu">on the GPU: <output id="kvo-{group}-gpu"></output></p></div>'
    )


def _out(key: str, tag: str = "span") -> str:
    return f'<{tag} data-kvo-out="{escape(key)}"></{tag}>'


def _reuse_fieldset(data: dict[str, Any]) -> str:
    """Return the form's reuse question: the engine's rule, the cached tokens, their tier."""
    r = data["reuse"]
    rules = {"off": "off: leave the question out", **{x["key"]: x["label"] for x in r["rules"]}}
    tiers = {t: _TIER_NAMES.get(t, t) for t in r["tiers"]}
    first = r["rules"][0]["reload"]
    return f"""
  <fieldset>
    <legend>Prefix reuse</legend>
    {_select("kvo-reuse-rule", "Engine's prefix cache", rules)}
    <p class="kvo-note">vLLM's native connector: hits are whole blocks of {first["block_tokens"]}
    tokens, one DMA copy per block spanning every layer, loaded before the request's prefill plus
    one scheduler step per hit. vLLM places the rest itself: the weights' host share as
    <code>cpu_offload_gb</code>, the KV on the GPU.</p>
    <div class="kvo-grid2">
      {_number_field("kvo-reuse-cached", "Cached prompt tokens", "120000")}
      {_select("kvo-reuse-tier", "Where they are", tiers)}
      {_number_field("kvo-reuse-host", "Host memory for the cache (GiB)", "32")}
    </div>
  </fieldset>"""


def _reuse_results() -> str:
    """Return the results' reuse section: TTFT with the hit and without, break-even, sessions."""
    return f"""
  <div id="kvo-reuse-results">
  <h2>Prefix reuse</h2>
  <p id="kvo-reuse-problems" class="kvo-problems" hidden></p>
  <span class="kvo-visually-hidden">{_out("reuse_error")}</span>
  <table class="kvo-table"><tbody>
    <tr><th scope="row">TTFT with the hit</th><td class="kvo-num">{_out("reuse_ttft_ms")}</td></tr>
    <tr><th scope="row">TTFT recomputed</th><td class="kvo-num">{_out("reuse_recompute_ms")}</td></tr>
    <tr class="kvo-sub"><th scope="row">tokens reloaded</th><td class="kvo-num">{_out("reuse_hit_tokens")}</td></tr>
    <tr class="kvo-sub"><th scope="row">reload time</th><td class="kvo-num">{_out("reuse_load_ms")}</td></tr>
    <tr><th scope="row">Break-even prompt</th><td class="kvo-num">{_out("reuse_break_even_tokens")}</td></tr>
    <tr><th scope="row">Sessions the host cache holds</th><td class="kvo-num">{_out("reuse_sessions")}</td></tr>
  </tbody></table>
  <p class="kvo-note">TTFT of the batch on the engine's own placement, so the recomputed TTFT
  may differ from the one above. Break-even: the shortest prompt, cached but for its last block,
  whose reload beats recomputing it. A session keeps the KV of its context and its answer.</p>
  </div>"""


def page_html(data: dict[str, Any]) -> str:
    """Return the calculator page for ``data`` (calculator_data.calculator_data()), escaped."""
    names = data["stream_names"]
    streams = "".join(
        f'<tr data-kvo-stream="{escape(k)}"><th scope="row">{escape(names[k])}</th>'
        f'<td class="kvo-num">{_out(f"stream_{k}_ms")}</td></tr>'
        for k in data["streams"]
    )
    modes = "".join(
        f'<tr><th scope="row">{escape(m)}</th><td class="kvo-num">{_out(f"tpot_{m}_ms")}</td></tr>'
        for m in data["overlap_modes"]
    )
    overlap = {m: _OVERLAP.get(m, m) for m in data["overlap_modes"]}
    budget = f"{data['budget_ms']:g}"
    form = f"""
<form id="kvo-calc-form" class="kvo-form" autocomplete="off">
  <fieldset>
    <legend>Machine</legend>
    {_select("kvo-machine", "Catalog machine")}
    <p class="kvo-note" id="kvo-machine-note"></p>
    <div id="kvo-figures-main" class="kvo-grid2"></div>
    <details><summary>More figures</summary><div id="kvo-figures-more" class="kvo-grid2"></div></details>
    <p class="kvo-note">Type over any figure to use your own; a field left as shown keeps the
    machine's exact figure. Several GPUs: type their total memory (the step model runs the layers
    one GPU at a time).</p>
    <button type="button" id="kvo-reset">Use the machine's figures again</button>
  </fieldset>
  <fieldset>
    <legend>Model</legend>
    {_select("kvo-model", "Catalog model")}
    <p class="kvo-note" id="kvo-model-note"></p>
    <div class="kvo-grid2">
      {_select("kvo-weights-format", "Weight format")}
      {_select("kvo-kv-format", "KV cache format")}
    </div>
  </fieldset>
  <fieldset>
    <legend>Workload</legend>
    <div class="kvo-grid2">
      {_number_field("kvo-context", "Context (tokens: prompt and generated)", "128K", note="128K = 131,072 tokens; 1M = 1,048,576; or a count")}
      {_number_field("kvo-generate", "Tokens generated", "32")}
      {_number_field("kvo-batch", "Batch (requests)", "1")}
      {_number_field("kvo-budget", "TPOT budget (ms)", budget)}
    </div>
  </fieldset>
  <fieldset>
    <legend>Engine</legend>
    {_select("kvo-engine", "Engine")}
    <button type="button" id="kvo-best">Best placement that fits (kvoffload advise)</button>
    <p class="kvo-note" id="kvo-best-note">{_out("best")}</p>
  </fieldset>
  <fieldset id="kvo-llamacpp-placement" hidden>
    <legend>llama.cpp placement</legend>
    <div class="kvo-grid2">
      {_number_field("kvo-ngl", "Layers on the GPU (-ngl; blank: all)", "")}
      {_number_field("kvo-ncmoe", "Experts of the first N layers on the CPU (--n-cpu-moe)", "0")}
      {_number_field("kvo-threads", "CPU threads (-t; blank: the machine's)", "")}
      {_select("kvo-numa", "NUMA policy (--numa)", NUMA_CHOICES)}
    </div>
    <label class="kvo-check"><input type="checkbox" id="kvo-cpumoe">
      <span>Every routed expert on the CPU (--cpu-moe)</span></label>
    <label class="kvo-check"><input type="checkbox" id="kvo-nokv">
      <span>KV cache in host memory, attention on the CPU (--no-kv-offload)</span></label>
    <p class="kvo-note">-ngl puts the last N layers, the output layer counted, on the GPU; each
    layer's KV lives with it. Experts in host memory run on the CPU at its matvec rate for the
    format and threads, reading only the experts the batch routes to. On a machine of several
    sockets, --numa none leaves every page on one node (the far sockets read it across the socket
    link), distribute has each socket read its own DRAM, isolate keeps the threads on one socket
    and numactl interleaves the pages over every node.</p>
  </fieldset>
  <fieldset id="kvo-generic-placement">
    <legend>Placement</legend>
    {_split("weights", "Weights", "0")}
    {_split("kv", "KV cache", "100")}
    {_select("kvo-attention", "Attention over offloaded KV", {"gpu": "on the GPU: the KV crosses the link", "cpu": "on the CPU, where the KV lies"})}
    {_select("kvo-overlap", "Overlap", overlap)}
    <label class="kvo-check"><input type="checkbox" id="kvo-pinned" checked>
      <span>Pinned host buffers (unticked: copies run at the pageable rate)</span></label>
  </fieldset>
  {_reuse_fieldset(data)}
</form>"""
    results = f"""
<section class="kvo-results" aria-live="polite">
  <h2 class="kvo-visually-hidden">Results</h2>
  <p id="kvo-verdict" class="kvo-verdict">{_out("verdict")}</p>
  <p class="kvo-note">{_out("no_offload")}</p>
  <ul id="kvo-problems" class="kvo-problems" hidden></ul>
  <span class="kvo-visually-hidden">{_out("error")}</span>
  <dl class="kvo-headline">
    <div><dt>TPOT (time per output token)</dt><dd>{_out("tpot_ms")}</dd></div>
    <div><dt>Decode rate</dt><dd>{_out("decode_tokens_per_s")}</dd></div>
    <div><dt>TTFT (prefill of the batch)</dt><dd>{_out("ttft_ms")}</dd></div>
    <div><dt>Throughput, prefill included</dt><dd>{_out("throughput_tokens_per_s")}</dd></div>
    <div><dt>Fits the machine</dt><dd>{_out("fits")}</dd></div>
    <div><dt>Bottleneck</dt><dd>{_out("bottleneck")}</dd></div>
  </dl>
  <figure class="kvo-figure">
    <div id="kvo-chart" class="kvo-chart"></div>
    <figcaption><strong>Figure 1.</strong> TPOT against the context, both on log scales, for the
    same model, formats, batch and overlap. Look at where your placement's curve crosses the
    budget line. <span id="kvo-chart-legend"></span></figcaption>
  </figure>
  <h2>Memory per tier</h2>
  <div id="kvo-memory-bars" class="kvo-bars"></div>
  <table class="kvo-table">
    <thead><tr><th scope="col">tier</th><th scope="col" class="kvo-num">holds</th><th scope="col" class="kvo-num">capacity</th></tr></thead>
    <tbody>
      <tr><th scope="row">GPU memory</th><td class="kvo-num">{_out("memory_gpu_bytes")}</td><td class="kvo-num">{_out("gpu_capacity_bytes")}</td></tr>
      <tr class="kvo-sub"><th scope="row">of which weights</th><td class="kvo-num">{_out("memory_weights_gpu_bytes")}</td><td></td></tr>
      <tr class="kvo-sub"><th scope="row">of which KV cache</th><td class="kvo-num">{_out("memory_kv_gpu_bytes")}</td><td></td></tr>
      <tr class="kvo-sub"><th scope="row">of which staging buffers</th><td class="kvo-num">{_out("memory_staging_bytes")}</td><td></td></tr>
      <tr><th scope="row">host memory</th><td class="kvo-num">{_out("memory_cpu_bytes")}</td><td class="kvo-num">{_out("cpu_capacity_bytes")}</td></tr>
      <tr><th scope="row">disk</th><td class="kvo-num">{_out("memory_disk_bytes")}</td><td class="kvo-num">{_out("disk_capacity_bytes")}</td></tr>
    </tbody>
  </table>
  <h2>One decode step, stream by stream</h2>
  <p class="kvo-note">Each stream's work per step (the mean over the generated tokens); the
  bottleneck is highlighted. The overlap mode decides how they add up.</p>
  <table class="kvo-table"><tbody>{streams}</tbody></table>
  <h2>TPOT under each overlap mode</h2>
  <table class="kvo-table"><tbody>{modes}</tbody></table>
  {_reuse_results()}
  <details class="kvo-scenario-box">
    <summary>The same scenario for <code>kvoffload predict</code></summary>
    <p class="kvo-note">Save it as <code>scenario.yaml</code> and run
    <code>kvoffload predict scenario.yaml --json</code>: the package gives the same figures.</p>
    <pre id="kvo-scenario"></pre>
    <p class="kvo-note">The command that runs it:</p>
    <pre id="kvo-command">{_out("command")}</pre>
    <p class="kvo-note">The reuse question, on its engine's prefix cache (its own placement):</p>
    <pre id="kvo-reuse-scenario"></pre>
  </details>
</section>"""
    about = """
<section class="kvo-about">
  <h2>What it computes, and what it leaves out</h2>
  <p>This is the step model of the package's <code>generic</code> engine
  (<code>src/kvoffload/model/decode.py</code>), run in your browser: each layer's GPU roofline,
  the host→GPU and GPU→host copies, CPU attention over host-resident KV, and disk reads and
  writes, combined by the overlap mode; TPOT is the mean step over the generated tokens; TTFT the
  prefill of the whole batch; memory what each tier holds at the end of generation, with the
  GPU's staging buffers. A test holds every figure on this page to the Python package at a
  thousand random points.</p>
  <p>The llama.cpp engine is <code>src/kvoffload/engines/each/llamacpp.py</code>'s rules:
  <code>-ngl</code> puts the last layers and the output layer on the GPU, each layer's KV with
  it; <code>--n-cpu-moe</code> and <code>--cpu-moe</code> keep routed experts in host memory,
  computed on the CPU at its matvec rate for the format and threads; each hand-over between the
  devices costs a synchronisation; weights past host memory are paged from disk (mmap). A test
  holds it to <code>kvoffload predict</code> at two hundred random points. The best placement
  runs <code>kvoffload advise --model all</code>'s search on this page, for your figures, model,
  context and batch: llama.cpp's <code>-ngl</code>, <code>--n-cpu-moe</code>,
  <code>-ot exps=CPU</code> and <code>--no-kv-offload</code> on the llama.cpp engine above, each
  also with <code>--numa distribute</code> on a machine of several sockets, and
  vLLM's <code>--cpu-offload-gb</code> on the step model with vLLM's placement (weights read over
  the link as its kernels run, pinned; a tenth of the GPU left to others). A test holds it to
  <code>kvoffload advise</code> for two hundred random machines, models and contexts.</p>
  <p>Left out, because the page cannot express them: on the generic engine, weights placed
  tensor group by tensor group (<code>compute: cpu</code>); llama.cpp's <code>-ot</code> rules
  and <code>--no-mmap</code>; a MoE router's measured skew and expert caches
  (routing here is uniform), several GPUs as separate devices, and the engines that place things
  by their own rules (vLLM, FlexGen, ZeRO-Inference, Accelerate, InfLLM). For those, write a
  scenario file and run <code>kvoffload predict</code>.</p>
  <p>The reuse question is the one exception: it runs on vLLM's own prefix cache and placement
  (<code>src/kvoffload/model/reuse.py</code> with the rule <code>engines/each/vllm.py</code>
  builds), and prints its own scenario; a test holds it to the package at two hundred random
  points.</p>
</section>"""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Offload calculator: TPOT, TTFT and memory for your machine (kvoffload)</title>
<link rel="stylesheet" href="{STYLE}">
</head>
<body>
<header class="kvo-top">
  <a href="index.html">kvoffload: what KV-cache offload really costs</a>
  <nav><a href="book/intro.html">Introduction</a></nav>
</header>
<main class="kvo-main">
<h1>Offload calculator</h1>
<p class="kvo-lede">Choose a machine (or type your own figures), a model, formats, a context, a
batch and where the weights and the KV cache live: the time per output token, the prefill,
the memory each tier needs and the bottleneck update as you type. Everything runs in this
page, with no server and no network.</p>
<div class="kvo-layout">
<p id="kvo-summary" class="kvo-summary" aria-hidden="true"></p>
{form}
{results}
</div>
{about}
</main>
<script type="application/json" id="kvo-calc-data">{script_json(data)}</script>
<script src="{SCRIPT}"></script>
</body>
</html>
"""


def site_files(data: dict[str, Any] | None = None) -> dict[str, bytes]:
    """Return the calculator's files by their path under the site's root."""
    page = page_html(calculator_data.calculator_data() if data is None else data)
    return {
        PAGE: page.encode("utf-8"),
        SCRIPT: modules_script(CALCULATOR_MODULES).encode("utf-8"),
        STYLE: _asset("calculator.css").encode("utf-8"),
    }


def write_files(root: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` under ``root``; return the calculator page's path."""
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return root / PAGE
