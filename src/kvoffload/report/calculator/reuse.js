/*
 * The reuse question in the browser: a prompt whose first tokens sit in an engine's prefix cache,
 * reloaded instead of recomputed. Each function mirrors the Python function named beside it in
 * src/kvoffload/model/reuse.py (or the module named); the engine's rule (block size, copy cost,
 * per-hit cost) and the prompts break_even_prompt tries come from data.reuse, exported by
 * studies/calculator_data.py. Runs after model.js. Exposes window.KvoReuse.create(data, model).
 */
(function () {
  "use strict";

  function create(data, M) {
    const R = data.reuse;

    // reuse.hit_tokens: the cached tokens as whole blocks, the prompt's last token left to compute
    function hitTokens(prompt, cached, rule) {
      const usable = Math.min(cached, prompt - Number(rule.recompute_last));
      return Math.floor(Math.max(usable, 0) / rule.block_tokens) * rule.block_tokens;
    }

    // reuse.cache_bytes: the first `tokens` tokens' cache (no recurrent state: it is recomputed)
    function cacheBytes(setup, tokens, batch) {
      return M.kvTotal(setup, tokens, batch) - M.kvTotal(setup, 0, batch);
    }

    // reuse.items: the copies a reload takes (blocks, times the attention layers if per layer)
    function items(setup, hit, batch, rule) {
      const blocks = (hit / rule.block_tokens) * batch;
      return rule.item_spans_layers ? blocks : blocks * setup.model.attention_layers;
    }

    // reuse.tier_rate: the rate (B/s) cached bytes reach the GPU from a tier (Infinity: there)
    function tierRate(setup, tier, rule) {
      if (tier === "gpu") return Infinity;
      const link = M.copyRate(setup.machine, "h2d", rule.pinned) * rule.rate_share;
      if (tier === "cpu") return link;
      return Math.min(link, setup.machine.disk_read);
    }

    // reuse.load_time: seconds to bring `hit` cached tokens per request from `tier` to the GPU
    function loadTime(setup, hit, tier, rule, batch) {
      const rate = tierRate(setup, tier, rule);
      if (!Number.isFinite(rate) || !(hit > 0)) return 0;
      const copies = items(setup, hit, batch, rule);
      return rule.per_hit_s + copies * rule.per_item_s + cacheBytes(setup, hit, batch) / rate;
    }

    // reuse.ttft_with_prefix: the TTFT of a hit (the reload and the new tokens), and recomputed
    function ttftWithPrefix(setup, prompt, cached, tier, rule, batch) {
      const hit = hitTokens(prompt, cached, rule);
      const load = loadTime(setup, hit, tier, rule, batch);
      const fresh = M.ttft(setup, prompt, batch, hit);
      let total = load + fresh;
      if (rule.combine !== "serial") {
        const n = Math.max(setup.model.attention_layers, 1);
        total = (load + fresh) / n + ((n - 1) * Math.max(load, fresh)) / n;
      }
      return { ttft: total, recompute: M.ttft(setup, prompt, batch), hitTokens: hit, load: load };
    }

    // reuse.break_even_prompt: the shortest prompt whose reload from `tier` beats recomputing it
    // (0: none up to the grid's end), over the same prompts, then every token between two of them
    function breakEvenPrompt(setup, tier, rule, batch, grid) {
      const gains = (p) => {
        const r = ttftWithPrefix(setup, p, p, tier, rule, batch);
        return r.ttft < r.recompute;
      };
      const i = grid.findIndex(gains);
      if (i < 0) return 0;
      if (i === 0) return grid[0];
      for (let p = grid[i - 1]; p < grid[i]; p++) if (gains(p)) return p;
      return grid[i];
    }

    // calculator_data.sessions_that_fit: sessions of `context` tokens the host tier holds, whole
    function sessionsThatFit(setup, hostBytes, context) {
      const one = cacheBytes(setup, context, 1);
      return one > 0 ? Math.floor(hostBytes / one) : 0;
    }

    // engines/each/vllm.py _setup on one GPU: `weightsGib` of the weights in host memory, read
    // over the link as the kernels run (no overlap; UVA: of a MoE's routed experts, those the
    // batch picks), the KV on the GPU, attention there
    function vllmSetup(s, weightsGib) {
      const lay = M.layers(s.model, s.weightsFormat);
      const off = Math.min(vllmOffload(lay, weightsGib * R.gib, true)[0] / M.stepWeightBytes(lay), 1);
      return M.setupOf(
        Object.assign({}, s, {
          weights: { gpu: 1 - off, cpu: off, disk: 0 },
          kv: { gpu: 1, cpu: 0, disk: 0 },
          attention: "gpu",
          overlap: "none",
          routedOnly: s.model.moe,
          unstagedWeights: true,
        })
      );
    }

    // vllm_weight_offload.offload on one GPU: the decoder layers' parameters in order, each
    // whole while the bytes moved are below the budget; [bytes moved, host bytes they take]
    // (pinned: each rounded up to a power of two, as PyTorch's pinned allocator does)
    function vllmOffload(lay, budget, pinned) {
      let moved = 0;
      let held = 0;
      if (!(budget > 0)) return [0, 0];
      for (const cls of lay.order) {
        for (const size of lay.vllm_params[cls]) {
          if (moved >= budget) return [moved, held];
          moved += size;
          held += pinned && size > 0 ? Math.pow(2, Math.ceil(Math.log2(Math.max(size, 1)))) : size;
        }
      }
      return [moved, held];
    }

    // vllm.batched_tokens: vllm serve's chunked-prefill budget (the GPU's memory and name)
    function batchedTokens(m, gpuName) {
      const b = R.batched_tokens;
      const large = m.gpu_memory >= b.large_gpu_bytes && !String(gpuName).toLowerCase().includes("a100");
      return large ? b.large : b.other;
    }

    // vllm._chunk_reads_s: each later prefill chunk (a scheduler step) reads the offloaded
    // weights over the link again; decode.ttft counts the first read
    function chunkReads(setup, prompt, batch, gpuName) {
      const off = setup.weights.cpu + setup.weights.disk;
      if (!off) return 0;
      const passes = Math.ceil((prompt * batch) / batchedTokens(setup.machine, gpuName));
      const bytes = M.stepWeightBytes(setup.lay) * off;
      return (Math.max(passes - 1, 0) * bytes) / M.copyRate(setup.machine, "h2d", setup.pinned);
    }

    return {
      chunkReads: chunkReads,
      rules: R.rules,
      tiers: R.tiers,
      hitTokens: hitTokens,
      cacheBytes: cacheBytes,
      loadTime: loadTime,
      ttftWithPrefix: ttftWithPrefix,
      breakEvenPrompt: breakEvenPrompt,
      sessionsThatFit: sessionsThatFit,
      vllmSetup: vllmSetup,
      vllmOffload: vllmOffload,
      gib: R.gib,
    };
  }

  window.KvoReuse = { create: create };
})();
