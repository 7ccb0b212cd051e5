/*
 * The calculator page (calculator.html): the model's figures put in the page as the reader types,
 * the memory bars, the chart's two curves, and the API the browser test drives (window.kvoCalc).
 * Runs after format.js, model.js, chart.js, llamacpp.js, reuse.js, form.js, scenario.js and
 * advice.js; its data is the page's JSON. The engine chosen (generic or llama.cpp) predicts.
 */
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("kvo-calc-data").textContent);
  const M = window.KvoModel.create(data);
  const RU = window.KvoReuse.create(data, M);
  const LC = window.KvoLlamacpp.create(data, M);
  const form = window.KvoForm.create(data, M);
  const advice = window.KvoAdvice.create(data, M, LC, RU, form);
  let bestText = "";
  const KvoScenario = window.KvoScenario;
  const { nf, formatMs, formatBytes } = window.KvoFormat;
  const $ = (id) => document.getElementById(id);

  // one output: the text a reader sees and the full-precision value the test reads
  function put(key, text, value) {
    const el = document.querySelector('[data-kvo-out="' + key + '"]');
    el.textContent = text;
    el.dataset.value = value === undefined ? text : String(value);
  }

  function clearOutputs(problems) {
    for (const el of document.querySelectorAll("[data-kvo-out]")) {
      el.textContent = "—";
      el.dataset.value = "";
    }
    const box = $("kvo-problems");
    box.replaceChildren();
    for (const p of problems) {
      const li = document.createElement("li");
      li.textContent = p;
      box.appendChild(li);
    }
    box.hidden = problems.length === 0;
    put("error", problems.join(" "), problems.join(" "));
    $("kvo-verdict").className = "kvo-verdict kvo-refused";
    $("kvo-summary").textContent = "Check the inputs: " + problems.length + (problems.length > 1 ? " problems" : " problem") + " below.";
    $("kvo-chart").replaceChildren();
    $("kvo-memory-bars").replaceChildren();
  }

  function memoryBars(result) {
    const box = $("kvo-memory-bars");
    box.replaceChildren();
    for (const [tier, need, have] of result.tiers) {
      const row = document.createElement("div");
      row.className = "kvo-bar-row";
      const label = document.createElement("span");
      label.className = "kvo-bar-label";
      label.textContent = tier;
      const track = document.createElement("span");
      track.className = "kvo-bar-track";
      const fill = document.createElement("span");
      fill.className = "kvo-bar-fill" + (need > have ? " kvo-over" : "");
      fill.style.width = Math.min(100, (100 * need) / have).toFixed(1) + "%";
      track.appendChild(fill);
      const text = document.createElement("span");
      text.className = "kvo-bar-text";
      text.textContent = formatBytes(need) + " of " + formatBytes(have);
      row.append(label, track, text);
      box.appendChild(row);
    }
  }

  function update() {
    const inp = form.readInputs();
    form.modelNote();
    const edited = inp.edited.length
      ? " with your figures (" + inp.edited.length + " changed)"
      : "";
    $("kvo-machine-note").textContent = inp.machineName + edited + ".";
    $("kvo-scenario").textContent = KvoScenario.text(inp);
    const reuse = form.readReuse(inp);
    if (inp.problems.length) {
      clearOutputs(inp.problems);
      $("kvo-reuse-scenario").textContent = "";
      return;
    }
    $("kvo-problems").hidden = true;
    put("error", "", "");
    const setup = form.setupOf(inp);
    const predictAt = predictor(inp, setup);
    const r = predictAt(inp.prompt, false);
    const whole = predictAt(inp.prompt, true);
    const gpuFits = !whole.shortfalls.some(([tier]) => tier === "GPU memory");
    put(
      "no_offload",
      gpuFits
        ? "Fits on the GPU: no offload flags needed" + (inp.engine === "llamacpp" ? " (-ngl all, every expert on the GPU)." : ".")
        : "Does not fit on the GPU whole: something must be offloaded.",
      gpuFits ? "yes" : "no"
    );
    put(
      "command",
      inp.engine === "llamacpp"
        ? LC.command(inp, inp.llamacpp)
        : "The generic engine is the step model, not a program: choose llama.cpp for its command line."
    );
    put("best", bestText);
    put("tpot_ms", formatMs(r.tpot), r.tpot * 1e3);
    put("ttft_ms", formatMs(r.ttft), r.ttft * 1e3);
    const rate = inp.batch / r.tpot;
    put("decode_tokens_per_s", nf(3).format(rate) + " tokens/s", rate);
    const through = (inp.batch * inp.generate) / (r.ttft + inp.generate * r.tpot);
    put("throughput_tokens_per_s", nf(3).format(through) + " tokens/s", through);
    for (const mode of M.modes) {
      const t = r.byOverlap[mode];
      if (t === undefined) put("tpot_" + mode + "_ms", "— (llama.cpp runs in order)", "");
      else put("tpot_" + mode + "_ms", formatMs(t), t * 1e3);
    }
    for (const key of M.streams) put("stream_" + key + "_ms", formatMs(r.streams[key]), r.streams[key] * 1e3);
    for (const row of document.querySelectorAll("[data-kvo-stream]")) {
      row.classList.toggle("kvo-bottleneck", row.dataset.kvoStream === r.bottleneck);
    }
    put("bottleneck", r.bottleneckName);
    const mem = r.memory;
    put("memory_gpu_bytes", formatBytes(mem.gpu), mem.gpu);
    put("memory_cpu_bytes", formatBytes(mem.cpu), mem.cpu);
    put("memory_disk_bytes", formatBytes(mem.disk), mem.disk);
    put("memory_staging_bytes", formatBytes(mem.staging), mem.staging);
    put("memory_weights_gpu_bytes", formatBytes(mem.weightsGpu), mem.weightsGpu);
    put("memory_kv_gpu_bytes", formatBytes(mem.kvGpu), mem.kvGpu);
    put("gpu_capacity_bytes", formatBytes(inp.figures.gpu_memory), inp.figures.gpu_memory);
    put("cpu_capacity_bytes", formatBytes(inp.figures.host_memory), inp.figures.host_memory);
    const disk = inp.figures.disk_capacity;
    put("disk_capacity_bytes", disk === null ? "not bounded" : formatBytes(disk), disk === null ? "" : disk);
    const fits = r.shortfalls.length === 0;
    put("fits", fits ? "yes" : "no");
    const within = r.tpot * 1e3 <= inp.budget;
    const verdict = fits
      ? "Fits. " + formatMs(r.tpot) + " per token: " + (within ? "within" : "over") +
        " the " + nf(4).format(inp.budget) + " ms budget; " + r.bottleneckName +
        " is the bottleneck."
      : "Does not fit: " +
        r.shortfalls
          .map(([tier, need, have]) => tier + " needs " + formatBytes(need) + " but has " + formatBytes(have))
          .join("; ") + ".";
    put("verdict", verdict);
    $("kvo-verdict").className = "kvo-verdict " + (fits ? (within ? "kvo-good" : "kvo-slow") : "kvo-refused");
    $("kvo-summary").textContent =
      "TPOT " + formatMs(r.tpot) + " · TTFT " + formatMs(r.ttft) + " · " + (fits ? "fits" : "does not fit") +
      " · bound by " + r.bottleneckName;
    memoryBars(r);
    chartLater(inp, predictAt, r);
    updateReuse(inp, reuse);
  }

  // The reuse question: TTFT with the hit and recomputed on the rule's engine, the break-even
  // prompt, and the sessions the host tier holds (one session: the context and its answer)
  function updateReuse(inp, reuse) {
    const keys = ["reuse_ttft_ms", "reuse_recompute_ms", "reuse_hit_tokens", "reuse_load_ms",
      "reuse_break_even_tokens", "reuse_sessions"];
    for (const key of keys) put(key, "—", "");
    $("kvo-reuse-results").hidden = reuse.rule === null;
    put("reuse_error", reuse.problems.join(" "));
    const box = $("kvo-reuse-problems");
    box.textContent = reuse.problems.join(" ");
    box.hidden = reuse.problems.length === 0;
    $("kvo-reuse-scenario").textContent = "";
    if (reuse.rule === null || reuse.problems.length) return;
    const rule = reuse.rule.reload;
    const weightsGib = (inp.weights.cpu * M.stepWeightBytes(M.layers(inp.model, inp.weightsFormat))) / data.reuse.gib;
    $("kvo-reuse-scenario").textContent = KvoScenario.reuseText(inp, reuse, weightsGib);
    const setup = RU.vllmSetup(form.setupOf(inp), weightsGib);
    const hit = RU.ttftWithPrefix(setup, inp.prompt, reuse.cached, reuse.tier, rule, inp.batch);
    // vLLM's own recomputed prefill (its later chunks read the offloaded weights again), and
    // prefix_cache.apply: the hit scaled by it; with no whole block cached, the recomputed one
    const recompute = hit.recompute + RU.chunkReads(setup, inp.prompt, inp.batch, inp.gpu.name);
    const scale = hit.recompute > 0 ? recompute / hit.recompute : 1;
    const ttft = hit.hitTokens ? hit.ttft * scale : recompute;
    put("reuse_ttft_ms", formatMs(ttft), ttft * 1e3);
    put("reuse_recompute_ms", formatMs(recompute), recompute * 1e3);
    put("reuse_hit_tokens", hit.hitTokens.toLocaleString("en-US") + " tokens", hit.hitTokens);
    put("reuse_load_ms", formatMs(hit.load * scale), hit.load * scale * 1e3);
    const grid = reuse.rule.break_even_grid;
    const even = RU.breakEvenPrompt(setup, reuse.tier, rule, inp.batch, grid);
    put(
      "reuse_break_even_tokens",
      even ? even.toLocaleString("en-US") + " tokens" : "never, up to " + grid[grid.length - 1].toLocaleString("en-US") + " tokens",
      even
    );
    const host = reuse.hostGib * data.reuse.gib;
    const sessions = RU.sessionsThatFit(setup, host, inp.prompt + inp.generate);
    put("reuse_sessions", sessions.toLocaleString("en-US") + " in " + nf(4).format(reuse.hostGib) + " GiB", sessions);
  }

  // TPOT against the context for the reader's placement and for everything on the GPU; a
  // curve is dashed where that placement does not fit the machine
  // the chosen engine's prediction at a prompt length: the reader's placement, or everything on
  // the GPU (llama.cpp: its default options)
  function predictor(inp, setup) {
    if (inp.engine === "llamacpp") {
      return (prompt, whole) => LC.predict(Object.assign({}, inp, { prompt: prompt }), whole ? {} : inp.llamacpp);
    }
    const onGpu = form.setupOf(inp, {
      weights: { gpu: 1, cpu: 0, disk: 0 },
      kv: { gpu: 1, cpu: 0, disk: 0 },
    });
    return (prompt, whole) => M.predictSetup(whole ? onGpu : setup, prompt, inp.generate, inp.batch);
  }

  // the chart (80 predictions and an SVG) is drawn once a frame at most, for the latest inputs:
  // a burst of input events recomputes the figures each time and the curves once
  let chartInputs = null;
  function chartLater(inp, predictAt, current) {
    const queued = chartInputs !== null;
    chartInputs = [inp, predictAt, current];
    if (queued) return;
    window.requestAnimationFrame(() => {
      const [i, p, c] = chartInputs;
      chartInputs = null;
      drawChart(i, p, c);
    });
  }

  function drawChart(inp, predictAt, current) {
    const limit =
      inp.model.max_positions === null ? Math.max(1048576, inp.prompt + inp.generate) : inp.model.max_positions;
    const hi = Math.max(2, limit - inp.generate);
    const lo = Math.max(1, Math.min(1024, inp.prompt, Math.floor(hi / 4)));
    const xs = window.KvoChart.contexts(lo, hi, 40);
    const series = [
      { name: "your placement", whole: false, cls: "kvo-line-a" },
      { name: "everything on the GPU", whole: true, cls: "kvo-line-b" },
    ].map((sr) => ({
      ...sr,
      points: xs.map((x) => {
        const r = predictAt(x, sr.whole);
        return { x: x, y: r.tpot * 1e3, fits: r.shortfalls.length === 0 };
      }),
    }));
    window.KvoChart.draw($("kvo-chart"), {
      lo: lo,
      hi: hi,
      series: series,
      budget: inp.budget,
      markers: [{ x: inp.prompt, y: current.tpot * 1e3 }],
    });
    const legend = $("kvo-chart-legend");
    legend.textContent =
      "A curve is dashed where its placement does not fit the machine; the dot is your context. " +
      (series[0].points.every((p, i) => Math.abs(p.y - series[1].points[i].y) <= 1e-9 * p.y)
        ? "The two curves coincide: your placement keeps everything on the GPU."
        : "");
  }

  // ------------------------------------------------------------------- the API --------------

  // What the test drives: set the page's inputs as a reader would, then read what it shows.
  function set(inputs) {
    bestText = "";
    form.fill(inputs);
    return read();
  }

  // the best-placement button: advise's search for the inputs, put in the form when it is llama.cpp's
  function best() {
    const inp = form.readInputs();
    if (inp.problems.length) return null;
    const got = advice.best(inp);
    bestText = got.text;
    update();
    return got.row;
  }

  function read() {
    const out = {};
    for (const el of document.querySelectorAll("[data-kvo-out]")) out[el.dataset.kvoOut] = el.dataset.value;
    out.scenario = $("kvo-scenario").textContent;
    out.reuse_scenario = $("kvo-reuse-scenario").textContent;
    return out;
  }

  form.setupControls();
  const changed = (event) => {
    if (event.target.id === "kvo-machine") form.fillFigures();
    if (["kvo-engine", "kvo-model"].includes(event.target.id)) form.formatOptions();
    if (event.target.id !== "kvo-best") bestText = "";
    update();
  };
  form.form.addEventListener("input", changed);
  form.form.addEventListener("change", changed);
  $("kvo-best").addEventListener("click", best);
  $("kvo-reset").addEventListener("click", () => {
    form.fillFigures();
    update();
  });
  let resized = null;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(update, 100);
  });
  form.form.addEventListener("submit", (event) => event.preventDefault());
  update();
  window.kvoCalc = { set: set, read: read, best: best, data: data };
})();
