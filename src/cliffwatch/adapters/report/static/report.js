/* cliffwatch charts: turns the chart specs of a report (cliffwatch/adapters/report/charts.py) into uPlot
 * charts with phase and fault bands. No network, no dependencies but uPlot. Reports run it on the JSON in
 * #report-data; the dashboard can call CliffwatchCharts.render(root, data) with the same specs, and
 * CliffwatchCharts.renderSweep(root, data) with a sweep's (charts over the offered rate, capacity marked). */
(function () {
  "use strict";
  var PRINT_WIDTH = 680; // A4 portrait less 15 mm margins, in CSS pixels
  var PHASE_FILLS = ["rgba(0,0,0,0.035)", "rgba(0,0,0,0.085)"];
  var FAULT_STROKE = "rgba(213,94,0,0.55)"; // Okabe-Ito vermillion
  var FAULT_FILL = "rgba(213,94,0,0.07)";
  var EMPTY_FILL = "rgba(90,90,90,0.16)"; // a second that offered requests and completed none
  var made = [];

  function alpha(hex, a) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }

  function fmt(v, unit) {
    if (v == null || !isFinite(v)) return "–";
    var a = Math.abs(v), text;
    if (unit === "ms" && a >= 1000) { text = (v / 1000).toFixed(a >= 10000 ? 1 : 2); unit = "s"; }
    else text = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
    return unit ? text + " " + unit : text;
  }

  function hatch(ctx) {
    var c = document.createElement("canvas"), px = uPlot.pxRatio, s = Math.round(8 * px);
    c.width = c.height = s;
    var g = c.getContext("2d");
    g.strokeStyle = FAULT_STROKE;
    g.lineWidth = px;
    g.beginPath(); g.moveTo(0, s); g.lineTo(s, 0); g.stroke();
    return ctx.createPattern(c, "repeat");
  }

  // Phases: alternating shades named at the top; faults: hatched, named at the bottom. Drawn under the series.
  function bandsPlugin(bands) {
    return { hooks: { drawClear: [function (u) {
      var ctx = u.ctx, b = u.bbox, px = uPlot.pxRatio, phase = 0;
      ctx.save();
      ctx.beginPath(); ctx.rect(b.left, b.top, b.width, b.height); ctx.clip();
      ctx.font = Math.round(11 * px) + "px system-ui, sans-serif";
      ctx.textBaseline = "top";
      bands.forEach(function (band) {
        var x0 = u.valToPos(band.start, "x", true), x1 = u.valToPos(band.end, "x", true);
        if (band.kind === "phase") {
          ctx.fillStyle = PHASE_FILLS[phase++ % 2];
          ctx.fillRect(x0, b.top, x1 - x0, b.height);
          ctx.fillStyle = "#333";
          ctx.fillText(band.label + (band.detail && band.detail !== band.label ? " (" + band.detail + ")" : ""),
            x0 + 4 * px, b.top + 3 * px, Math.max(x1 - x0 - 8 * px, 0));
        } else {
          ctx.fillStyle = FAULT_FILL;
          ctx.fillRect(x0, b.top, x1 - x0, b.height);
          ctx.fillStyle = hatch(ctx);
          ctx.fillRect(x0, b.top, x1 - x0, b.height);
          ctx.fillStyle = "#8a3c00";
          ctx.textBaseline = "bottom";
          ctx.fillText("fault: " + band.label + (band.detail ? " (" + band.detail + ")" : ""),
            x0 + 4 * px, b.top + b.height - 3 * px, Math.max(x1 - x0 - 8 * px, 0));
          ctx.textBaseline = "top";
        }
      });
      ctx.restore();
    }] } };
  }

  // Latency charts: seconds that offered requests and completed none are shaded from the axis up and named,
  // so a collapsed second reads as "no completion", not as a gap in the data.
  function noCompletionPlugin(xs, indexes) {
    return { hooks: { drawClear: [function (u) {
      var ctx = u.ctx, b = u.bbox, px = uPlot.pxRatio, spans = [];
      indexes.forEach(function (i) {
        var last = spans[spans.length - 1];
        if (last && last.to === i - 1) last.to = i; else spans.push({ from: i, to: i });
      });
      ctx.save();
      ctx.beginPath(); ctx.rect(b.left, b.top, b.width, b.height); ctx.clip();
      ctx.font = Math.round(11 * px) + "px system-ui, sans-serif";
      ctx.textBaseline = "bottom";
      spans.forEach(function (span) {
        var x0 = u.valToPos(xs[span.from] - 0.5, "x", true), x1 = u.valToPos(xs[span.to] + 0.5, "x", true);
        ctx.fillStyle = EMPTY_FILL;
        ctx.fillRect(x0, b.top, x1 - x0, b.height);
        ctx.fillStyle = "#444";
        ctx.fillText("no completion", x0 + 3 * px, b.top + b.height - 16 * px, Math.max(x1 - x0 - 6 * px, 0));
      });
      ctx.restore();
    }] } };
  }

  function height(width) { return Math.max(220, Math.min(320, Math.round(width * 0.36))); }

  // The y scales and axes of a chart spec: from zero (or fixed bounds, or log) and labelled.
  function yAxes(spec, scales, axes) {
    spec.axes.forEach(function (axis, i) {
      scales[axis.scale] = axis.log ? { distr: 3, log: 10 } : axis.range ? { range: axis.range } : {
        range: function (u, min, max) { return [0, max > 0 ? max * 1.08 : 1]; } };
      axes.push({ scale: axis.scale, label: axis.label, side: axis.side === "right" ? 1 : 3,
        grid: { show: i === 0 }, size: 60 });
    });
  }

  // The y series of a chart spec and the bands filled between them (stacked, or named pairs).
  function seriesOf(spec, showPoints, gaps) {
    var series = [], bands = [], empty = {};
    (spec.no_completion || []).forEach(function (i) { empty[i] = true; });
    spec.series.forEach(function (s, i) {
      var shown = s.shown;
      series.push({
        label: s.unit ? s.label + " (" + s.unit + ")" : s.label, scale: s.scale, stroke: s.color,
        width: s.width, dash: s.dash.length ? s.dash : undefined, spanGaps: gaps,
        fill: s.fill && (!spec.stacked || i === 0) ? alpha(s.color, 0.45) : undefined,
        value: function (u, v, si, idx) {
          if (v == null && idx != null && empty[idx]) return "no completion";
          return fmt(shown && idx != null ? shown[idx] : v, s.unit);
        },
        points: { show: s.points && showPoints, size: gaps ? 6 : 4, fill: s.color },
      });
      if (spec.stacked && i > 0) bands.push({ series: [i + 1, i], fill: alpha(s.color, 0.45) });
    });
    (spec.fill_between || []).forEach(function (pair) {
      bands.push({ series: [pair[1] + 1, pair[0] + 1], fill: alpha(spec.series[pair[1]].color, 0.22) });
    });
    return { series: series, bands: bands };
  }

  function options(spec, data, width) {
    var end = data.x.length ? data.x[data.x.length - 1] + 0.5 : 1;
    data.bands.forEach(function (band) { end = Math.max(end, band.end); });
    var scales = { x: { time: false, range: [0, end] } }, axes = [{ label: data.x_label, scale: "x" }];
    yAxes(spec, scales, axes);
    var x = { label: "time (s)", value: function (u, v) { return v == null ? "–" : (v - 0.5).toFixed(0) + " s"; } };
    // Isolated seconds (a latency between seconds with no completion) would vanish without points.
    var ys = seriesOf(spec, data.x.length <= 900, false);
    return { width: width, height: height(width), scales: scales, axes: axes, series: [x].concat(ys.series),
      bands: ys.bands, cursor: { sync: { key: "cliffwatch-" + (data.run_id || "") } },
      legend: { live: true }, plugins: [bandsPlugin(data.bands)].concat(
        spec.no_completion ? [noCompletionPlugin(data.x, spec.no_completion)] : []) };
  }

  // Sweeps: rates where the generator could not keep up hatched under the series; usable capacity (solid)
  // and the cliff (dashed) drawn over them, each named beside its line.
  function markersPlugin(markers) {
    function x(u, at) { return Math.round(u.valToPos(at, "x", true)); }
    return { hooks: {
      drawClear: [function (u) {
        var ctx = u.ctx, b = u.bbox, px = uPlot.pxRatio;
        markers.forEach(function (m) {
          if (m.kind !== "invalid") return;
          var x0 = x(u, m.at);
          ctx.save();
          ctx.fillStyle = FAULT_FILL; ctx.fillRect(x0, b.top, b.left + b.width - x0, b.height);
          ctx.fillStyle = hatch(ctx); ctx.fillRect(x0, b.top, b.left + b.width - x0, b.height);
          ctx.fillStyle = "#8a3c00"; ctx.font = Math.round(11 * px) + "px system-ui, sans-serif";
          ctx.textBaseline = "bottom";
          ctx.fillText(m.label, x0 + 4 * px, b.top + b.height - 3 * px, Math.max(b.left + b.width - x0 - 8 * px, 0));
          ctx.restore();
        });
      }],
      draw: [function (u) {
        var ctx = u.ctx, b = u.bbox, px = uPlot.pxRatio, row = 0, labels = [];
        ctx.save();
        ctx.font = "600 " + Math.round(11 * px) + "px system-ui, sans-serif";
        ctx.textBaseline = "top";
        markers.forEach(function (m) {
          if (m.kind === "invalid") return;
          var x0 = x(u, m.at), cliff = m.kind === "cliff", right = cliff, w = ctx.measureText(m.label).width;
          // The cliff is named right of its line and usable capacity left of its own, unless that leaves the plot.
          if (right && x0 + 5 * px + w > b.left + b.width) right = false;
          else if (!right && x0 - 5 * px - w < b.left) right = true;
          labels.push({ m: m, x0: x0, cliff: cliff, right: right, w: w, at: x0 + (right ? 5 : -5) * px,
            y: b.top + (4 + 15 * row++) * px });
        });
        // Each name on a white ground, so the series under it cannot garble it; the lines over the grounds.
        ctx.fillStyle = "rgba(255,255,255,0.85)";
        labels.forEach(function (l) {
          ctx.fillRect(l.right ? l.at - 2 * px : l.at - l.w - 2 * px, l.y - px, l.w + 4 * px, 14 * px);
        });
        labels.forEach(function (l) {
          ctx.strokeStyle = l.m.color; ctx.lineWidth = 2 * px;
          ctx.setLineDash(l.cliff ? [6 * px, 4 * px] : []);
          ctx.beginPath(); ctx.moveTo(l.x0, b.top); ctx.lineTo(l.x0, b.top + b.height); ctx.stroke();
        });
        labels.forEach(function (l) {
          ctx.fillStyle = l.m.color;
          ctx.textAlign = l.right ? "left" : "right";
          ctx.fillText(l.m.label, l.at, l.y);
        });
        ctx.restore();
      }],
    } };
  }

  function sweepOptions(spec, frame, width) {
    var end = 0;
    frame.x.forEach(function (v) { end = Math.max(end, v); });
    frame.markers.forEach(function (m) { end = Math.max(end, m.at); });
    var scales = { x: { time: false, range: [0, end > 0 ? end * 1.06 : 1] } };
    var axes = [{ label: frame.x_label, scale: "x" }];
    yAxes(spec, scales, axes);
    var x = { label: frame.x_label, value: function (u, v) { return v == null ? "–" : fmt(v, frame.x_unit); } };
    var ys = seriesOf(spec, true, true); // a point per measured rate, joined across rates another variant had
    return { width: width, height: height(width), scales: scales, axes: axes, series: [x].concat(ys.series),
      bands: ys.bands, cursor: { sync: { key: "cliffwatch-sweep-" + frame.id } }, legend: { live: true },
      plugins: [markersPlugin(frame.markers)] };
  }

  // uPlot's legend markers are plain boxes; draw each series' own line (dash, width, fill) instead.
  function markers(el, spec) {
    var rows = el.querySelectorAll(".u-legend .u-series");
    spec.series.forEach(function (s, i) {
      var marker = rows[i + 1] && rows[i + 1].querySelector(".u-marker");
      if (!marker) return;
      var c = document.createElement("canvas"), px = window.devicePixelRatio || 1;
      c.width = 30 * px; c.height = 12 * px;
      var g = c.getContext("2d");
      g.scale(px, px);
      if (s.fill) { g.fillStyle = alpha(s.color, 0.45); g.fillRect(0, 2, 30, 10); }
      g.strokeStyle = s.color; g.lineWidth = Math.max(s.width, 1.5); g.setLineDash(s.dash);
      g.beginPath(); g.moveTo(0, s.fill ? 2 : 6); g.lineTo(30, s.fill ? 2 : 6); g.stroke();
      c.className = "line-marker";
      c.setAttribute("aria-hidden", "true");
      c.style.width = "30px"; c.style.height = "12px";
      marker.replaceWith(c);
    });
  }

  function render(root, data) {
    var charts = {};
    data.charts.forEach(function (spec) { charts[spec.id] = spec; });
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      var spec = charts[el.getAttribute("data-chart")];
      if (!spec || !data.x.length) return;
      var columns = [data.x].concat(spec.series.map(function (s) { return s.values; }));
      var plot = new uPlot(options(spec, data, el.clientWidth || 800), columns, el);
      markers(el, spec);
      made.push({ id: spec.id, el: el, plot: plot });
    });
    return made;
  }

  // A sweep report's data: frames (one per retry variant, and the comparison), each with its own x of rates.
  function renderSweep(root, data) {
    var charts = {};
    data.frames.forEach(function (frame) {
      frame.charts.forEach(function (spec) { charts[spec.id] = { spec: spec, frame: frame }; });
    });
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      var found = charts[el.getAttribute("data-chart")];
      if (!found || !found.frame.x.length) return;
      var spec = found.spec, frame = found.frame;
      var columns = [frame.x].concat(spec.series.map(function (s) { return s.values; }));
      var plot = new uPlot(sweepOptions(spec, frame, el.clientWidth || 800), columns, el);
      markers(el, spec);
      made.push({ id: spec.id, el: el, plot: plot });
    });
    return made;
  }

  function fit(width) {
    made.forEach(function (c) {
      var w = width || c.el.clientWidth || 800;
      c.plot.setSize({ width: w, height: height(w) });
    });
  }

  window.CliffwatchCharts = { render: render, renderSweep: renderSweep, charts: made, fit: fit, legend: markers };
  var source = document.getElementById("report-data");
  if (source) {
    var data = JSON.parse(source.textContent);
    (data.kind === "sweep" ? renderSweep : render)(document, data);
    var timer = null;
    window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(function () { fit(); }, 100); });
    window.addEventListener("beforeprint", function () { fit(PRINT_WIDTH); });
    window.addEventListener("afterprint", function () { fit(); });
    document.body.setAttribute("data-charts-ready", String(made.length));
  }
})();
