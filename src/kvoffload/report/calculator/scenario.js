/*
 * The calculator's inputs as the scenario file `kvoffload predict` reads (YAML text): the catalog
 * machine by its id, or an inline profile with the reader's figures; and the reuse question's, on
 * its engine's prefix cache. Exposes window.KvoScenario.
 */
(function () {
  "use strict";

  function quantity(value, unit) {
    return '"' + String(value) + " " + unit + '"';
  }

  // studies/calculator_data.profile_mapping, as YAML: the machine with the reader's figures
  function profileYaml(f, host, gpu) {
    const name = '"calculator machine"';
    const lines = [
      "hardware:",
      "  id: calculator",
      "  name: " + name,
      "  gpu:",
      // calculator_llamacpp.gpu_mapping: the GPU's own name (vLLM's prefill budget reads it)
      "    name: " + JSON.stringify(gpu.name),
      "    memory: " + quantity(f.gpu_memory, "B"),
      "    memory_bandwidth: " + quantity(f.gpu_bandwidth, "B/s"),
      "    memory_bandwidth_achievable: " + quantity(f.gpu_bandwidth, "B/s"),
      "    attention_bandwidth: " + quantity(f.attention_bandwidth, "B/s"),
      "    flops_bf16: " + quantity(f.gpu_flops, "FLOP/s"),
    ];
    if (f.gpu_attention_flops !== null) lines.push("    attention_flops: " + quantity(f.gpu_attention_flops, "FLOP/s"));
    // calculator_llamacpp.gpu_mapping: the GPU's int8 rate, where it has one
    if (gpu.flops_int8 !== null) lines.push("    flops_int8: " + quantity(gpu.flops_int8, "FLOP/s"));
    lines.push(
      "  link:",
      "    name: " + name,
      "    raw_bandwidth: " + quantity(Math.max(f.h2d, f.d2h), "B/s"),
      "    h2d_bandwidth: " + quantity(f.h2d, "B/s"),
      "    d2h_bandwidth: " + quantity(f.d2h, "B/s"),
      "    latency: " + quantity(f.link_latency, "s")
    );
    if (f.pageable !== null) lines.push("    pageable_bandwidth: " + quantity(f.pageable, "B/s"));
    lines.push(
      "  host:",
      "    name: " + name,
      "    memory: " + quantity(f.host_memory, "B"),
      "    memory_bandwidth: " + quantity(f.host_bandwidth, "B/s"),
      "    flops: " + quantity(f.host_flops, "FLOP/s")
    );
    if (f.host_attention_flops !== null) lines.push("    attention_flops: " + quantity(f.host_attention_flops, "FLOP/s"));
    // calculator_llamacpp.host_mapping: the machine's sockets, cores, threads and reserve
    lines.push("    sockets: " + host.sockets);
    for (const key of ["cores", "performance_cores", "threads"]) {
      if (host[key] !== null) lines.push("    " + key + ": " + host[key]);
    }
    if (host.cross_socket_bandwidth !== null) lines.push("    cross_socket_bandwidth: " + quantity(host.cross_socket_bandwidth, "B/s"));
    if (host.memory_reserved !== null) lines.push("    memory_reserved: " + quantity(host.memory_reserved, "B"));
    lines.push(
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
    const lines = inp.edited.length ? profileYaml(inp.figures, inp.host, inp.gpu) : ["hardware: " + inp.machineId];
    if (inp.engine === "llamacpp") return llamacppText(inp, lines);
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
    return lines.join("\n") + "\n";
  }

  // studies/calculator_data.reuse_scenario_for, as YAML: the same machine, model and workload on
  // the rule's engine, its options (the weights' host GiB, the host tier's GiB) and the reuse: block
  function reuseText(inp, reuse, weightsGib) {
    const rule = reuse.rule;
    const options = Object.assign({}, rule.options);
    options[rule.weights_option] = weightsGib;
    options[rule.size_option] = reuse.hostGib;
    const pairs = Object.entries(options).map(([k, v]) => k + ": " + v);
    const lines = inp.edited.length ? profileYaml(inp.figures, inp.host, inp.gpu) : ["hardware: " + inp.machineId];
    lines.push(
      "model: " + inp.model.id,
      "engine: " + rule.engine,
      "precision: {weights: " + inp.weightsFormat + ", kv: " + inp.kvFormat + "}",
      "workload: {batch: " + inp.batch + ", prompt: " + inp.prompt + ", generate: " + inp.generate + "}",
      "pinned: " + inp.pinned,
      "options: {" + pairs.join(", ") + "}",
      "reuse:",
      "  cached_tokens: " + reuse.cached,
      "  tier: " + reuse.tier
    );
    return lines.join("\n") + "\n";
  }

  // calculator_llamacpp.options_of: llama.cpp's options as given (none: its defaults)
  function llamacppOptions(o) {
    const out = {};
    if (o.n_gpu_layers !== null) out.n_gpu_layers = o.n_gpu_layers;
    else out.fit = false; // every layer on the GPU, as the page's command says: no --fit search
    if (o.n_cpu_moe) out.n_cpu_moe = o.n_cpu_moe;
    if (o.cpu_moe) out.cpu_moe = true;
    if (o.no_kv_offload) out.no_kv_offload = true;
    if (o.threads !== null) out.threads = o.threads;
    if (o.numa) out.numa = o.numa;
    return out;
  }

  // studies/calculator_data.scenario_for with engine llamacpp: its options, no placement
  function llamacppText(inp, lines) {
    const pairs = Object.entries(llamacppOptions(inp.llamacpp)).map(([k, v]) => k + ": " + v);
    lines.push(
      "model: " + inp.model.id,
      "engine: llamacpp",
      "precision: {weights: " + inp.weightsFormat + ", kv: " + inp.kvFormat + "}",
      "workload: {batch: " + inp.batch + ", prompt: " + inp.prompt + ", generate: " + inp.generate + "}",
      "options: {" + pairs.join(", ") + "}"
    );
    return lines.join("\n") + "\n";
  }

  window.KvoScenario = { text: scenarioText, reuseText: reuseText };
})();
