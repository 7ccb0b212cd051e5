/*
 * Chapter 03's try-it widget: sliders for the link's bandwidth, the batch and the context, and
 * TPOT against the context with no overlap and with perfect overlap, every figure computed by
 * the step model's one mirror (model.js) over the setup studies/calculator_data.setup_data
 * exports. Runs after format.js, model.js and chart.js. Exposes window.KvoTpotWidget.mount.
 */
(function () {
  "use strict";

  const F = window.KvoFormat;
  const STEPS = 200; // slider positions on each log scale
  const MODES = [
    { mode: "none", name: "no overlap", cls: "kvo-line-a" },
    { mode: "perfect", name: "perfect overlap", cls: "kvo-line-b" },
  ];

  // a log slider's value at position i of STEPS, from lo to hi, to two significant digits
  function logValue(i, lo, hi) {
    const x = lo * Math.pow(hi / lo, i / STEPS);
    return Math.min(hi, Math.max(lo, Number(x.toPrecision(2))));
  }

  // the position whose value is nearest x (on the log scale)
  function logPosition(x, lo, hi) {
    return Math.min(STEPS, Math.max(0, Math.round((STEPS * Math.log(x / lo)) / Math.log(hi / lo))));
  }

  // The machine with a link of `gbps` GB/s each way (the pageable rate at most that): the
  // System's link figures, as tests/book/test_browser_calculator.py changes them in Python.
  function withLink(figures, gbps) {
    const rate = gbps * 1e9;
    const pageable = figures.pageable === null ? null : Math.min(figures.pageable, rate);
    return Object.assign({}, figures, { h2d: rate, d2h: rate, pageable: pageable });
  }

  // Mount the widget in `root` (the markup report/tpot_widget.py writes) over `data` (one
  // setup's export) and `view` ({context, batch, generate, budget_ms}: where the sliders start).
  function mount(root, data, view) {
    const M = window.KvoModel.create(data);
    const machine = data.machines[0];
    const model = data.models[0];
    const s = data.setup;
    const q = (name) => root.querySelector('[data-kvo="' + name + '"]');
    const generate = view.generate;
    const hiContext = Math.max(2, (model.max_positions === null ? 1048576 : model.max_positions) - generate);
    const loContext = Math.max(1, Math.min(1000, view.context, Math.floor(hiContext / 4)));
    const linkGbps = machine.figures.h2d / 1e9;
    const linkLo = Math.min(1, linkGbps);
    const linkHi = Math.max(1000, linkGbps);
    const sliders = {
      link: { input: q("link_slider"), start: logPosition(linkGbps, linkLo, linkHi), exact: linkGbps,
              value: (i) => logValue(i, linkLo, linkHi) },
      context: { input: q("context_slider"), start: logPosition(view.context, loContext, hiContext),
                 exact: view.context, value: (i) => Math.round(logValue(i, loContext, hiContext)) },
      batch: { input: q("batch_slider"), start: view.batch, exact: view.batch, value: (i) => i },
    };
    sliders.link.input.max = String(STEPS);
    sliders.context.input.max = String(STEPS);
    sliders.batch.input.max = String(Math.max(64, view.batch));
    for (const sl of Object.values(sliders)) sl.input.value = String(sl.start);
    // a slider where it started means the chapter's exact figure; moved, the value it shows
    const valueOf = (sl) => {
      const i = Number(sl.input.value);
      return i === sl.start ? sl.exact : sl.value(i);
    };
    const put = (key, text, value) => {
      const el = q(key);
      el.textContent = text;
      el.dataset.value = String(value);
    };

    function update() {
      const gbps = valueOf(sliders.link);
      const context = valueOf(sliders.context);
      const batch = valueOf(sliders.batch);
      put("link", F.nf(3).format(gbps) + " GB/s", gbps);
      put("context", context.toLocaleString("en-US") + " tokens", context);
      put("batch", String(batch), batch);
      const setups = MODES.map((m) =>
        M.setupOf({
          machine: withLink(machine.figures, gbps),
          model: model,
          weightsFormat: s.weights_format,
          kvFormat: s.kv_format,
          weights: s.weights,
          kv: s.kv,
          attention: s.attention,
          overlap: m.mode,
          pinned: s.pinned,
        })
      );
      const xs = window.KvoChart.contexts(loContext, hiContext, 40);
      const series = MODES.map((m, k) => ({
        name: m.name,
        cls: m.cls,
        points: xs.map((x) => {
          const r = M.predictSetup(setups[k], x, generate, batch);
          return { x: x, y: r.tpot * 1e3, fits: r.shortfalls.length === 0 };
        }),
      }));
      const here = setups.map((setup) => M.predictSetup(setup, context, generate, batch));
      MODES.forEach((m, k) => put("tpot_" + m.mode + "_ms", F.formatMs(here[k].tpot), here[k].tpot * 1e3));
      const within = here.map((r) => r.tpot * 1e3 <= view.budget_ms);
      put(
        "verdict",
        within[0] ? "within the budget either way" : within[1] ? "within the budget only with perfect overlap" : "over the budget either way",
        within.join(",")
      );
      const fits = here[0].shortfalls.length === 0;
      put("fits", fits ? "" : " The machine does not hold this batch and context: the curves are dashed where it does not.", fits);
      window.KvoChart.draw(q("chart"), {
        lo: loContext,
        hi: hiContext,
        series: series,
        budget: view.budget_ms,
        markers: here.map((r, k) => ({ x: context, y: r.tpot * 1e3, cls: MODES[k].cls + "-dot" })),
        labels: false,
        minWidth: 280,
      });
    }

    root.addEventListener("input", update);
    let resized = null;
    window.addEventListener("resize", () => {
      clearTimeout(resized);
      resized = setTimeout(update, 100);
    });
    update();
  }

  window.KvoTpotWidget = { mount: mount, withLink: withLink };
})();
