/*
 * The "best placement that fits" button: kvoffload advise's search, run in the browser for the
 * reader's machine figures, model, context and batch. Each function mirrors the one named beside
 * it in the package: studies/advise_search.py (search with fastest_only, as `advise --model all`
 * runs it), studies/advise.py (flags, row) and studies/advise_commands.py (command_line);
 * llama.cpp's configurations are predicted by llamacpp.js, vLLM's on the step model with
 * engines/each/vllm.py's setup on one GPU. Its constants are studies/calculator_advice.py's.
 * Exposes window.KvoAdvice.create(data, M, LC, RU, form).
 */
(function () {
  "use strict";

  const { nf } = window.KvoFormat;

  function create(data, M, LC, RU, form) {
    const A = data.advice;
    const W = A.ways;

    // advise_all's Workload: a model built for a shorter context is advised at its own; the last
    // min(GENERATE, context // 2) tokens (at least one) are generated
    function workload(model, context, batch) {
      const c = model.max_positions === null ? context : Math.min(context, model.max_positions);
      const generate = Math.max(1, Math.min(A.generate, Math.floor(c / 2)));
      return { context: c, generate: generate, prompt: c - generate, batch: batch };
    }

    // advise_search._largest: the largest n in [lo, hi] with ok(n) (true up to some n), else null
    function largest(ok, lo, hi) {
      if (!ok(lo)) return null;
      let a = lo;
      let b = hi;
      while (a < b) {
        const mid = Math.floor((a + b + 1) / 2);
        if (ok(mid)) a = mid;
        else b = mid - 1;
      }
      return a;
    }

    const gpuShort = (p) => p.shortfalls.some(([tier]) => tier === "GPU memory");

    // advise_search._Probe for llama.cpp: one pair of formats, its predictions by options
    function llamacppProbe(inp, wl, weights, kv) {
      const seen = new Map();
      const base = Object.assign({}, inp, { weightsFormat: weights, kvFormat: kv, prompt: wl.prompt,
        generate: wl.generate, batch: wl.batch });
      function prediction(options) {
        const key = JSON.stringify(options);
        if (!seen.has(key)) {
          // advise's options as llamacpp.js reads them (-ot exps=CPU: every routed expert on the CPU)
          const o = {};
          if (options.n_gpu_layers !== undefined) o.n_gpu_layers = options.n_gpu_layers;
          if (options.n_cpu_moe !== undefined) o.n_cpu_moe = options.n_cpu_moe;
          if (options.override_tensor === "exps=CPU") o.cpu_moe = true;
          if (options.no_kv_offload) o.no_kv_offload = true;
          if (options.numa) o.numa = options.numa;
          seen.set(key, LC.predict(base, o));
        }
        return seen.get(key);
      }
      return { engine: "llamacpp", weights: weights, kv: kv, prediction: prediction, host: inp.host,
        fits: (options) => !gpuShort(prediction(options)) };
    }

    // engines/each/vllm.py on one GPU: cpu_offload_gb GiB of the weights read over the link as
    // the kernels run, pinned; memory with the share gpu_memory_utilization leaves to others
    function vllmProbe(inp, wl, weights, kv) {
      const seen = new Map();
      function prediction(options) {
        const gb = options.cpu_offload_gb || 0;
        if (!seen.has(gb)) {
          const s = form.setupOf(Object.assign({}, inp, { weightsFormat: weights, kvFormat: kv }), { pinned: true });
          const setup = RU.vllmSetup(s, gb);
          const p = M.predictSetup(setup, wl.prompt, wl.generate, wl.batch);
          const ttft = p.ttft + RU.chunkReads(setup, wl.prompt, wl.batch, inp.gpu.name);
          const m = setup.machine;
          // pinned offloaded parameters: each takes the next power of two of host memory
          const [moved, held] = RU.vllmOffload(setup.lay, gb * RU.gib, true);
          const memory = Object.assign({}, p.memory, {
            gpu: p.memory.gpu + (1 - A.gpu_memory_utilization) * m.gpu_memory,
            cpu: p.memory.cpu + held - moved,
          });
          const tiers = M.capacityTiers(m, memory, setup.hostCapacity);
          seen.set(gb, { tpot: p.tpot, ttft: ttft, memory: memory,
            shortfalls: tiers.filter(([, need, have]) => !(need <= have)) });
        }
        return seen.get(gb);
      }
      return { engine: "vllm", weights: weights, kv: kv, prediction: prediction,
        fits: (options) => !gpuShort(prediction(options)) };
    }

    // advise_search._Probe.choice
    function choice(probe, options, way, batch) {
      const p = probe.prediction(options);
      return { engine: probe.engine, weights: probe.weights, kv: probe.kv, options: options, way: way,
        tpot: p.tpot, ttft: p.ttft, tokensPerS: batch / p.tpot, fits: p.shortfalls.length === 0 };
    }

    // advise_search._llamacpp
    function llamacppChoices(probe, model, batch) {
      const n = model.llamacpp.positions[probe.weights].rows.reduce((t, [, run]) => t + run, 0) - 1;
      if (probe.fits({})) return [choice(probe, {}, A.no_offload, batch)];
      const out = [];
      const ngl = largest((k) => probe.fits({ n_gpu_layers: k }), 0, n);
      if (ngl !== null) out.push(choice(probe, { n_gpu_layers: ngl }, W.ngl, batch));
      if (model.moe) {
        const kept = largest((k) => probe.fits({ n_cpu_moe: n - k }), 0, n - 1);
        if (kept !== null) out.push(choice(probe, { n_cpu_moe: n - kept }, W.ncmoe, batch));
        else {
          const rule = { override_tensor: "exps=CPU" };
          const k = largest((g) => probe.fits(Object.assign({}, rule, { n_gpu_layers: g })), 0, n);
          if (k !== null) out.push(choice(probe, Object.assign({}, rule, { n_gpu_layers: k }), W.exps_cpu, batch));
        }
      }
      if (probe.fits({ no_kv_offload: true })) out.push(choice(probe, { no_kv_offload: true }, W.no_kv, batch));
      // on several sockets, each placement again with --numa distribute (its fit is the same)
      if (probe.host.sockets > 1) {
        for (const c of out.slice()) out.push(choice(probe, Object.assign({}, c.options, { numa: "distribute" }), c.way, batch));
      }
      return out;
    }

    // advise_search._vllm: the smallest whole cpu_offload_gb that fits
    function vllmChoices(probe, model, batch) {
      const top = Math.max(1, Math.ceil(M.stepWeightBytes(M.layers(model, probe.weights)) / A.gib));
      const kept = largest((k) => probe.fits({ cpu_offload_gb: top - k }), 0, top);
      if (kept === null) return [];
      const gb = top - kept;
      return [choice(probe, gb ? { cpu_offload_gb: gb } : {}, gb ? W.cpu_offload : A.no_offload, batch)];
    }

    // advise_search.search(fastest_only=True): every configuration that fits, fastest first (then
    // the shortest TTFT), in the order advise tries them where two tie
    function search(inp) {
      const model = inp.model;
      const wl = workload(model, inp.context, inp.batch);
      const cand = A.models[model.id];
      const found = [];
      for (const engine of A.engines) {
        for (const weights of cand[engine].weights) {
          for (const kv of cand[engine].kv) {
            const probe = engine === "llamacpp" ? llamacppProbe(inp, wl, weights, kv) : vllmProbe(inp, wl, weights, kv);
            const got = engine === "llamacpp" ? llamacppChoices(probe, model, wl.batch) : vllmChoices(probe, model, wl.batch);
            for (const c of got) if (c.fits) found.push(c);
          }
        }
      }
      found.sort((a, b) => b.tokensPerS - a.tokensPerS || a.ttft - b.ttft);
      return { workload: wl, choices: found };
    }

    // advise.flags: what the configuration offloads, as the engine's flags
    function flags(c) {
      const o = c.options;
      if (c.way === A.no_offload) return A.no_offload;
      if (c.engine === "vllm") return "--cpu-offload-gb " + String(o.cpu_offload_gb);
      const words = [];
      if (o.override_tensor !== undefined) words.push("-ot " + o.override_tensor);
      if (o.n_gpu_layers !== undefined) words.push("-ngl " + o.n_gpu_layers);
      if (o.n_cpu_moe !== undefined) words.push("--n-cpu-moe " + o.n_cpu_moe);
      if (o.no_kv_offload) words.push("--no-kv-offload");
      if (o.numa) words.push("--numa " + o.numa);
      return words.join(" ");
    }

    // shlex.quote: a word with a character outside [\w@%+=:,./-] in single quotes
    function quote(word) {
      if (word !== "" && !/[^\w@%+=:,./-]/.test(word)) return word;
      return "'" + word.replace(/'/g, "'\"'\"'") + "'";
    }

    // advise_commands.command_line for a catalog model
    function command(c, model, wl) {
      const o = c.options;
      let args;
      if (c.engine === "llamacpp") {
        args = ["llama-server", "-m", model.id + "-" + c.weights.toUpperCase() + ".gguf"];
        args.push("-ngl", String(o.n_gpu_layers === undefined ? model.llamacpp.all_layers : o.n_gpu_layers));
        if (o.n_cpu_moe) args.push("--n-cpu-moe", String(o.n_cpu_moe));
        if (o.override_tensor) args.push("-ot", o.override_tensor);
        if (o.no_kv_offload) args.push("--no-kv-offload");
        if (o.numa) args.push("--numa", o.numa);
        if (c.kv !== "fp16") args.push("-ctk", A.llama_kv[c.kv], "-ctv", A.llama_kv[c.kv], "-fa", "on");
        args.push("-c", String(wl.context * wl.batch));
        if (wl.batch > 1) args.push("-np", String(wl.batch));
      } else {
        const base = A.models[model.id].checkpoint;
        args = ["vllm", "serve", c.weights === "int4" ? base + "-AWQ" : base];
        if (A.vllm_quantization[c.weights] !== undefined) args.push("--quantization", A.vllm_quantization[c.weights]);
        if (o.cpu_offload_gb) args.push("--cpu-offload-gb", String(o.cpu_offload_gb));
        if (c.kv !== "bf16") args.push("--kv-cache-dtype", A.vllm_kv[c.kv]);
        args.push("--max-model-len", String(wl.context));
        if (wl.batch > 1) args.push("--max-num-seqs", String(wl.batch));
      }
      return args.map(quote).join(" ");
    }

    // advise.row, the part the page shows (kv_format: our name for the cache's format)
    function row(c, model, wl) {
      return {
        engine: c.engine, weights: c.weights, kv: A.kv_names[c.kv] || c.kv, kv_format: c.kv,
        offload: flags(c), options: c.options, tokens_per_s: c.tokensPerS, tpot_ms: c.tpot * 1e3,
        ttft_ms: c.ttft * 1e3, command: command(c, model, wl), context: wl.context, batch: wl.batch,
      };
    }

    // advise's options as the page's llama.cpp fields (-ot exps=CPU: every routed expert on the CPU)
    function llamacppFields(options) {
      return {
        n_gpu_layers: options.n_gpu_layers === undefined ? null : options.n_gpu_layers,
        n_cpu_moe: options.n_cpu_moe || 0,
        cpu_moe: options.override_tensor === "exps=CPU",
        no_kv_offload: Boolean(options.no_kv_offload),
        threads: null,
        numa: options.numa || null,
      };
    }

    // the answer in words; a llama.cpp answer is put in the form (the reader's context kept)
    function best(inp) {
      const s = search(inp);
      const wl = s.workload;
      const at = wl.context.toLocaleString("en-US") + " tokens" + (wl.batch > 1 ? ", batch " + wl.batch : "");
      const mine = inp.edited.length ? " (with your figures)" : "";
      if (!s.choices.length) {
        return { row: null, text: "kvoffload advise" + mine + ": nothing fits at " + at + "." };
      }
      const r = row(s.choices[0], inp.model, wl);
      const engine = r.engine === "llamacpp" ? "llama.cpp" : r.engine;
      const text =
        "kvoffload advise at " + at + mine + ": " + engine + ", " + r.weights + " weights, KV " + r.kv + ", " +
        r.offload + ": " + nf(3).format(r.tokens_per_s) + " tokens/s. " +
        (r.engine === "llamacpp" ? "Put in the form." : "The form's engines are the step model and llama.cpp; run:") +
        " " + r.command + (r.options.numa ? " Note: " + A.numa_note + "." : "");
      if (r.engine === "llamacpp") {
        form.fill({
          engine: "llamacpp",
          weights_format: r.weights,
          kv_format: r.kv_format,
          llamacpp: llamacppFields(r.options),
        });
      }
      return { row: r, text: text };
    }

    return { search: search, best: best, llamacppFields: llamacppFields };
  }

  window.KvoAdvice = { create: create };
})();
