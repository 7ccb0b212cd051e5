/*
 * The step model of kvoffload's generic engine, evaluated in the browser: one mirror, shared by the
 * offline calculator (calculator.html) and chapter 03's try-it widget.
 *
 * KvoModel.create(data) takes the JSON studies/calculator_data.py exports and returns the model's
 * functions; each mirrors the Python function named beside it in src/kvoffload/model/ (decode.py,
 * kv.py, transfer.py, routing.py, capacity.py, prediction.py). tests/book/test_browser_calculator.py
 * holds the calculator page and the widget to the package. No network: everything is in `data`.
 */
(function () {
  "use strict";

  function create(data) {
    const STREAMS = data.streams;
    const MODES = data.overlap_modes;

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

    // decode.weight_traffic, for whole-model weight shares (no tensor groups): the offloaded share
    // moves whole, experts included, or (setup.routedOnly: routing.stream 'routed', no GPU expert
    // cache) only the routed experts the batch touches
    function weightTraffic(setup, lay, b) {
      const w = setup.weights;
      const [k, n] = setup.model.expert_use;
      const active = touchedShare(n, k, b);
      const off = w.cpu + w.disk;
      return lay.weight_bytes.map((bytes, i) => {
        const read = bytes - lay.expert_bytes[i] + lay.expert_bytes[i] * active;
        return {
          gpuBytes: read,
          gpuFlops: b * lay.dense_flops[i],
          moved: (setup.routedOnly ? read : bytes) * off,
          fromDisk: bytes * w.disk,
        };
      });
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
      const svb = data.state_value_bytes[setup.kvFormat];
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
            // Host.attention_rate: PyTorch's attention on the CPU where measured, else the CPU rate
            (b * lay.attn_flops[i] * held * cOff) / (m.host_attention_flops === null ? m.host_flops : m.host_attention_flops)
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
      const svb = data.state_value_bytes[setup.kvFormat];
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

    // decode.prefill_flops: matmuls plus causal attention over the prompt, windows respected; the
    // first `cached` tokens (a prefix-cache hit) skip the matmuls, their KV is still attended
    // decode.prefill_flops (total) and decode.prefill_attention_flops (attention), in one pass
    function prefillParts(model, prompt, batch, cached) {
      const c = cached || 0;
      const lay = layers(model, "bf16");
      const attended = (s, w) => {
        const wf = Math.min(w, s);
        return (wf * wf) / 2 + (s - wf) * wf;
      };
      let total = 0;
      let attention = 0;
      for (let i = 0; i < lay.count.length; i++) {
        const w = lay.window[i];
        const attn = c ? attended(prompt, w) - attended(c, w) : attended(prompt, w);
        total += lay.count[i] * batch * ((prompt - c) * lay.dense_flops[i] + lay.attn_flops[i] * attn);
        attention += lay.count[i] * batch * lay.attn_flops[i] * (attended(prompt, w) - attended(c, w));
      }
      return { total, attention };
    }

    function prefillFlops(model, prompt, batch, cached) {
      return prefillParts(model, prompt, batch, cached).total;
    }

    // decode.ttft: compute-bound prefill, offloaded weights streamed in, the prompt's offloaded KV
    // out; with `cached` tokens already in GPU memory, their KV read once and not written out
    // (rate: the FLOP/s the engine's prefill matmuls reach, default the GPU's; gpuWeightBytes: the
    // weight bytes the GPU reads, default every weight)
    function ttft(setup, prompt, batch, cached, rate, gpuWeightBytes) {
      const m = setup.machine;
      const w = setup.weights;
      const c = setup.kv;
      const weights = stepWeightBytes(setup.lay);
      let total = kvTotal(setup, prompt, batch);
      let reads = (gpuWeightBytes === undefined || gpuWeightBytes === null ? weights : gpuWeightBytes) / m.gpu_bandwidth;
      if (cached) {
        const prefix = kvTotal(setup, cached, batch) - kvTotal(setup, 0, batch);
        reads += prefix / m.attention_bandwidth;
        total -= prefix;
      }
      // attention at the GPU's measured attention rate where there is one, else at the matmuls'
      const matmulRate = rate || m.gpu_flops;
      const { total: flops, attention } = prefillParts(setup.model, prompt, batch, cached);
      let compute;
      if (m.gpu_attention_flops === null || m.gpu_attention_flops === undefined) {
        compute = Math.max(flops / matmulRate, reads);
      } else {
        compute = Math.max((flops - attention) / matmulRate + attention / m.gpu_attention_flops, reads);
      }
      const rateIn = copyRate(m, "h2d", setup.pinned);
      const rateOut = copyRate(m, "d2h", setup.pinned);
      const wIn = (weights * (w.cpu + w.disk)) / rateIn + (weights * w.disk) / m.disk_read;
      const kvOut = (total * (c.cpu + c.disk)) / rateOut + (total * c.disk) / m.disk_write;
      if (setup.overlap === "none") return compute + wIn + kvOut;
      return Math.max(compute, Math.max(wIn, kvOut));
    }

    // working_memory.prefill_working_bytes (chunked, fused kernel): rows a pass holds x bytes a row
    function prefillWorkingBytes(model, prompt, batch) {
      return Math.min(batch * prompt, data.chunk_tokens) * model.working_row_bytes;
    }

    // decode.memory: what each tier holds at the end of generation, staging buffers included
    function memory(setup, context, batch) {
      const lay = setup.lay;
      const w = setup.weights;
      const c = setup.kv;
      const total = kvTotal(setup, context, batch);
      const weights = lay.resident_bytes;
      const token = kvTokenBytes(setup);
      const cOff = c.cpu + c.disk;
      // traffic.staged_weight_bytes: the weight bytes a layer copies to the GPU for one request
      // (none where kernels read them in place: setup.unstagedWeights, vLLM's UVA)
      const moved = weightTraffic(setup, lay, 1).map((t) => (setup.unstagedWeights ? 0 : t.moved));
      let staged = 0;
      let weightsStaged = 0;
      for (let i = 0; i < lay.count.length; i++) {
        const wi = moved[i];
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

    // capacity.tiers: (tier, bytes needed, bytes there) for every tier the machine bounds; the
    // host's the memory less the OS's reserve (capacity.host_capacity) where the setup gives it
    function capacityTiers(m, mem, hostCapacity) {
      const out = [
        ["GPU memory", mem.gpu, m.gpu_memory],
        ["host memory", mem.cpu, hostCapacity === undefined ? m.host_memory : hostCapacity],
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
      const bottleneck = bottleneckOf(streams, setup.attention !== "gpu" && setup.kv.cpu + setup.kv.disk > 0, false);
      const tiers = capacityTiers(setup.machine, mem, setup.hostCapacity);
      return {
        tpot: byOverlap[setup.overlap],
        ttft: ttft(setup, prompt, batch),
        streams: streams,
        byOverlap: byOverlap,
        bottleneck: bottleneck.key,
        bottleneckName: bottleneck.name,
        memory: mem,
        tiers: tiers,
        // prediction.shortfalls: the tiers the memory overflows
        shortfalls: tiers.filter(([, need, have]) => !(need <= have)),
      };
    }

    // Prediction.bottleneck: the stream with the most work per step (the first, on a tie), and
    // its name, the CPU's by what it holds (decode.cpu_stream_name: attention, matmuls or both)
    function bottleneckOf(streams, attends, matmuls) {
      let key = STREAMS[0];
      for (const k of STREAMS) if (streams[k] > streams[key]) key = k;
      let name = data.stream_names[key];
      if (key === "cpu" && attends && !matmuls) name = data.cpu_stream_names.attention;
      if (key === "cpu" && matmuls && !attends) name = data.cpu_stream_names.matmuls;
      return { key: key, name: name };
    }

    // a setup as the functions above read it: the machine's figures (base units), the model's
    // entry, the formats, the shares {gpu, cpu, disk} and the placement's switches
    function setupOf(s) {
      return Object.assign({}, s, { lay: layers(s.model, s.weightsFormat) });
    }

    return {
      streams: STREAMS,
      modes: MODES,
      layers: layers,
      setupOf: setupOf,
      streamTimes: streamTimes,
      combine: combine,
      tokenMean: tokenMean,
      memory: memory,
      ttft: ttft,
      kvTotal: kvTotal,
      copyRate: copyRate,
      touchedShare: touchedShare,
      stepWeightBytes: stepWeightBytes,
      predictSetup: predictSetup,
      capacityTiers: capacityTiers,
      bottleneckOf: bottleneckOf,
    };
  }

  window.KvoModel = { create: create };
})();
