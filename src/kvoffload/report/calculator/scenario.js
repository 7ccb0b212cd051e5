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
    const lines = inp.edited.length ? profileYaml(inp.figures) : ["hardware: " + inp.machineId];
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

  window.KvoScenario = { text: scenarioText, reuseText: reuseText };
})();
