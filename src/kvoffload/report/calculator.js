/*
 * kvoffload's offline calculator: the generic engine's step model, evaluated in the browser.
 *
 * The numbers come from the JSON the page carries (studies/calculator_data.py); the formulas
 * below mirror, one function each, the Python functions named beside them in
 * src/kvoffload/model/ (decode.py, kv.py, transfer.py, routing.py, capacity.py, prediction.py).
 * tests/test_browser_calculator.py holds every figure this page shows to the package's
 * prediction at a thousand random points. No network, no server: open the file and it runs.
 */
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("kvo-calc-data").textContent);
  const STREAMS = DATA.streams;
  const MODES = DATA.overlap_modes;

  // ---------------------------------------------------------------- the model (mirrors) ------

  const layerCache = new Map();

  // decode.layers: the model's layer classes for a weight format (windows: null = full attention),
  // with the order expanded and the pipeline's stages counted once (decode._pipeline's Counter)
  function layers(model, weightsFormat) {
    const key = model.id + "/" + weightsFormat;
    if (layerCache.has(key)) return layerCache.get(key);
    const raw = model.layers[weightsFormat];
    const order = [];
    for (const [cls, run] of raw.order) for (let i = 0; i < run; i++) order.push(cls);
    const lay = Object.assign({}, raw, {
      order: order,
      window: raw.window.map((w) => (w === null ? Infinity : w)),
      stages: pipelineStages(order),
    });
    layerCache.set(key, lay);
    return lay;
  }

  function dot(values, count) {
    let total = 0;
    for (let i = 0; i < count.length; i++) total += values[i] * count[i];
    return total;
  }

  // routing.touched_share with uniform routing (effective=None): the share of a layer's routed
  // experts' bytes a step reads for b tokens
  function touchedShare(n, k, b) {
    const pool = Math.max(n, k);
    return (pool * (1 - Math.pow(1 - k / pool, b))) / n;
  }

  // decode.weight_traffic, for whole-model weight shares (no tensor groups, experts streamed whole)
  function weightTraffic(setup, lay, b) {
    const w = setup.weights;
    const [k, n] = setup.model.expert_use;
    const active = touchedShare(n, k, b);
    const off = w.cpu + w.disk;
    return lay.weight_bytes.map((bytes, i) => ({
      gpuBytes: bytes - lay.expert_bytes[i] + lay.expert_bytes[i] * active,
      gpuFlops: b * lay.dense_flops[i],
      moved: bytes * off,
      fromDisk: bytes * w.disk,
    }));
  }

  // System.link_rate: the link's achievable rate, pinned or pageable
  function linkRate(m, direction, pinned) {
    const rate = direction === "h2d" ? m.h2d : m.d2h;
    return pinned ? rate : Math.min(m.pageable, rate);
  }

  // System.copy_rate: the link or host DRAM, whichever is slower
  function copyRate(m, direction, pinned) {
    return Math.min(linkRate(m, direction, pinned), m.host_bandwidth);
  }

  // transfer.link_time: latency per copy plus bytes over the copy rate
  function linkTime(m, bytes, direction, transfers, pinned) {
    return m.link_latency * transfers + bytes / copyRate(m, direction, pinned);
  }

  // decode._kv_token_bytes: one attention layer's bytes per token in the KV format
  function kvTokenBytes(setup) {
    return setup.model.kv_token_bytes[setup.kvFormat];
  }

  // decode.stream_times: each stream's seconds per layer class at context s for b requests
  function streamTimes(setup, s, b) {
    const m = setup.machine;
    const lay = setup.lay;
    const c = setup.kv;
    const cOff = c.cpu + c.disk;
    const gpuAttends = setup.attention === "gpu";
    const svb = DATA.state_value_bytes[setup.kvFormat];
    const token = kvTokenBytes(setup);
    const wt = weightTraffic(setup, lay, b);
    const kvOnGpuShare = gpuAttends ? 1 : c.gpu;
    const out = {};
    for (const key of STREAMS) out[key] = [];
    for (let i = 0; i < lay.count.length; i++) {
      const kvb = lay.kv_per_token[i] * token;
      const held = Math.min(s, lay.window[i]);
      const state = b * lay.state_values[i] * svb;
      const kvLayer = b * held * kvb + state;
      const newKv = b * kvb + (gpuAttends ? state : 0);
      const gpuFlops = wt[i].gpuFlops + b * lay.attn_flops[i] * held * kvOnGpuShare;
      const kvRw = kvLayer + state;
      const gpu = Math.max(
        wt[i].gpuBytes / m.gpu_bandwidth + (kvRw * kvOnGpuShare) / m.attention_bandwidth,
        gpuFlops / m.gpu_flops
      );
      let cpu = 0;
      if (!(gpuAttends || cOff === 0)) {
        cpu = Math.max(
          (kvLayer * cOff) / m.host_bandwidth,
          (b * lay.attn_flops[i] * held * cOff) / m.host_flops
        );
      }
      const moved = wt[i].moved;
      const kvIn = gpuAttends ? kvLayer * cOff : 0;
      const cpuAttends = !gpuAttends && cOff > 0;
      const qo = cpuAttends && lay.attn_flops[i] > 0 && cOff > 0 ? (b * setup.model.qo_bytes) / 2 : 0;
      const h2dBytes = moved + kvIn + qo;
      const d2hBytes = newKv * cOff + qo;
      // copies paying the link's latency, one per kind of copy (decode.stream_times' n_in, n_out)
      const nIn = Number(moved > 0) + Number(kvIn > 0) + Number(qo > 0);
      const nOut = Number(newKv * cOff > 0) + Number(qo > 0);
      const readBytes = wt[i].fromDisk + kvLayer * c.disk;
      const writeBytes = newKv * c.disk;
      out.gpu.push(gpu);
      out.cpu.push(cpu);
      out.h2d.push(linkTime(m, h2dBytes, "h2d", nIn, setup.pinned));
      out.d2h.push(linkTime(m, d2hBytes, "d2h", nOut, setup.pinned));
      out.disk_read.push(readBytes / m.disk_read + (readBytes > 0) * m.disk_latency);
      out.disk_write.push(writeBytes / m.disk_write);
    }
    return out;
  }

  // the Counter of decode._pipeline: which layer each of the five resources works on per stage
  function pipelineStages(order) {
    const n = order.length;
    const R = 5;
    const counts = new Map();
    for (let k = 0; k < n + R - 1; k++) {
      const tuple = [];
      for (let r = 0; r < R; r++) tuple.push(k - r >= 0 && k - r < n ? order[k - r] : -1);
      const key = tuple.join(",");
      const seen = counts.get(key);
      if (seen) seen.times += 1;
      else counts.set(key, { layers: tuple, times: 1 });
    }
    return Array.from(counts.values());
  }

  // decode._pipeline: disk reads layer i+2, the link loads i+1, i computes, i-1 and i-2 store
  function pipeline(diskIn, linkIn, comp, linkOut, diskOut, stages) {
    const work = [diskIn, linkIn, comp, linkOut, diskOut];
    let total = 0;
    for (const { layers: inStage, times } of stages) {
      let stage = 0;
      for (let r = 0; r < work.length; r++) {
        if (inStage[r] >= 0) stage = Math.max(stage, work[r][inStage[r]]);
      }
      total += times * stage;
    }
    return total;
  }

  // decode.combine: the step time from per-class stream times under one overlap mode
  function combine(streams, lay, overlap) {
    const cnt = lay.count;
    const classes = cnt.length;
    if (overlap === "none") {
      const per = [];
      for (let i = 0; i < classes; i++) {
        let sum = 0;
        for (const key of STREAMS) sum += streams[key][i];
        per.push(sum);
      }
      return dot(per, cnt);
    }
    if (overlap === "perfect") return Math.max(...STREAMS.map((key) => dot(streams[key], cnt)));
    if (overlap === "flexgen") {
      const per = [];
      for (let i = 0; i < classes; i++) {
        per.push(
          streams.h2d[i] +
            Math.max(
              streams.d2h[i],
              streams.disk_read[i],
              streams.disk_write[i],
              streams.gpu[i] + streams.cpu[i]
            )
        );
      }
      return dot(per, cnt);
    }
    if (overlap === "pipeline") {
      const comp = streams.gpu.map((g, i) => g + streams.cpu[i]);
      return pipeline(streams.disk_read, streams.h2d, comp, streams.d2h, streams.disk_write, lay.stages);
    }
    throw new Error("unknown overlap mode " + overlap);
  }

  // decode.token_mean: the exact mean of the step quantities over the contexts prompt, ...,
  // prompt + generate - 1. Between 0 and the windows each quantity is convex and piecewise linear
  // in the context, so an interval whose midpoint lies on the chord is linear and its mean is the
  // chord's; an interval with a kink is halved until every piece is linear or short.
  function tokenMean(fn, prompt, generate, windows) {
    const total = fn(prompt).map(() => 0);
    const add = (values, weight) => values.forEach((v, k) => (total[k] += v * weight));
    const linear = (a, m, b) =>
      a.every((v, k) => {
        const chord = (v + b[k]) / 2;
        return Math.abs(m[k] - chord) <= 1e-12 * Math.max(Math.abs(v), Math.abs(b[k]), Math.abs(m[k]), 1e-300);
      });
    function over(lo, hi, fLo, fHi) {
      // tokens lo..hi (offsets from prompt), inclusive
      const n = hi - lo + 1;
      if (n <= 4) {
        for (let t = lo; t <= hi; t++) add(t === lo ? fLo : t === hi ? fHi : fn(prompt + t), 1);
        return;
      }
      const fMid = fn(prompt + (lo + hi) / 2);
      if (linear(fLo, fMid, fHi)) {
        add(fLo.map((v, k) => (v + fHi[k]) / 2), n);
        return;
      }
      const mid = Math.floor((lo + hi) / 2);
      over(lo, mid, fLo, fn(prompt + mid));
      over(mid + 1, hi, fn(prompt + mid + 1), fHi);
    }
    // the segments: split where the context passes a window
    const cuts = [...new Set(windows.filter((w) => Number.isFinite(w) && w > 0))].sort((a, b) => a - b);
    let lo = 0;
    for (const w of [...cuts.map((c) => Math.floor(c - prompt)), generate - 1]) {
      const hi = Math.min(w, generate - 1);
      if (hi >= lo) {
        over(lo, hi, fn(prompt + lo), fn(prompt + hi));
        lo = hi + 1;
      }
    }
    return total.map((v) => v / generate);
  }

  // kv.request_bytes: one request's cache at context s (windows capped, recurrent state added)
  function requestBytes(setup, s) {
    const lay = setup.lay;
    const token = kvTokenBytes(setup);
    const svb = DATA.state_value_bytes[setup.kvFormat];
    let total = 0;
    for (let i = 0; i < lay.count.length; i++) {
      const held = Math.min(s, lay.window[i]);
      total += lay.count[i] * (held * lay.kv_per_token[i] * token + lay.state_values[i] * svb);
    }
    return total;
  }

  // decode._kv_total (kv.batch_bytes): the batch's KV bytes at context s
  function kvTotal(setup, s, b) {
    return b * requestBytes(setup, s);
  }

  // decode.step_weight_bytes: every layer's weights and the output head
  function stepWeightBytes(lay) {
    return dot(lay.weight_bytes, lay.count);
  }

  // decode.prefill_flops: matmuls plus causal attention over the prompt, windows respected
  function prefillFlops(model, prompt, batch) {
    const lay = layers(model, "bf16");
    let total = 0;
    for (let i = 0; i < lay.count.length; i++) {
      const wf = Math.min(lay.window[i], prompt);
      const capped = (wf * wf) / 2 + (prompt - wf) * wf;
      total += lay.count[i] * batch * (prompt * lay.dense_flops[i] + lay.attn_flops[i] * capped);
    }
    return total;
  }

  // decode.ttft: compute-bound prefill, offloaded weights streamed in, the prompt's offloaded KV out
  function ttft(setup, prompt, batch) {
    const m = setup.machine;
    const w = setup.weights;
    const c = setup.kv;
    const weights = stepWeightBytes(setup.lay);
    const total = kvTotal(setup, prompt, batch);
    const compute = Math.max(
      prefillFlops(setup.model, prompt, batch) / m.gpu_flops,
      weights / m.gpu_bandwidth
    );
    const rateIn = copyRate(m, "h2d", setup.pinned);
    const rateOut = copyRate(m, "d2h", setup.pinned);
    const wIn = (weights * (w.cpu + w.disk)) / rateIn + (weights * w.disk) / m.disk_read;
    const kvOut = (total * (c.cpu + c.disk)) / rateOut + (total * c.disk) / m.disk_write;
    if (setup.overlap === "none") return compute + wIn + kvOut;
    return Math.max(compute, Math.max(wIn, kvOut));
  }

  // working_memory.prefill_working_bytes (chunked, fused kernel): rows a pass holds x bytes a row
  function prefillWorkingBytes(model, prompt, batch) {
    return Math.min(batch * prompt, DATA.chunk_tokens) * model.working_row_bytes;
  }

  // decode.memory: what each tier holds at the end of generation, staging buffers included
  function memory(setup, context, batch) {
    const lay = setup.lay;
    const w = setup.weights;
    const c = setup.kv;
    const total = kvTotal(setup, context, batch);
    const weights = lay.resident_bytes;
    const token = kvTokenBytes(setup);
    const wOff = w.cpu + w.disk;
    const cOff = c.cpu + c.disk;
    let staged = 0;
    let weightsStaged = 0;
    for (let i = 0; i < lay.count.length; i++) {
      const wi = lay.weight_bytes[i] * wOff;
      const kvi =
        setup.attention === "gpu"
          ? batch * Math.min(context, lay.window[i]) * lay.kv_per_token[i] * token * cOff
          : 0;
      staged = Math.max(staged, wi + kvi);
      weightsStaged = Math.max(weightsStaged, wi);
    }
    const buffers = setup.overlap === "none" ? 1 : 2;
    const working = prefillWorkingBytes(setup.model, context, batch);
    const staging = Math.max(buffers * staged, buffers * weightsStaged + working);
    return {
      gpu: weights * w.gpu + total * c.gpu + staging,
      cpu: weights * w.cpu + total * c.cpu,
      disk: weights * w.disk + total * c.disk,
      staging: staging,
      weightsGpu: weights * w.gpu,
      kvGpu: total * c.gpu,
    };
  }

  // capacity.tiers: (tier, bytes needed, bytes there) for every tier the machine bounds
  function capacityTiers(m, mem) {
    const out = [
      ["GPU memory", mem.gpu, m.gpu_memory],
      ["host memory", mem.cpu, m.host_memory],
    ];
    if (m.disk_capacity !== null) out.push(["disk", mem.disk, m.disk_capacity]);
    return out;
  }

  // prediction.predict_setup: TPOT (mean over the generated tokens), TTFT, streams, memory
  function predictSetup(setup, prompt, generate, batch) {
    const mem = memory(setup, prompt + generate, batch);
    const mean = tokenMean(
      (s) => {
        const per = streamTimes(setup, s, batch);
        return [
          ...STREAMS.map((key) => dot(per[key], setup.lay.count)),
          ...MODES.map((mode) => combine(per, setup.lay, mode)),
        ];
      },
      prompt,
      generate,
      setup.lay.window,
    );
    const streams = {};
    STREAMS.forEach((key, k) => (streams[key] = mean[k]));
    const byOverlap = {};
    MODES.forEach((mode, k) => (byOverlap[mode] = mean[STREAMS.length + k]));
    // Prediction.bottleneck: the stream with the most work per step (the first, on a tie)
    let bottleneck = STREAMS[0];
    for (const key of STREAMS) if (streams[key] > streams[bottleneck]) bottleneck = key;
    const tiers = capacityTiers(setup.machine, mem);
    return {
      tpot: byOverlap[setup.overlap],
      ttft: ttft(setup, prompt, batch),
      streams: streams,
      byOverlap: byOverlap,
      bottleneck: bottleneck,
      memory: mem,
      tiers: tiers,
      // prediction.shortfalls: the tiers the memory overflows
      shortfalls: tiers.filter(([, need, have]) => !(need <= have)),
    };
  }

  // ------------------------------------------------------------------- inputs ---------------

  const $ = (id) => document.getElementById(id);
  const form = $("kvo-calc-form");
  const FIGURES = DATA.figures;

  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    select.appendChild(o);
  }

  function shortNumber(x) {
    return String(Number(x.toPrecision(4)));
  }

  function machineById(id) {
    return DATA.machines.find((m) => m.id === id);
  }

  function modelById(id) {
    return DATA.models.find((m) => m.id === id);
  }

  function buildFigureFields() {
    for (const f of FIGURES) {
      const label = document.createElement("label");
      label.className = "kvo-field";
      const name = document.createElement("span");
      name.textContent = f.label + " (" + f.unit + ")";
      const input = document.createElement("input");
      input.type = "text";
      input.inputMode = "decimal";
      input.id = "kvo-fig-" + f.key;
      input.name = f.key;
      input.autocomplete = "off";
      if (f.optional) input.placeholder = "none";
      label.append(name, input);
      (f.main ? $("kvo-figures-main") : $("kvo-figures-more")).appendChild(label);
    }
  }

  // Fill the figure fields with the chosen machine's figures, rounded for reading; a field left
  // as shown means the machine's exact figure, a field changed means the reader's.
  function fillFigures() {
    const machine = machineById($("kvo-machine").value);
    for (const f of FIGURES) {
      const value = machine.figures[f.key];
      const shown = value === null ? "" : shortNumber(value / f.scale);
      const input = $("kvo-fig-" + f.key);
      input.value = shown;
      input.dataset.base = shown;
    }
  }

  function modelNote() {
    const model = modelById($("kvo-model").value);
    const max = model.max_positions;
    $("kvo-model-note").textContent =
      max === null ? "No stated context limit." : "Context limit: " + max.toLocaleString("en-US") + " tokens.";
  }

  function setupControls() {
    for (const m of DATA.machines) option($("kvo-machine"), m.id, m.name);
    for (const m of DATA.models) option($("kvo-model"), m.id, m.name);
    for (const f of DATA.weight_formats) option($("kvo-weights-format"), f, f);
    for (const f of DATA.kv_formats) option($("kvo-kv-format"), f, f);
    for (const mode of MODES) option($("kvo-overlap"), mode, mode);
    buildFigureFields();
    $("kvo-machine").value = "article-reference";
    $("kvo-model").value = "llama-3.1-8b";
    $("kvo-weights-format").value = "bf16";
    $("kvo-kv-format").value = "bf16";
    fillFigures();
    modelNote();
  }

  function readNumber(id) {
    const text = $(id).value.trim();
    return text === "" ? NaN : Number(text);
  }

  // The page's inputs and the problems with them (each a sentence; none: the model runs).
  function readInputs() {
    const problems = [];
    const machine = machineById($("kvo-machine").value);
    const figures = {};
    const edited = [];
    for (const f of FIGURES) {
      const input = $("kvo-fig-" + f.key);
      const text = input.value.trim();
      input.classList.toggle("kvo-edited", text !== input.dataset.base);
      if (text === input.dataset.base) {
        figures[f.key] = machine.figures[f.key];
        continue;
      }
      edited.push(f.key);
      if (text === "" && f.optional) {
        figures[f.key] = null;
        continue;
      }
      const value = Number(text) * f.scale;
      const zeroOk = f.zero && Number(text) === 0;
      if (text === "" || !Number.isFinite(value) || (!zeroOk && !(value >= f.lo && value <= f.hi))) {
        problems.push(
          f.label + ": give a number from " + shortNumber(f.lo / f.scale) + " to " +
            shortNumber(f.hi / f.scale) + " " + f.unit + (f.zero ? " (or 0)" : "") + "."
        );
      }
      figures[f.key] = value;
    }
    // spec/hardware.py's checks between figures
    if (figures.attention_bandwidth > figures.gpu_bandwidth * DATA.attention_slack) {
      problems.push("The attention read rate may not exceed the GPU memory bandwidth.");
    }
    if (figures.pageable !== null && figures.pageable > figures.h2d) {
      problems.push("The pageable rate may not exceed the host→GPU rate.");
    }
    const pinned = $("kvo-pinned").checked;
    if (!pinned && figures.pageable === null) {
      problems.push("Pageable copies need a pageable link rate: give one, or pin the host buffers.");
    }
    const model = modelById($("kvo-model").value);
    const prompt = readNumber("kvo-prompt");
    const generate = readNumber("kvo-generate");
    const batch = readNumber("kvo-batch");
    const whole = (x, lo, hi) => Number.isInteger(x) && x >= lo && x <= hi;
    if (!whole(prompt, 1, 100000000)) problems.push("Context: a whole number of tokens from 1 to 100,000,000.");
    if (!whole(generate, 1, 1000000)) problems.push("Tokens generated: a whole number from 1 to 1,000,000.");
    if (!whole(batch, 1, 1000000)) problems.push("Batch: a whole number from 1 to 1,000,000.");
    if (model.max_positions !== null && prompt + generate > model.max_positions) {
      problems.push(
        "Context + tokens generated = " + (prompt + generate).toLocaleString("en-US") +
          " tokens is beyond " + model.name + "'s context of " +
          model.max_positions.toLocaleString("en-US") + "."
      );
    }
    const split = (prefix, what) => {
      const cpu = readNumber(prefix + "-cpu") / 100;
      const disk = readNumber(prefix + "-disk") / 100;
      if (!(cpu >= 0 && cpu <= 1 && disk >= 0 && disk <= 1 && cpu + disk <= 1 + 1e-9)) {
        problems.push(what + ": host and disk shares from 0 to 100% that add up to at most 100%.");
      }
      const gpu = Math.max(0, 1 - cpu - disk);
      $(prefix + "-gpu").textContent = shortNumber(gpu * 100) + "%";
      return { gpu: gpu, cpu: cpu, disk: disk };
    };
    const weights = split("kvo-weights", "Weights");
    const kv = split("kvo-kv", "KV cache");
    const budget = readNumber("kvo-budget");
    if (!(budget > 0)) problems.push("Budget: a positive number of milliseconds.");
    return {
      problems: problems,
      edited: edited,
      machineId: machine.id,
      machineName: machine.name,
      figures: figures,
      model: model,
      weightsFormat: $("kvo-weights-format").value,
      kvFormat: $("kvo-kv-format").value,
      prompt: prompt,
      generate: generate,
      batch: batch,
      weights: weights,
      kv: kv,
      attention: $("kvo-attention").value,
      overlap: $("kvo-overlap").value,
      pinned: pinned,
      budget: budget,
    };
  }

  function setupOf(inp, overrides) {
    const s = Object.assign(
      {
        machine: inp.figures,
        model: inp.model,
        weightsFormat: inp.weightsFormat,
        kvFormat: inp.kvFormat,
        lay: layers(inp.model, inp.weightsFormat),
        weights: inp.weights,
        kv: inp.kv,
        attention: inp.attention,
        overlap: inp.overlap,
        pinned: inp.pinned,
      },
      overrides || {}
    );
    return s;
  }

  // ------------------------------------------------------------------- output ---------------

  const nf = (digits) => new Intl.NumberFormat("en-US", { maximumSignificantDigits: digits });

  function formatMs(s) {
    const ms = s * 1e3;
    if (ms >= 10000) return nf(3).format(ms / 1e3) + " s";
    return nf(3).format(ms) + " ms";
  }

  function formatBytes(b) {
    if (b >= 1e12) return nf(3).format(b / 1e12) + " TB";
    if (b >= 1e9) return nf(3).format(b / 1e9) + " GB";
    if (b >= 1e6) return nf(3).format(b / 1e6) + " MB";
    if (b >= 1e3) return nf(3).format(b / 1e3) + " kB";
    return nf(3).format(b) + " B";
  }

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
    const inp = readInputs();
    modelNote();
    const edited = inp.edited.length
      ? " with your figures (" + inp.edited.length + " changed)"
      : "";
    $("kvo-machine-note").textContent = inp.machineName + edited + ".";
    scenarioText(inp);
    if (inp.problems.length) {
      clearOutputs(inp.problems);
      return;
    }
    $("kvo-problems").hidden = true;
    put("error", "", "");
    const setup = setupOf(inp);
    const r = predictSetup(setup, inp.prompt, inp.generate, inp.batch);
    put("tpot_ms", formatMs(r.tpot), r.tpot * 1e3);
    put("ttft_ms", formatMs(r.ttft), r.ttft * 1e3);
    const rate = inp.batch / r.tpot;
    put("decode_tokens_per_s", nf(3).format(rate) + " tokens/s", rate);
    const through = (inp.batch * inp.generate) / (r.ttft + inp.generate * r.tpot);
    put("throughput_tokens_per_s", nf(3).format(through) + " tokens/s", through);
    for (const mode of MODES) put("tpot_" + mode + "_ms", formatMs(r.byOverlap[mode]), r.byOverlap[mode] * 1e3);
    for (const key of STREAMS) put("stream_" + key + "_ms", formatMs(r.streams[key]), r.streams[key] * 1e3);
    for (const row of document.querySelectorAll("[data-kvo-stream]")) {
      row.classList.toggle("kvo-bottleneck", row.dataset.kvoStream === r.bottleneck);
    }
    put("bottleneck", DATA.stream_names[r.bottleneck]);
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
        " the " + nf(4).format(inp.budget) + " ms budget; " + DATA.stream_names[r.bottleneck] +
        " is the bottleneck."
      : "Does not fit: " +
        r.shortfalls
          .map(([tier, need, have]) => tier + " needs " + formatBytes(need) + " but has " + formatBytes(have))
          .join("; ") + ".";
    put("verdict", verdict);
    $("kvo-verdict").className = "kvo-verdict " + (fits ? (within ? "kvo-good" : "kvo-slow") : "kvo-refused");
    $("kvo-summary").textContent =
      "TPOT " + formatMs(r.tpot) + " · TTFT " + formatMs(r.ttft) + " · " + (fits ? "fits" : "does not fit") +
      " · bound by " + DATA.stream_names[r.bottleneck];
    memoryBars(r);
    drawChart(inp, setup, r);
  }

  // --------------------------------------------------------------- the scenario file --------

  function quantity(value, unit) {
    return '"' + String(value) + " " + unit + '"';
  }

  // studies/calculator_data.profile_mapping, as YAML: the machine with the reader's figures
  function profileYaml(f) {
    const name = '"calculator machine"';
    const lines = [
      "hardware:",
      "  id: calculator",
      "  name: " + name,
      "  gpu:",
      "    name: " + name,
      "    memory: " + quantity(f.gpu_memory, "B"),
      "    memory_bandwidth: " + quantity(f.gpu_bandwidth, "B/s"),
      "    memory_bandwidth_achievable: " + quantity(f.gpu_bandwidth, "B/s"),
      "    attention_bandwidth: " + quantity(f.attention_bandwidth, "B/s"),
      "    flops_bf16: " + quantity(f.gpu_flops, "FLOP/s"),
      "  link:",
      "    name: " + name,
      "    raw_bandwidth: " + quantity(Math.max(f.h2d, f.d2h), "B/s"),
      "    h2d_bandwidth: " + quantity(f.h2d, "B/s"),
      "    d2h_bandwidth: " + quantity(f.d2h, "B/s"),
      "    latency: " + quantity(f.link_latency, "s"),
    ];
    if (f.pageable !== null) lines.push("    pageable_bandwidth: " + quantity(f.pageable, "B/s"));
    lines.push(
      "  host:",
      "    name: " + name,
      "    memory: " + quantity(f.host_memory, "B"),
      "    memory_bandwidth: " + quantity(f.host_bandwidth, "B/s"),
      "    flops: " + quantity(f.host_flops, "FLOP/s"),
      "  storage:",
      "    name: " + name,
      "    read_bandwidth: " + quantity(f.disk_read, "B/s"),
      "    write_bandwidth: " + quantity(f.disk_write, "B/s"),
      "    read_latency: " + quantity(f.disk_latency, "s")
    );
    if (f.disk_capacity !== null) lines.push("    capacity: " + quantity(f.disk_capacity, "B"));
    return lines;
  }

  // studies/calculator_data.scenario_for, as the YAML file `kvoffload predict` reads
  function scenarioText(inp) {
    const split = (s) => "{gpu: " + s.gpu + ", cpu: " + s.cpu + ", disk: " + s.disk + "}";
    const lines = inp.edited.length ? profileYaml(inp.figures) : ["hardware: " + inp.machineId];
    lines.push(
      "model: " + inp.model.id,
      "engine: generic",
      "precision: {weights: " + inp.weightsFormat + ", kv: " + inp.kvFormat + "}",
      "workload: {batch: " + inp.batch + ", prompt: " + inp.prompt + ", generate: " + inp.generate + "}",
      "placement:",
      "  weights: " + split(inp.weights),
      "  kv: " + split(inp.kv),
      "attention: " + inp.attention,
      "overlap: " + inp.overlap,
      "pinned: " + inp.pinned
    );
    $("kvo-scenario").textContent = lines.join("\n") + "\n";
  }

  // ------------------------------------------------------------------- the chart ------------

  const SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function tokens(n) {
    if (n >= 1048576 && n % 1048576 === 0) return n / 1048576 + "M";
    if (n >= 1024 && n % 1024 === 0) return n / 1024 + "K";
    return nf(3).format(n);
  }

  // TPOT against the context for the reader's placement and for everything on the GPU; a
  // curve is dashed where that placement does not fit the machine
  function drawChart(inp, setup, current) {
    const box = $("kvo-chart");
    const width = Math.max(300, Math.min(720, box.clientWidth || 600));
    const height = Math.round(Math.min(340, Math.max(240, width * 0.55)));
    const pad = { left: 66, right: 12, top: 14, bottom: 40 };
    const limit =
      inp.model.max_positions === null ? Math.max(1048576, inp.prompt + inp.generate) : inp.model.max_positions;
    const hi = Math.max(2, limit - inp.generate);
    const lo = Math.max(1, Math.min(1024, inp.prompt, Math.floor(hi / 4)));
    const n = 40;
    const xs = [];
    for (let i = 0; i < n; i++) xs.push(Math.round(lo * Math.pow(hi / lo, i / (n - 1))));
    const onGpu = setupOf(inp, {
      weights: { gpu: 1, cpu: 0, disk: 0 },
      kv: { gpu: 1, cpu: 0, disk: 0 },
    });
    const series = [
      { name: "your placement", setup: setup, cls: "kvo-line-a" },
      { name: "everything on the GPU", setup: onGpu, cls: "kvo-line-b" },
    ].map((sr) => ({
      ...sr,
      points: xs.map((x) => {
        const r = predictSetup(sr.setup, x, inp.generate, inp.batch);
        return { x: x, y: r.tpot * 1e3, fits: r.shortfalls.length === 0 };
      }),
    }));
    const ys = series.flatMap((sr) => sr.points.map((p) => p.y)).concat([inp.budget, current.tpot * 1e3]);
    let yLo = Math.pow(10, Math.floor(Math.log10(Math.min(...ys))));
    let yHi = Math.pow(10, Math.ceil(Math.log10(Math.max(...ys))));
    if (yHi <= yLo) yHi = yLo * 10;
    const X = (x) => pad.left + ((Math.log(x) - Math.log(lo)) / (Math.log(hi) - Math.log(lo))) * (width - pad.left - pad.right);
    const Y = (y) => height - pad.bottom - ((Math.log(y) - Math.log(yLo)) / (Math.log(yHi) - Math.log(yLo))) * (height - pad.top - pad.bottom);
    const svg = el("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img" });
    svg.appendChild(el("title", {}, "TPOT against the context, log scales"));
    const grid = el("g", { class: "kvo-grid" });
    for (let y = yLo; y <= yHi * 1.0001; y *= 10) {
      grid.appendChild(el("line", { x1: pad.left, x2: width - pad.right, y1: Y(y), y2: Y(y) }));
      grid.appendChild(el("text", { x: pad.left - 6, y: Y(y) + 4, "text-anchor": "end" }, nf(3).format(y)));
    }
    const factor = hi / lo >= 64 ? 4 : 2;
    for (let x = Math.pow(2, Math.ceil(Math.log2(lo))); x <= hi; x *= factor) {
      grid.appendChild(el("line", { x1: X(x), x2: X(x), y1: pad.top, y2: height - pad.bottom }));
      grid.appendChild(el("text", { x: X(x), y: height - pad.bottom + 16, "text-anchor": "middle" }, tokens(x)));
    }
    svg.appendChild(grid);
    svg.appendChild(el("text", { x: (pad.left + width - pad.right) / 2, y: height - 6, "text-anchor": "middle", class: "kvo-axis-title" }, "context (tokens, log scale)"));
    svg.appendChild(el("text", { x: 12, y: (pad.top + height - pad.bottom) / 2, "text-anchor": "middle", class: "kvo-axis-title", transform: "rotate(-90 12 " + (pad.top + height - pad.bottom) / 2 + ")" }, "TPOT (ms, log scale)"));
    const by = Y(inp.budget);
    svg.appendChild(el("line", { x1: pad.left, x2: width - pad.right, y1: by, y2: by, class: "kvo-budget" }));
    svg.appendChild(el("text", { x: pad.left + 4, y: by - 5, "text-anchor": "start", class: "kvo-budget-label" }, nf(4).format(inp.budget) + " ms budget"));
    for (const sr of series) {
      const last = sr.points[sr.points.length - 1];
      svg.appendChild(el("text", { x: X(last.x) - 4, y: Y(last.y) + (sr === series[0] ? -8 : 16), "text-anchor": "end", class: sr.cls + "-label" }, sr.name));
      for (const run of runs(sr.points)) {
        const d = run.points.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1)).join(" ");
        svg.appendChild(el("path", { d: d, class: sr.cls + (run.fits ? "" : " kvo-nofit"), fill: "none" }));
      }
    }
    svg.appendChild(el("circle", { cx: X(inp.prompt), cy: Y(current.tpot * 1e3), r: 5, class: "kvo-marker" }));
    box.replaceChildren(svg);
    const legend = $("kvo-chart-legend");
    legend.textContent =
      "A curve is dashed where its placement does not fit the machine; the dot is your context. " +
      (series[0].points.every((p, i) => Math.abs(p.y - series[1].points[i].y) <= 1e-9 * p.y)
        ? "The two curves coincide: your placement keeps everything on the GPU."
        : "");
  }

  // consecutive segments of a curve with the same fit, each run drawn as one path
  function runs(points) {
    const out = [];
    let current = null;
    for (let i = 1; i < points.length; i++) {
      const fits = points[i - 1].fits && points[i].fits;
      if (!current || current.fits !== fits) {
        current = { fits: fits, points: [points[i - 1]] };
        out.push(current);
      }
      current.points.push(points[i]);
    }
    return out;
  }

  // ------------------------------------------------------------------- the API --------------

  // What the test drives: set the page's inputs as a reader would, then read what it shows.
  function set(inputs) {
    if (inputs.machine !== undefined) {
      $("kvo-machine").value = inputs.machine;
      fillFigures();
    }
    for (const [key, value] of Object.entries(inputs.figures || {})) {
      const f = FIGURES.find((x) => x.key === key);
      $("kvo-fig-" + key).value = value === null ? "" : String(value / f.scale);
    }
    const ids = {
      model: "kvo-model",
      weights_format: "kvo-weights-format",
      kv_format: "kvo-kv-format",
      prompt: "kvo-prompt",
      generate: "kvo-generate",
      batch: "kvo-batch",
      attention: "kvo-attention",
      overlap: "kvo-overlap",
      budget: "kvo-budget",
    };
    for (const [key, id] of Object.entries(ids)) if (inputs[key] !== undefined) $(id).value = String(inputs[key]);
    for (const group of ["weights", "kv"]) {
      if (inputs[group] === undefined) continue;
      $("kvo-" + group + "-cpu").value = String(inputs[group].cpu * 100);
      $("kvo-" + group + "-disk").value = String(inputs[group].disk * 100);
    }
    if (inputs.pinned !== undefined) $("kvo-pinned").checked = Boolean(inputs.pinned);
    form.dispatchEvent(new Event("input", { bubbles: true }));
    return read();
  }

  function read() {
    const out = {};
    for (const el of document.querySelectorAll("[data-kvo-out]")) out[el.dataset.kvoOut] = el.dataset.value;
    out.scenario = $("kvo-scenario").textContent;
    return out;
  }

  setupControls();
  const changed = (event) => {
    if (event.target.id === "kvo-machine") fillFigures();
    update();
  };
  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  $("kvo-reset").addEventListener("click", () => {
    fillFigures();
    update();
  });
  let resized = null;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(update, 100);
  });
  form.addEventListener("submit", (event) => event.preventDefault());
  update();
  window.kvoCalc = { set: set, read: read, data: DATA };
})();
