/*
 * llama.cpp's placement rules on the step model, in the browser: each function mirrors the one
 * named beside it in the package src/kvoffload/engines/each/llamacpp/ (options, placement,
 * attention, step, prefill, engine) or model/cpu_rate.py, for the options -ngl, --n-cpu-moe,
 * --cpu-moe, --no-kv-offload and -t (and n_ubatch, no_mmap, no_pinned and fork where given). Its
 * data (each model's tensors per position, the CPU kernels, the constants, the options' defaults)
 * is studies/calculator_llamacpp.py's export.
 * Exposes window.KvoLlamacpp.create(data, M), M being KvoModel.create(data).
 */
(function () {
  "use strict";

  function create(data, M) {
    const L = data.llamacpp;
    const posCache = new Map();

    // calculator_llamacpp.positions, expanded: one row per position (the output layer last)
    function positions(model, fmt) {
      const key = model.id + "/" + fmt;
      if (posCache.has(key)) return posCache.get(key);
      const raw = model.llamacpp.positions[fmt];
      const rows = [];
      for (const [row, run] of raw.rows) for (let i = 0; i < run; i++) rows.push(row);
      const out = { rows: rows, embedding: raw.embedding_bytes, output: raw.output };
      posCache.set(key, out);
      return out;
    }

    // Host.matmul_threads: the threads given, else the performance cores, else every core
    function matmulThreads(host) {
      return host.threads || host.performance_cores || host.cores || null;
    }

    // cpu_rate.host_stream_rate under --numa (null: no policy, every page on one node;
    // distribute: each socket its own DRAM; isolate: one socket; numactl: interleaved)
    function hostStreamRate(host, bandwidth, threads, numa) {
      const s = numa === "isolate" ? 1 : threads ? Math.min(host.sockets, threads) : host.sockets;
      const b = bandwidth / host.sockets;
      if (s === 1) return b;
      const x = host.cross_socket_bandwidth === null ? Infinity : host.cross_socket_bandwidth;
      if (numa === "distribute") return s * b;
      if (numa === "numactl") return Math.min(s * b, s * s * x);
      return Math.min(b, s * x);
    }

    // cpu_rate.thread_cores: the cores matvec threads run on at full speed (one socket's, isolated)
    function threadCores(host, numa) {
      const cores = host.performance_cores || host.cores;
      if (!cores || numa !== "isolate") return cores || null;
      return Math.max(Math.floor(cores / host.sockets), 1);
    }

    // cpu_rate.weight_stream_rate: the matvec kernel's share of the memory, or its threads' rate
    function weightStreamRate(host, bandwidth, fmt, threads, numa) {
      const k = L.kernels[fmt];
      const n = threads || matmulThreads(host);
      const rate = k.bandwidth_share * hostStreamRate(host, bandwidth, n, numa);
      if (n === null) return rate;
      const cores = threadCores(host, numa);
      const nEff = cores ? Math.min(n, cores) : n;
      return Math.min(rate, nEff * k.per_thread_bps);
    }

    // capacity.host_capacity: host memory less what the OS keeps (Host.reserved_memory)
    function hostCapacity(host, memory) {
      const reserved = host.memory_reserved !== null ? host.memory_reserved : L.reserved_base_bytes + L.reserved_share * memory;
      return Math.max(memory - reserved, 0);
    }

    // placement.placement: the last n_gpu_layers positions (the output layer counts) on the GPU;
    // ik_llama: the last n_gpu_layers decoder layers, the output layer only past n_layer
    function placement(n, ngl, fork) {
      const g = Math.min(ngl === null ? n + 1 : ngl, n + 1);
      const onGpu = [];
      if (fork === "ik_llama") {
        for (let p = 0; p < n; p++) onGpu.push(p >= Math.max(n - g, 0));
        onGpu.push(g > n);
        return { ngl: g, onGpu: onGpu };
      }
      const start = Math.max(n + 1 - g, 0);
      for (let p = 0; p <= n; p++) onGpu.push(p >= start);
      return { ngl: g, onGpu: onGpu };
    }

    // attention.gpu_kv_rate: a ggml block format read at its bytes per value over f16's, divided
    // by the dequantisation's cost (kv_dequant_gpu); the other formats at the attention rate
    function gpuKvRate(m, kvFormat) {
      const base = m.attention_bandwidth;
      if (!L.kv_block_formats.includes(kvFormat)) return base;
      return (base * L.kv_value_bytes[kvFormat]) / L.f16_bytes / L.kv_dequant_gpu;
    }

    // attention.cpu_kv_rate: q8_0 and q4_0 at their CPU matvec kernel's rate, the rest at the
    // host's streaming rate (placement.host_read_rate)
    function cpuKvRate(host, m, kvFormat, threads, hostBw, numa) {
      const weights = L.kv_cpu_kernels[kvFormat];
      if (weights === undefined) return hostBw;
      return weightStreamRate(host, m.host_bandwidth, weights, threads, numa);
    }

    // prefill.prefill_rate: MMQ on the int8 tensor cores for a quantised GGUF format, where the
    // GPU has them; the dense 16-bit rate otherwise
    function prefillRate(inp) {
      const int8 = inp.gpu ? inp.gpu.flops_int8 : null;
      if (int8 === null || int8 === undefined || !L.gguf_quant[inp.weightsFormat]) return inp.figures.gpu_flops;
      return int8 * L.mmq_int8_share;
    }

    // prefill.offloaded: whether a ubatch of `tokens` runs an op on host weights on the GPU,
    // [the other tensors, the routed experts] (ik_llama: a MoE op once its experts see 32 tokens each)
    function offloaded(tokens, o, k, nExp) {
      if (tokens < L.offload_min_batch) return [false, false];
      if (o.fork !== "ik_llama") return [true, true];
      return [true, tokens * k >= L.offload_min_batch * nExp];
    }

    // placement.override_rules and tensor_devices: whether each position's routed experts are on
    // the GPU (--cpu-moe: none; --n-cpu-moe N: not those of layers 0..N-1)
    function expertsOnGpu(layerOnGpu, o) {
      return layerOnGpu.map((g, p) => g && !o.cpu_moe && !(p < o.n_cpu_moe));
    }

    // step._hand_overs: the device changes along one token's graph (host->GPU, GPU->host)
    function handOvers(pos, layerOnGpu, expGpu, kvGpu, n) {
      const seq = [false];
      for (let p = 0; p < n; p++) {
        const ops = pos.rows[p][4];
        const dev = (c) => (c === "r" ? expGpu[p] : layerOnGpu[p]);
        let i = 0;
        if (ops[0] === "a") {
          seq.push(layerOnGpu[p]);
          i = 1;
        }
        seq.push(kvGpu[p]);
        for (; i < ops.length; i++) seq.push(dev(ops[i]));
      }
      if (pos.rows[n][4].length) seq.push(layerOnGpu[n]);
      seq.push(false);
      let ups = 0;
      let downs = 0;
      for (let i = 1; i < seq.length; i++) {
        if (!seq[i - 1] && seq[i]) ups += 1;
        if (seq[i - 1] && !seq[i]) downs += 1;
      }
      return [ups, downs];
    }

    // engine.predict: TPOT (the graph's parts in order, mean over the generated tokens), TTFT,
    // memory (mmap: host weights past host capacity read back from disk each step) and the fit
    function predict(inp, options) {
      const o = Object.assign({ n_gpu_layers: null, n_cpu_moe: 0, cpu_moe: false, no_kv_offload: false, threads: null, numa: null }, L.defaults, options);
      const m = inp.figures;
      const host = inp.host;
      const model = inp.model;
      const fmt = inp.weightsFormat;
      const batch = inp.batch;
      const lay = M.layers(model, fmt);
      const pos = positions(model, fmt);
      const n = pos.rows.length - 1;
      const { ngl, onGpu } = placement(n, o.n_gpu_layers, o.fork);
      const expGpu = expertsOnGpu(onGpu, o);
      const kvGpu = onGpu.map((g, p) => p < n && g && !o.no_kv_offload);
      const [k, nExp] = model.expert_use;
      const touched = pos.rows.some((r) => r[1] > 0) ? M.touchedShare(nExp, k, batch) : 0;
      const token = model.kv_token_bytes[inp.kvFormat];
      const svb = data.state_value_bytes[inp.kvFormat];
      const perOp = L.gpu_op_s;
      const sync = L.split_sync_s;
      const cpuRate = weightStreamRate(host, m.host_bandwidth, fmt, o.threads, o.numa);
      const hostBw = hostStreamRate(host, m.host_bandwidth, o.threads || matmulThreads(host), o.numa);
      // a cache in a ggml block format costs more than its bytes to attend over: its bytes count
      // as this many at the f16 rate (step._step_parts_at), the recurrent state as itself
      const gpuKvScale = m.attention_bandwidth / gpuKvRate(m, inp.kvFormat);
      const cpuKvScale = hostBw / cpuKvRate(host, m, inp.kvFormat, o.threads, hostBw, o.numa);
      // per position: bytes read and FLOPs on each device (step._step_parts_at)
      const parts = pos.rows.map((r, p) => {
        const routedRead = r[1] * touched;
        const routedFlops = r[3] > 0 ? 2 * batch * r[3] * (k / nExp) : 0;
        const otherFlops = 2 * batch * r[2];
        const c = lay.order[p];
        return {
          wGpu: (onGpu[p] ? r[0] : 0) + (expGpu[p] ? routedRead : 0),
          wCpu: (onGpu[p] ? 0 : r[0]) + (expGpu[p] ? 0 : routedRead),
          fGpu: (onGpu[p] ? otherFlops : 0) + (expGpu[p] ? routedFlops : 0),
          fCpu: (onGpu[p] ? 0 : otherFlops) + (expGpu[p] ? 0 : routedFlops),
          window: lay.window[c],
          kvb: lay.kv_per_token[c] * token,
          state: 2 * batch * lay.state_values[c] * svb,
          attn: lay.attn_flops[c],
          gAtt: kvGpu[p] ? 1 : 0,
        };
      });
      const [ups, downs] = handOvers(pos, onGpu, expGpu, kvGpu, n);
      const act = batch * model.llamacpp.hidden * L.activation_bytes;
      const lat = m.link_latency;
      const rateUp = M.copyRate(m, "h2d", true);
      const rateDown = M.copyRate(m, "d2h", true);
      let link = ups * (act / rateUp + lat + sync);
      for (let i = 0; i < downs; i++) {
        const bytes = i === downs - 1 && pos.output && onGpu[n] ? batch * model.llamacpp.vocab * L.activation_bytes : act;
        link += bytes / rateDown + lat + sync;
      }
      // each matmul on the GPU adds a fixed time (step._step_parts_at), a routed-expert stack one
      const gpuOps = pos.rows.reduce((n, r, p) => n + (onGpu[p] ? r[5] : 0) + (expGpu[p] ? r[6] : 0), 0);
      const at = (s) => {
        let gpu = 0;
        let cpu = 0;
        for (const q of parts) {
          const held = Math.min(s, q.window);
          const kvBytes = batch * held * q.kvb;
          const gpuKv = kvBytes * gpuKvScale + q.state;
          const cpuKv = kvBytes * cpuKvScale + q.state;
          const af = batch * held * q.attn;
          gpu += Math.max(q.wGpu / m.gpu_bandwidth + (gpuKv * q.gAtt) / m.attention_bandwidth, (q.fGpu + af * q.gAtt) / m.gpu_flops);
          cpu += Math.max(q.wCpu / cpuRate + (cpuKv * (1 - q.gAtt)) / hostBw, (q.fCpu + af * (1 - q.gAtt)) / m.host_flops);
        }
        gpu += gpuOps * perOp;
        return [gpu + cpu + link, gpu, cpu, link];
      };
      const mean = M.tokenMean(at, inp.prompt, inp.generate, lay.window);
      // memory at the end of generation: whole tensors where they live, each layer's KV with it
      let wGpu = 0;
      let wCpu = pos.embedding;
      let readOff = pos.embedding;
      pos.rows.forEach((r, p) => {
        wGpu += (onGpu[p] ? r[0] : 0) + (expGpu[p] ? r[1] : 0);
        wCpu += (onGpu[p] ? 0 : r[0]) + (expGpu[p] ? 0 : r[1]);
        readOff += (onGpu[p] ? 0 : r[0]) + (expGpu[p] ? 0 : r[1] * touched);
      });
      const final = inp.prompt + inp.generate;
      let kvAll = 0;
      let kvOnGpu = 0;
      for (let p = 0; p < n; p++) {
        const c = lay.order[p];
        const bytes = batch * (Math.min(final, lay.window[c]) * lay.kv_per_token[c] * token + lay.state_values[c] * svb);
        kvAll += bytes;
        if (kvGpu[p]) kvOnGpu += bytes;
      }
      const kvCpu = kvAll - kvOnGpu;
      const cap = hostCapacity(host, m.host_memory);
      const paged = o.no_mmap ? 0 : Math.min(Math.max(wCpu + kvCpu - cap, 0), wCpu);
      const diskS = paged ? (paged * (readOff / wCpu)) / m.disk_read : 0;
      const ttft = prefillTime(inp, o, pos, onGpu, expGpu, cpuRate);
      const memory = {
        gpu: wGpu + kvOnGpu, cpu: wCpu + kvCpu - paged, disk: paged, staging: 0,
        weightsGpu: wGpu, kvGpu: kvOnGpu,
      };
      const streams = { gpu: mean[1], cpu: mean[2], h2d: mean[3], d2h: 0, disk_read: diskS, disk_write: 0 };
      // engine.predict's cpu_work: CPU attention (--no-kv-offload, some KV), CPU matmuls (host weights)
      const hostWeights = pos.rows.some((r, p) => (!onGpu[p] && (r[0] > 0 || r[2] > 0)) || (!expGpu[p] && r[1] > 0));
      const bottleneck = M.bottleneckOf(streams, o.no_kv_offload && kvCpu > 0, hostWeights);
      const tiers = [["GPU memory", memory.gpu, m.gpu_memory], ["host memory", memory.cpu, cap]];
      if (m.disk_capacity !== null) tiers.push(["disk", memory.disk, m.disk_capacity]);
      return {
        tpot: mean[0] + diskS, ttft: ttft, streams: streams, byOverlap: {},
        bottleneck: bottleneck.key, bottleneckName: bottleneck.name,
        memory: memory, tiers: tiers, shortfalls: tiers.filter(([, need, have]) => !(need <= have)),
        ngl: ngl, paged: paged,
      };
    }

    // prefill._ubatch_s: one ubatch of `tokens` on the host-resident weights: those its ops take to
    // the GPU cross the link (pinned from --no-mmap's host buffer, else pageable), the rest on the CPU
    function ubatchTime(inp, o, pos, onGpu, expGpu, cpuRate, tokens) {
      const m = inp.figures;
      const [k, nExp] = inp.model.expert_use;
      const touched = M.touchedShare(nExp, k, tokens);
      const [upOther, upRouted] = offloaded(tokens, o, k, nExp);
      let up = 0;
      let hereBytes = 0;
      let hereFlops = 0;
      pos.rows.forEach((r, p) => {
        if (!onGpu[p]) {
          if (upOther) up += r[0];
          else {
            hereBytes += r[0];
            hereFlops += 2 * tokens * r[2];
          }
        }
        if (!expGpu[p]) {
          if (upRouted) up += r[1] * touched;
          else {
            hereBytes += r[1] * touched;
            hereFlops += 2 * tokens * r[3] * (k / nExp);
          }
        }
      });
      const upload = up / M.copyRate(m, "h2d", o.no_mmap && !o.no_pinned);
      return upload + Math.max(hereBytes / cpuRate, hereFlops / m.host_flops);
    }

    // prefill.ttft: the GPU's work (its own weights and those copied to it, read every ubatch, at
    // prefill_rate) plus each ubatch's host-side weights
    function prefillTime(inp, o, pos, onGpu, expGpu, cpuRate) {
      const model = inp.model;
      const tokens = inp.prompt * inp.batch;
      const full = Math.floor(tokens / o.n_ubatch);
      const rest = tokens - full * o.n_ubatch;
      const [k, nExp] = model.expert_use;
      const [upOther, upRouted] = offloaded(Math.min(tokens, o.n_ubatch), o, k, nExp);
      const setup = M.setupOf({
        machine: inp.figures, model: model, weightsFormat: inp.weightsFormat, kvFormat: inp.kvFormat,
        weights: { gpu: 1, cpu: 0, disk: 0 }, kv: { gpu: 1, cpu: 0, disk: 0 },
        attention: "gpu", overlap: "none", pinned: true,
      });
      // prefill.gpu_read_bytes: every ubatch reads the GPU's weights and those copied to it again,
      // of the routed experts the share that ubatch touches
      const gpuReads = (t) => {
        const touched = M.touchedShare(nExp, k, t);
        let b = 0;
        pos.rows.forEach((r, p) => {
          if (onGpu[p] || upOther) b += r[0];
          if (expGpu[p] || upRouted) b += r[1] * touched;
        });
        return b;
      };
      const reads = full * gpuReads(o.n_ubatch) + (rest ? gpuReads(rest) : 0);
      const gpu = M.ttft(setup, inp.prompt, inp.batch, 0, prefillRate(inp), reads);
      let host = full * ubatchTime(inp, o, pos, onGpu, expGpu, cpuRate, o.n_ubatch);
      if (rest) host += ubatchTime(inp, o, pos, onGpu, expGpu, cpuRate, rest);
      return gpu + host;
    }

    // advise_commands.command_line, llama.cpp's branch (with --cpu-moe and -t as given)
    function command(inp, o) {
      const model = inp.model;
      const args = ["llama-server", "-m", model.id + "-" + inp.weightsFormat.toUpperCase() + ".gguf"];
      args.push("-ngl", String(o.n_gpu_layers === null ? model.llamacpp.all_layers : o.n_gpu_layers));
      if (o.n_cpu_moe) args.push("--n-cpu-moe", String(o.n_cpu_moe));
      if (o.cpu_moe) args.push("--cpu-moe");
      if (o.no_kv_offload) args.push("--no-kv-offload");
      if (o.numa) args.push("--numa", o.numa);
      if (inp.kvFormat !== "fp16") {
        const flag = L.kv_flags[inp.kvFormat];
        args.push("-ctk", flag, "-ctv", flag, "-fa", "on");
      }
      if (o.threads !== null) args.push("-t", String(o.threads));
      args.push("-c", String((inp.prompt + inp.generate) * inp.batch));
      if (inp.batch > 1) args.push("-np", String(inp.batch));
      return args.join(" ");
    }

    return { predict: predict, command: command, hostCapacity: hostCapacity, matmulThreads: matmulThreads };
  }

  window.KvoLlamacpp = { create: create };
})();
