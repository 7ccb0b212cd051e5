/*
 * The "best placement that fits" button: kvoffload advise's fastest configuration for the chosen
 * catalog machine and model, looked up in studies/calculator_advice.py's table (advise_all at a
 * grid of contexts: the smallest at or above the reader's), shown with its command line and, when
 * it runs on llama.cpp, put in the form. Exposes window.KvoAdvice.create(data, form).
 */
(function () {
  "use strict";

  const { nf } = window.KvoFormat;

  function create(data, form) {
    const A = data.advice;

    // calculator_advice.machine_advice's row for the inputs, and the grid context it answers
    function lookup(inp) {
      const grid = A.contexts;
      let i = grid.findIndex((c) => c >= inp.context);
      if (i < 0) i = grid.length - 1;
      const rows = A.best[inp.machineId][inp.model.id];
      return { row: rows[i], grid: grid[i] };
    }

    // advise's options as the page's llama.cpp fields (-ot exps=CPU: every routed expert on the CPU)
    function llamacppFields(options) {
      return {
        n_gpu_layers: options.n_gpu_layers === undefined ? null : options.n_gpu_layers,
        n_cpu_moe: options.n_cpu_moe || 0,
        cpu_moe: options.override_tensor === "exps=CPU",
        no_kv_offload: Boolean(options.no_kv_offload),
        threads: null,
      };
    }

    // the answer in words; a llama.cpp answer is put in the form (the reader's context kept)
    function best(inp) {
      const { row, grid } = lookup(inp);
      const at = grid.toLocaleString("en-US") + " tokens";
      const mine = inp.edited.length ? " (for the catalog machine, not your figures)" : "";
      if (row === null) {
        return { row: null, text: "kvoffload advise" + mine + ": nothing fits at " + at + "." };
      }
      const engine = row.engine === "llamacpp" ? "llama.cpp" : row.engine;
      const text =
        "kvoffload advise at " + row.context.toLocaleString("en-US") + " tokens" + mine + ": " + engine + ", " +
        row.weights + " weights, KV " + row.kv + ", " + row.offload + ": " + nf(3).format(row.tokens_per_s) +
        " tokens/s. " + (row.engine === "llamacpp" ? "Put in the form." : "The page does not evaluate vLLM; run:") +
        " " + row.command;
      if (row.engine === "llamacpp") {
        form.fill({
          engine: "llamacpp",
          weights_format: row.weights,
          kv_format: row.kv_format,
          llamacpp: llamacppFields(row.options),
        });
      }
      return { row: row, grid: grid, text: text };
    }

    return { lookup: lookup, best: best, llamacppFields: llamacppFields };
  }

  window.KvoAdvice = { create: create };
})();
