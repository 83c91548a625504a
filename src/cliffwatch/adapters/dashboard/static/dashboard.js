/* cliffwatch dashboard: live status on the runs page, live charts on a run's page (the report's charts,
 * through CliffwatchCharts.render), and the trend charts. Served by the instance itself, like uPlot; the
 * Content-Security-Policy allows no inline script, so the pages' data comes as JSON in #dashboard-data. */
(function () {
  "use strict";
  var POLL_MS = 2000;
  var IDLE_POLL_MS = 5000;  // the runs list with nothing in progress: only to notice runs started elsewhere
  var ACTIVE = { queued: true, running: true };
  var OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
  var DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3], [14, 5]];
  var page = document.body.getAttribute("data-page");

  function data() {
    var el = document.getElementById("dashboard-data");
    return el ? JSON.parse(el.textContent) : {};
  }

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(function (r) {
      if (r.status === 401) { window.location.assign("/ui/login?next=" + encodeURIComponent(window.location.pathname)); throw new Error("logged out"); }
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    });
  }

  function cell(text) { var td = document.createElement("td"); td.textContent = text; return td; }

  // An ISO 8601 time in UTC as the server's pages show it: "2026-11-30 11:29:05 UTC".
  function when(text) {
    var m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?(\+00:00|Z)$/.exec(text || "");
    return m ? m[1] + " " + m[2] + " UTC" : (text || "–");
  }

  function scoreText(run) {
    if (run.score != null) return run.score.toFixed(1) + (run.passed ? " pass" : run.passed === false ? " fail" : "");
    if (run.usable_rps != null) return run.usable_rps.toFixed(1) + " " + run.capacity_unit + " usable";
    return "–";
  }

  function pill(status) {
    var span = document.createElement("span");
    span.className = "pill " + status; span.textContent = status;
    return span;
  }

  /* Runs: the table's rows follow the server's list (same filters) while the page is open and shown: every
   * POLL_MS while a listed run is queued or running, every IDLE_POLL_MS otherwise, so a run started elsewhere
   * (another tab, the API, a schedule) appears without a reload. Nothing is asked while the page is hidden; it
   * catches up as soon as it is shown again. An older page (a cursor) only follows its own active runs: a new
   * run is never listed there. */
  function pollRuns() {
    var table = document.getElementById("runs-table");
    if (!table) return;
    var body = table.tBodies[0];
    var firstPage = !/[?&]cursor=/.test(window.location.search);
    var active = table.getAttribute("data-live") === "true";
    var timer = null, asking = false;

    function row(run) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-run", run.id);
      var link = document.createElement("a"); link.href = "/ui/runs/" + encodeURIComponent(run.id); link.textContent = run.id;
      var first = document.createElement("td"); first.appendChild(link);
      tr.appendChild(first); tr.appendChild(cell(run.scenario)); tr.appendChild(cell(run.kind));
      var st = document.createElement("td"); st.className = "status"; tr.appendChild(st);
      var sc = cell(""); sc.className = "score"; tr.appendChild(sc);
      var created = cell(when(run.created_at)); created.className = "when";
      tr.appendChild(created); tr.appendChild(cell(run.triggered_by));
      return tr;
    }

    function show(runs) {
      var rows = {};
      Array.prototype.forEach.call(body.rows, function (tr) {
        var id = tr.getAttribute("data-run");
        if (id) rows[id] = tr;
      });
      var listed = {};
      runs.forEach(function (run, i) {
        listed[run.id] = true;
        var tr = rows[run.id] || row(run);
        if (body.rows[i] !== tr) body.insertBefore(tr, body.rows[i] || null);
        tr.className = "status-" + run.status;
        tr.querySelector("td.status").replaceChildren(pill(run.status));
        tr.querySelector("td.score").textContent = scoreText(run);
      });
      // Runs the server no longer lists here (pushed to an older page, or out of a status filter) leave.
      Object.keys(rows).forEach(function (id) { if (!listed[id]) rows[id].remove(); });
      var empty = body.querySelector("tr.empty");
      if (runs.length && empty) empty.remove();
      if (!runs.length && !empty) {
        var tr = document.createElement("tr"); tr.className = "empty";
        var td = cell("No runs match."); td.colSpan = 7; tr.appendChild(td); body.appendChild(tr);
      }
    }

    function schedule(ms) {
      clearTimeout(timer); timer = null;
      if (document.hidden || (!firstPage && !active)) return;
      timer = setTimeout(tick, ms != null ? ms : (active ? POLL_MS : IDLE_POLL_MS));
    }

    function tick() {
      timer = null;
      if (asking) return;
      asking = true;
      getJSON("/ui/api/runs" + window.location.search).then(function (answer) {
        asking = false;
        show(answer.runs);
        active = answer.runs.some(function (run) { return !!ACTIVE[run.status]; });
        table.setAttribute("data-live", String(active));
        table.setAttribute("data-polled", String(Number(table.getAttribute("data-polled") || 0) + 1));
        schedule();
      }).catch(function () { asking = false; schedule(POLL_MS * 2); });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { clearTimeout(timer); timer = null; } else if (timer === null && (firstPage || active)) tick();
    });
    schedule();
  }

  function clearCharts() {
    var made = window.CliffwatchCharts.charts;
    made.forEach(function (c) { c.plot.destroy(); });
    made.length = 0;
  }

  function figures(root, charts) {
    charts.charts.forEach(function (spec) {
      if (root.querySelector('[data-chart="' + spec.id + '"]')) return;
      var fig = document.createElement("figure"); fig.className = "chart"; fig.id = "chart-" + spec.id;
      var h = document.createElement("h3"); h.textContent = spec.title;
      var plot = document.createElement("div"); plot.className = "plot"; plot.setAttribute("data-chart", spec.id);
      var cap = document.createElement("figcaption"); cap.textContent = spec.caption;
      fig.appendChild(h); fig.appendChild(plot); fig.appendChild(cap); root.appendChild(fig);
    });
  }

  function drawRun(charts) {
    var root = document.getElementById("chart-root");
    if (!root || !charts || !window.CliffwatchCharts) return 0;
    figures(root, charts);
    clearCharts();
    return window.CliffwatchCharts.render(root, charts).length;
  }

  // A sweep's sections and chart data are its report's (report/render.py's sweep_parts), drawn as the report
  // draws them. ``body`` (from the polling view) is the server's markup, every value in it escaped there, as
  // the page itself shows it; it replaces the sections of the previous step.
  function drawSweep(root, sweepData, body) {
    if (!root || !sweepData || !window.CliffwatchCharts) return 0;
    if (body != null) { clearCharts(); root.innerHTML = body; }
    var drawn = window.CliffwatchCharts.renderSweep(root, sweepData).length;
    document.body.setAttribute("data-sweep-steps", String(root.querySelectorAll("table.steps tbody tr").length));
    return drawn;
  }

  /* A run: its charts, redrawn every POLL_MS while it is in progress; a sweep: its sections and charts, redrawn
   * when a step has been measured since. The page reloads once when it ends (the final sections are the
   * server's). */
  function runPage() {
    var initial = data(), facts = document.getElementById("run-facts");
    var drawn = drawRun(initial.charts);
    var sweepRoot = document.getElementById("sweep-charts");
    var sweepVersion = sweepRoot ? sweepRoot.getAttribute("data-version") : null;
    if (initial.sweep) drawn = drawSweep(sweepRoot, initial.sweep, null);
    document.body.setAttribute("data-charts-ready", String(drawn));
    var resized = null;
    window.addEventListener("resize", function () {
      clearTimeout(resized);
      resized = setTimeout(function () { if (window.CliffwatchCharts) window.CliffwatchCharts.fit(); }, 100);
    });
    if (!facts || facts.getAttribute("data-active") !== "true") return;
    var id = facts.getAttribute("data-run"), updates = 0;
    function tick() {
      getJSON("/ui/api/runs/" + encodeURIComponent(id)).then(function (answer) {
        var status = document.getElementById("run-status");
        status.className = "pill " + answer.run.status; status.textContent = answer.run.status;
        var started = document.getElementById("run-started");
        if (started && answer.run.started_at) started.textContent = when(answer.run.started_at);
        if (!answer.active) { window.location.reload(); return; }
        if (answer.sweep && sweepRoot && answer.sweep.version !== sweepVersion) {
          sweepVersion = answer.sweep.version;
          sweepRoot.setAttribute("data-version", sweepVersion);
          document.body.setAttribute("data-charts-ready", String(drawSweep(sweepRoot, answer.sweep.data, answer.sweep.body)));
          var sweepNote = document.getElementById("sweep-note");
          if (sweepNote) sweepNote.textContent = "Updating every 2 s while the sweep is in progress (provisional: the steps measured so far); the final result replaces them when it ends.";
        }
        if (answer.charts) {
          document.body.setAttribute("data-charts-ready", String(drawRun(answer.charts)));
          var note = document.getElementById("charts-note");
          if (note) note.textContent = "Provisional: drawn from the requests finished so far, by the second they were scheduled. Updating every 2 s while the run is in progress.";
        }
        document.body.setAttribute("data-live-updates", String(++updates));
        setTimeout(tick, POLL_MS);
      }).catch(function () { setTimeout(tick, POLL_MS * 2); });
    }
    setTimeout(tick, POLL_MS);
  }

  function epoch(text) { return Date.parse(text) / 1000; }

  // Times on the x axis in UTC, as the axis says and the tables show (not the browser's zone); a lone point (two
  // runs in the same second) gets an hour either side rather than uPlot's years; a series of one point is not
  // charted at all (the page says "first run"). The legend draws each line with its dash, as the reports do.
  function utc(ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }

  // uPlot's time ticks with 24-hour times and ISO dates ("14:40", "2026-11-30"), not its 12-hour "2:40pm": per tick
  // spacing, the tick's format, then the context added where a year, month, day, hour or minute starts.
  var UTC_TICKS = [
    [3600 * 24 * 365, "{YYYY}", null, null, null, null, null, null, 1],
    [3600 * 24 * 28, "{MMM}", "\n{YYYY}", null, null, null, null, null, 1],
    [3600 * 24, "{MM}-{DD}", "\n{YYYY}", null, null, null, null, null, 1],
    [3600, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
    [60, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
    [1, ":{ss}", "\n{YYYY}-{MM}-{DD} {HH}:{mm}", null, "\n{MM}-{DD} {HH}:{mm}", null, "\n{HH}:{mm}", null, 1],
    [0.001, ":{ss}.{fff}", "\n{YYYY}-{MM}-{DD} {HH}:{mm}", null, "\n{MM}-{DD} {HH}:{mm}", null, "\n{HH}:{mm}", null, 1],
  ];

  function timeScale(x) {
    var lone = x.length > 0 && x[0] === x[x.length - 1];
    return lone ? { time: true, auto: false, range: [x[0] - 3600, x[0] + 3600] } : { time: true };
  }

  function lineChart(el, x, series, axes) {
    var opts = {
      width: el.clientWidth || 800, height: 260, tzDate: utc, scales: { x: timeScale(x) },
      axes: [{ label: "time (UTC)", values: UTC_TICKS }].concat(axes.map(function (a, i) {
        return { scale: a.scale, label: a.label, side: i === 0 ? 3 : 1, grid: { show: i === 0 }, size: 60 };
      })),
      series: [{ label: "time (UTC)", value: "{YYYY}-{MM}-{DD} {HH}:{mm}" }].concat(series.map(function (s) {
        return { label: s.label, scale: s.scale, stroke: s.color, width: s.width || 2, dash: s.dash,
          points: { show: true, size: 6, fill: s.color }, spanGaps: true };
      })),
    };
    axes.forEach(function (a) { opts.scales[a.scale] = { range: a.range }; });
    var plot = new uPlot(opts, [x].concat(series.map(function (s) { return s.values; })), el);
    if (window.CliffwatchCharts && window.CliffwatchCharts.legend) {
      window.CliffwatchCharts.legend(el, { series: series.map(function (s) {
        return { color: s.color, dash: s.dash || [], width: s.width || 2, fill: false };
      }) });
    }
    return plot;
  }

  /* Trends: per series, the score and its components over time, and the trailing median. */
  function trendsPage() {
    var d = data(), plots = [];
    document.querySelectorAll("[data-trend]").forEach(function (el) {
      var s = d.series[Number(el.getAttribute("data-trend"))];
      if (!s || !s.points.length) return;
      var x = s.points.map(function (p) { return epoch(p.start); });
      var lines = [{ label: "score", scale: "score", color: "#000000", width: 2.5, values: s.points.map(function (p) { return p.score; }) }];
      if (s.trailing_median != null) {
        lines.push({ label: "trailing median", scale: "score", color: "#5a5a5a", width: 1, dash: [4, 4],
          values: s.points.map(function () { return s.trailing_median; }) });
      }
      Object.keys(s.points[0].components).forEach(function (name, i) {
        lines.push({ label: name, scale: "component", color: OKABE_ITO[i % OKABE_ITO.length], width: 1.5,
          dash: DASHES[(i + 1) % DASHES.length], values: s.points.map(function (p) { return p.components[name]; }) });
      });
      plots.push(lineChart(el, x, lines, [
        { scale: "score", label: "score (0–100)", range: [0, 100] },
        { scale: "component", label: "component (0–1)", range: [0, 1] }]));
    });
    document.querySelectorAll("[data-capacity-plot]").forEach(function (el) {
      var c = d.capacity[Number(el.getAttribute("data-capacity-plot"))];
      if (!c || !c.points.length) return;
      var x = c.points.map(function (p) { return epoch(p.at); });
      plots.push(lineChart(el, x, [
        { label: "usable (" + c.unit + ")", scale: "rate", color: "#009E73", width: 2.5, values: c.points.map(function (p) { return p.usable; }) },
        { label: "first bad (" + c.unit + ")", scale: "rate", color: "#D55E00", dash: [8, 4], values: c.points.map(function (p) { return p.first_bad; }) },
      ], [{ scale: "rate", label: c.unit, range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } }]));
    });
    window.CliffwatchTrends = plots;
    document.body.setAttribute("data-charts-ready", String(plots.length));
  }

  if (page === "runs") pollRuns();
  else if (page === "run") runPage();
  else if (page === "trends") trendsPage();
})();
