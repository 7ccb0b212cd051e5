/*
 * The calculator page's form: its controls, the machine's figures in the fields, the inputs read
 * and checked (each problem a sentence, with inputs/ranges.py's ranges), the reuse question's
 * inputs, the engine's fields (llama.cpp's options, the context as 131072, 128K or 1M), and the
 * setup the step model evaluates. Exposes window.KvoForm.create(data, model), model being
 * KvoModel.create(data).
 */
(function () {
  "use strict";

  const F = window.KvoFormat;
  const shortNumber = F.shortNumber;
  const ENGINE_NAMES = { generic: "generic: the step model, placed by shares", llamacpp: "llama.cpp: -ngl, expert placement" };

  function create(data, M) {
    const $ = (id) => document.getElementById(id);
    const form = $("kvo-calc-form");
    const FIGURES = data.figures;
    const LC = window.KvoLlamacpp.create(data, M);

    function option(select, value, text) {
      const o = document.createElement("option");
      o.value = value;
      o.textContent = text;
      select.appendChild(o);
    }

    function machineById(id) {
      return data.machines.find((m) => m.id === id);
    }

    function modelById(id) {
      return data.models.find((m) => m.id === id);
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
      for (const m of data.machines) option($("kvo-machine"), m.id, m.name);
      for (const m of data.models) option($("kvo-model"), m.id, m.name);
      for (const e of data.llamacpp.engines) option($("kvo-engine"), e, ENGINE_NAMES[e] || e);
      buildFigureFields();
      $("kvo-machine").value = "article-reference";
      $("kvo-model").value = "llama-3.1-8b";
      $("kvo-engine").value = "generic";
      formatOptions();
      $("kvo-weights-format").value = "bf16";
      $("kvo-kv-format").value = "bf16";
      $("kvo-reuse-rule").value = data.reuse.rules[0].key;
      $("kvo-reuse-tier").value = "cpu";
      fillFigures();
      modelNote();
    }

    // the formats the engine takes for the model (llama.cpp: its GGUF files and -ctk types),
    // the chosen ones kept where they are offered; the engine's own fields shown
    function formatOptions() {
      const engine = $("kvo-engine").value;
      const model = modelById($("kvo-model").value);
      const lists = engine === "llamacpp"
        ? [model.llamacpp.formats, data.llamacpp.kv_formats]
        : [data.weight_formats, data.kv_formats];
      [["kvo-weights-format", lists[0]], ["kvo-kv-format", lists[1]]].forEach(([id, list]) => {
        const select = $(id);
        const keep = select.value;
        if (select.dataset.list === list.join(",")) return;
        select.replaceChildren();
        for (const f of list) option(select, f, f);
        select.dataset.list = list.join(",");
        select.value = list.includes(keep) ? keep : list[0];
      });
      $("kvo-generic-placement").hidden = engine !== "generic";
      $("kvo-llamacpp-placement").hidden = engine !== "llamacpp";
    }

    // a count of tokens as typed: 131072, 131,072, 128K (x 1,024) or 1M (x 1,048,576)
    function parseTokens(text) {
      const t = text.trim().replace(/[,_\s]/g, "");
      const hit = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(t);
      if (!hit) return NaN;
      const scale = { "": 1, k: 1024, m: 1048576 }[hit[2].toLowerCase()];
      return Number(hit[1]) * scale;
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
      // inputs/hardware.py's checks between figures
      if (figures.attention_bandwidth > figures.gpu_bandwidth * data.attention_slack) {
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
      const context = parseTokens($("kvo-context").value);
      const generate = readNumber("kvo-generate");
      const prompt = context - generate;
      const batch = readNumber("kvo-batch");
      const whole = (x, lo, hi) => Number.isInteger(x) && x >= lo && x <= hi;
      if (!whole(context, 2, 100000000)) {
        problems.push("Context: a whole number of tokens from 2 to 100,000,000 (128K = 131,072; 1M = 1,048,576).");
      }
      if (!whole(generate, 1, 1000000)) problems.push("Tokens generated: a whole number from 1 to 1,000,000.");
      else if (whole(context, 2, 100000000) && !(prompt >= 1)) {
        problems.push("Tokens generated: fewer than the context's " + context.toLocaleString("en-US") + " tokens.");
      }
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
      const engine = $("kvo-engine").value;
      const llamacpp = readLlamacpp(model, problems);
      return {
        engine: engine,
        llamacpp: llamacpp,
        host: machine.host,
        gpu: machine.gpu,
        hostCapacity: LC.hostCapacity(machine.host, figures.host_memory),
        context: context,
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

    // llama.cpp's options as typed (blank -ngl: every layer; blank -t: the machine's threads),
    // with the ranges engines/each/llamacpp.py Options accepts
    function readLlamacpp(model, problems) {
      const text = (id) => $(id).value.trim();
      const ngl = text("kvo-ngl") === "" ? null : Number(text("kvo-ngl"));
      const ncmoe = text("kvo-ncmoe") === "" ? 0 : Number(text("kvo-ncmoe"));
      const threads = text("kvo-threads") === "" ? null : Number(text("kvo-threads"));
      const max = data.llamacpp.max_layers;
      if ($("kvo-engine").value === "llamacpp") {
        if (ngl !== null && !(Number.isInteger(ngl) && ngl >= 0 && ngl <= max)) problems.push("-ngl: a whole number of layers from 0 to " + max + ", or blank for all.");
        if (!(Number.isInteger(ncmoe) && ncmoe >= 0 && ncmoe <= max)) problems.push("--n-cpu-moe: a whole number of layers from 0 to " + max + ".");
        if (threads !== null && !(Number.isInteger(threads) && threads >= 1 && threads <= 4096)) problems.push("Threads: a whole number from 1 to 4,096, or blank for the machine's.");
      }
      return {
        n_gpu_layers: ngl,
        n_cpu_moe: ncmoe,
        cpu_moe: $("kvo-cpumoe").checked,
        no_kv_offload: $("kvo-nokv").checked,
        threads: threads,
        numa: $("kvo-numa").value || null,
      };
    }

    // The reuse question's inputs and the problems with them, as the package refuses the scenario
    // calculator_data.reuse_scenario_for writes (engines/prefix_cache.py check, vLLM's options).
    function readReuse(inp) {
      const R = data.reuse;
      const key = $("kvo-reuse-rule").value;
      const rule = R.rules.find((r) => r.key === key) || null;
      const cached = readNumber("kvo-reuse-cached");
      const hostGib = readNumber("kvo-reuse-host");
      const tier = $("kvo-reuse-tier").value;
      const problems = [];
      if (rule === null) return { rule: null, cached: cached, tier: tier, hostGib: hostGib, problems: problems };
      if (inp.weights.disk > 0) {
        problems.push(rule.label + " keeps no weights on disk: give their disk share to host memory.");
      }
      if (!(Number.isInteger(cached) && cached >= 0 && cached <= R.max_cached_tokens)) {
        problems.push("Cached tokens: a whole number from 0 to " + R.max_cached_tokens.toLocaleString("en-US") + ".");
      } else if (Number.isInteger(inp.prompt) && cached > inp.prompt) {
        problems.push("Cached tokens: at most the context's " + inp.prompt.toLocaleString("en-US") + " prompt tokens.");
      }
      if (!(hostGib >= 0 && hostGib <= R.max_host_gib)) {
        problems.push("Host memory for the cache: a number of GiB from 0 to " + R.max_host_gib.toLocaleString("en-US") + ".");
      } else if (hostGib * R.gib > inp.figures.host_memory) {
        problems.push(
          "Host memory for the cache: " + F.formatBytes(hostGib * R.gib) + " is more than the machine's " +
            F.formatBytes(inp.figures.host_memory) + "."
        );
      } else if (tier !== "gpu" && !rule.tiers.includes(tier)) {
        problems.push(rule.label + " has no " + (tier === "disk" ? "disk tier." : "host tier."));
      } else if (tier === "cpu" && !(hostGib > 0)) {
        problems.push("The host tier holds nothing: give it some GiB of host memory.");
      }
      return { rule: rule, cached: cached, tier: tier, hostGib: hostGib, problems: problems };
    }

    // the setup the step model evaluates for the inputs (overrides: shares to use instead)
    function setupOf(inp, overrides) {
      return M.setupOf(
        Object.assign(
          {
            machine: inp.figures,
            model: inp.model,
            weightsFormat: inp.weightsFormat,
            kvFormat: inp.kvFormat,
            weights: inp.weights,
            kv: inp.kv,
            attention: inp.attention,
            overlap: inp.overlap,
            pinned: inp.pinned,
            hostCapacity: inp.hostCapacity,
          },
          overrides || {}
        )
      );
    }

    // What the test drives: set the page's inputs as a reader would (an input event follows).
    function fill(inputs) {
      if (inputs.machine !== undefined) {
        $("kvo-machine").value = inputs.machine;
        fillFigures();
      }
      for (const [key, value] of Object.entries(inputs.figures || {})) {
        const f = FIGURES.find((x) => x.key === key);
        $("kvo-fig-" + key).value = value === null ? "" : String(value / f.scale);
      }
      if (inputs.engine !== undefined) $("kvo-engine").value = inputs.engine;
      if (inputs.model !== undefined) $("kvo-model").value = inputs.model;
      formatOptions();
      const ids = {
        weights_format: "kvo-weights-format",
        kv_format: "kvo-kv-format",
        context: "kvo-context",
        generate: "kvo-generate",
        batch: "kvo-batch",
        attention: "kvo-attention",
        overlap: "kvo-overlap",
        budget: "kvo-budget",
      };
      for (const [key, id] of Object.entries(ids)) if (inputs[key] !== undefined) $(id).value = String(inputs[key]);
      if (inputs.prompt !== undefined) {
        $("kvo-context").value = String(inputs.prompt + (readNumber("kvo-generate") || 0));
      }
      const lc = inputs.llamacpp;
      if (lc !== undefined) {
        const blank = (x) => (x === null || x === undefined ? "" : String(x));
        $("kvo-ngl").value = blank(lc.n_gpu_layers);
        $("kvo-ncmoe").value = blank(lc.n_cpu_moe || 0);
        $("kvo-cpumoe").checked = Boolean(lc.cpu_moe);
        $("kvo-nokv").checked = Boolean(lc.no_kv_offload);
        $("kvo-threads").value = blank(lc.threads);
        $("kvo-numa").value = lc.numa || "";
      }
      for (const group of ["weights", "kv"]) {
        if (inputs[group] === undefined) continue;
        $("kvo-" + group + "-cpu").value = String(inputs[group].cpu * 100);
        $("kvo-" + group + "-disk").value = String(inputs[group].disk * 100);
      }
      if (inputs.pinned !== undefined) $("kvo-pinned").checked = Boolean(inputs.pinned);
      const r = inputs.reuse;
      if (r !== undefined) {
        $("kvo-reuse-rule").value = r === null ? "off" : r.rule;
        if (r !== null) {
          $("kvo-reuse-cached").value = String(r.cached_tokens);
          $("kvo-reuse-tier").value = r.tier;
          $("kvo-reuse-host").value = String(r.host_cache_gib);
        }
      }
      form.dispatchEvent(new Event("input", { bubbles: true }));
    }

    return {
      form: form,
      setupControls: setupControls,
      formatOptions: formatOptions,
      parseTokens: parseTokens,
      modelById: modelById,
      fillFigures: fillFigures,
      modelNote: modelNote,
      readInputs: readInputs,
      readReuse: readReuse,
      setupOf: setupOf,
      fill: fill,
    };
  }

  window.KvoForm = { create: create };
})();
