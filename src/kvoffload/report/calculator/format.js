/*
 * Numbers for people, in the browser: the calculator page's and the chapter-03 widget's formats
 * (times, bytes, token counts), written once. Exposes window.KvoFormat.
 */
(function () {
  "use strict";

  const formats = new Map();

  // Intl.NumberFormat with at most `digits` significant digits (never an exponent)
  function nf(digits) {
    if (!formats.has(digits)) {
      formats.set(digits, new Intl.NumberFormat("en-US", { maximumSignificantDigits: digits }));
    }
    return formats.get(digits);
  }

  // seconds, shown in ms (in s from ten seconds up)
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

  // a figure as a field shows it: four significant digits, no trailing zeros
  function shortNumber(x) {
    return String(Number(x.toPrecision(4)));
  }

  // a token count for an axis: 32K, 1M, or the number itself
  function tokens(n) {
    if (n >= 1048576 && n % 1048576 === 0) return n / 1048576 + "M";
    if (n >= 1024 && n % 1024 === 0) return n / 1024 + "K";
    return nf(3).format(n);
  }

  window.KvoFormat = {
    nf: nf,
    formatMs: formatMs,
    formatBytes: formatBytes,
    shortNumber: shortNumber,
    tokens: tokens,
  };
})();
