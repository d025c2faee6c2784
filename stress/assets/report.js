(function () {
'use strict';
var D;
try {
  D = JSON.parse(document.getElementById('vtpu-stress-data').textContent);
} catch (e) {
  var p = document.createElement('p'); p.className = 'err';
  p.textContent = 'The embedded report data is not valid JSON: ' + e;
  document.querySelector('main').prepend(p);
  return;
}
// The SVG namespace, taken from the HTML parser rather than spelled out.
var SVGNS = (function () { var t = document.createElement('template'); t.innerHTML = '<svg></svg>'; return t.content.firstChild.namespaceURI; })();
function $(id) { return document.getElementById(id); }
function el(tag, cls, text, parent) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = String(text);
  if (parent) parent.appendChild(e);
  return e;
}
function sv(tag, attrs, parent) {
  var e = document.createElementNS(SVGNS, tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

// ---------- formatting ----------
var UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
function sig3(v) { return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2); }
function fmtBytes(b) {
  if (b == null) return '\u2013';
  if (b < 1024) return Math.round(b) + ' B';
  var u = 0, v = b;
  while (v >= 1024 && u < 5) { v /= 1024; u++; }
  return sig3(v) + ' ' + UNITS[u];
}
function fmtCount(n) { return n == null ? '\u2013' : Math.round(n).toLocaleString('en-US'); }
function fmtShort(n) {
  if (n == null) return '\u2013';
  var a = Math.abs(n);
  if (a >= 1e9) return +(n / 1e9).toPrecision(3) + 'G';
  if (a >= 1e6) return +(n / 1e6).toPrecision(3) + 'M';
  if (a >= 1e4) return +(n / 1e3).toPrecision(3) + 'k';
  return String(+n.toPrecision(4));
}
function fmtNs(ns) {
  if (ns == null) return '\u2013';
  if (ns < 1e3) return sig3(ns) + ' ns';
  if (ns < 1e6) return sig3(ns / 1e3) + ' \u00b5s';
  if (ns < 1e9) return sig3(ns / 1e6) + ' ms';
  return sig3(ns / 1e9) + ' s';
}
function fmtUs(us) { return us == null ? '\u2013' : fmtNs(us * 1e3); }
// "HBM needed" of a summary or core: the capacity found, '>' + the search's bound when none was
// found below it (min_capacity_bytes null, capacity_search_max_bytes set; the terminal table's
// >SIZE), or '\u2013' when no search ran.
function capacityText(obj) {
  if (obj.min_capacity_bytes != null) return fmtBytes(obj.min_capacity_bytes);
  return obj.capacity_search_max_bytes != null ? '>' + fmtBytes(obj.capacity_search_max_bytes) : '\u2013';
}
function fmtRate(r) { return r == null ? '\u2013' : fmtShort(r) + '/s'; }
function fmtFrac(f) { return f == null ? '\u2013' : f.toFixed(3); }
function fmtRatio(f) { return f == null ? '\u2013' : f.toFixed(3) + '\u00d7'; }
function hex(n) { return '0x' + Math.round(n).toString(16); }

// ---------- colours ----------
var ALLOC_COLORS = { bfc: '#2f6fdb', tlsf: '#e8710a', first_fit: '#1e9e4a', buddy: '#d43c3c', planned: '#8c54c9' };
var EXTRA = ['#0f9fb5', '#b5860f', '#d4509b', '#5d6b7a', '#7a5230'];
var extraIx = {};
function allocColor(a) {
  if (ALLOC_COLORS[a]) return ALLOC_COLORS[a];
  if (!(a in extraIx)) extraIx[a] = Object.keys(extraIx).length;
  return EXTRA[extraIx[a] % EXTRA.length];
}
function runName(r) {
  return r.allocator + (r.defragment_mode === 'before_growth' ? ' + defrag before growth' : r.auto_defragment ? ' + defrag' : '');
}
// FNV-1a of the label: the same label gets the same colour in every map and every page.
function fnv(s) { var h = 2166136261; for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }
var labelColorCache = new Map();
function labelHsl(l) {
  if (l == null || l === '') return [210, 8, 62];
  var h = fnv(l);
  return [h % 360, 52 + ((h >>> 10) % 4) * 8, 50 + ((h >>> 14) % 3) * 7];
}
function labelColor(l, dl) {
  var key = l + '\u0000' + (dl || 0);
  var c = labelColorCache.get(key);
  if (c) return c;
  var x = labelHsl(l);
  c = 'hsl(' + x[0] + ',' + x[1] + '%,' + Math.max(10, x[2] - (dl || 0)) + '%)';
  labelColorCache.set(key, c);
  return c;
}

// ---------- tooltip ----------
var tip = $('tip');
function showTip(lines, cx, cy) {
  tip.textContent = '';
  lines.forEach(function (ln, i) {
    var row = el('div', 'row' + (i === 0 ? ' t' : ''), null, tip);
    if (ln.color) { var s = el('span', ln.line ? 'swl' + (ln.dash ? ' dash' : '') : 'sw', null, row); if (ln.line) s.style.borderTopColor = ln.color; else s.style.background = ln.color; }
    el('span', null, ln.text, row);
  });
  tip.style.display = 'block';
  var w = tip.offsetWidth, h = tip.offsetHeight;
  var x = cx + 14, y = cy + 14;
  if (x + w > window.innerWidth - 4) x = cx - w - 14;
  if (y + h > window.innerHeight - 4) y = cy - h - 14;
  tip.style.left = Math.max(4, x) + 'px';
  tip.style.top = Math.max(4, y) + 'px';
}
function hideTip() { tip.style.display = 'none'; }

// ---------- pickers ----------
function picker(host, items, selected, onChange) {
  host.textContent = '';
  if (items.length > 12) {
    var s = el('select', null, null, host);
    items.forEach(function (it, i) { var o = el('option', null, it.name, s); o.value = String(i); if (i === selected) o.selected = true; });
    s.onchange = function () { onChange(+s.value); };
    return;
  }
  var seg = el('span', 'seg', null, host);
  items.forEach(function (it, i) {
    var b = el('button', i === selected ? 'on' : '', null, seg);
    b.type = 'button';
    if (it.color) { var w = el('span', 'swl' + (it.dash ? ' dash' : ''), null, b); w.style.borderTopColor = i === selected ? '#fff' : it.color; }
    el('span', null, it.name, b);
    b.onclick = function () { onChange(i); };
  });
}
function legendItem(host, name, color, dash, off, onclick) {
  var it = el('span', 'item' + (off ? ' off' : '') + (onclick ? '' : ' static'), null, host);
  var s = el('span', 'swl' + (dash ? ' dash' : ''), null, it);
  s.style.borderTopColor = color;
  el('span', null, name, it);
  if (onclick) it.onclick = onclick;
  return it;
}
function swatchItem(host, name, color, pattern) {
  var it = el('span', 'item static', null, host);
  var s = el('span', 'sw', null, it);
  s.style.background = pattern || color;
  if (pattern) s.style.border = '1px solid #b8c0ca';
  el('span', null, name, it);
  return it;
}

// ---------- scales and ticks ----------
function niceStep(range, n) {
  var raw = range / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
}
function ticks(max, n) {
  if (!(max > 0)) return { max: 1, ticks: [0, 1] };
  var st = niceStep(max, n), top = Math.ceil(max / st - 1e-9) * st, t = [];
  for (var v = 0; v <= top + st * 1e-6; v += st) t.push(v);
  return { max: top, ticks: t };
}
// Byte ticks on round multiples of a binary unit: 0, 2 GiB, 4 GiB, ...
function byteTicks(max, n) {
  if (!(max > 0)) return { max: 1024, ticks: [0, 512, 1024], fmt: fmtBytes };
  var u = Math.min(5, Math.max(0, Math.floor(Math.log(max) / Math.log(1024))));
  var unit = Math.pow(1024, u);
  var t = ticks(max / unit, n);
  return { max: t.max * unit, ticks: t.ticks.map(function (v) { return v * unit; }),
    fmt: function (v) { return v === 0 ? '0' : +(v / unit).toPrecision(4) + ' ' + UNITS[u]; } };
}
function lowerBound(arr, x) { var lo = 0, hi = arr.length; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] < x) lo = m + 1; else hi = m; } return lo; }
function nearest(arr, x) {
  if (!arr.length) return -1;
  var i = lowerBound(arr, x);
  if (i >= arr.length) return arr.length - 1;
  if (i > 0 && x - arr[i - 1] < arr[i] - x) return i - 1;
  return i;
}

// ---------- line chart (SVG) ----------
// opt: {height, series: [{name, color, dash, x[], y[], fill, width, marks: [{x, y}]}], yBytes,
//   yMax, yTitle, xTitle, vlines: [{x, label}], tipTitle(x, idx)}
function lineChart(host, opt) {
  host.textContent = '';
  var W = Math.max(300, host.clientWidth || 600), H = opt.height || 280;
  var m = { l: opt.yBytes ? 68 : 52, r: 14, t: 10, b: 40 };
  var pw = W - m.l - m.r, ph = H - m.t - m.b;
  var svg = sv('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img' }, host);
  var series = opt.series.filter(function (s) { return s.x.length > 0; });
  var xmin = Infinity, xmax = -Infinity, ymax = 0;
  series.forEach(function (s) {
    xmin = Math.min(xmin, s.x[0]); xmax = Math.max(xmax, s.x[s.x.length - 1]);
    for (var i = 0; i < s.y.length; i++) if (s.y[i] > ymax) ymax = s.y[i];
  });
  if (!isFinite(xmin)) { xmin = 0; xmax = 1; }
  if (xmax <= xmin) xmax = xmin + 1;
  if (opt.yMax != null) ymax = Math.max(ymax, opt.yMax);
  var yt = opt.yBytes ? byteTicks(ymax, 5) : (opt.yFixed ? { max: opt.yFixed, ticks: ticks(opt.yFixed, 5).ticks } : ticks(ymax, 5));
  var yfmt = yt.fmt || function (v) { return +v.toPrecision(4) + ''; };
  var xt = ticks(xmax - xmin, Math.max(2, Math.round(pw / 110)));
  function X(v) { return m.l + (v - xmin) / (xmax - xmin) * pw; }
  function Y(v) { return m.t + ph - v / yt.max * ph; }
  var g = sv('g', { class: 'axis' }, svg);
  yt.ticks.forEach(function (v) {
    sv('line', { x1: m.l, x2: m.l + pw, y1: Y(v), y2: Y(v), class: 'gridline' }, g);
    sv('text', { x: m.l - 6, y: Y(v) + 3.5, 'text-anchor': 'end', class: 'tick' }, g).textContent = yfmt(v);
  });
  for (var i = 0; i < xt.ticks.length; i++) {
    var v = xmin + xt.ticks[i];
    if (v > xmax + 1e-9) break;
    sv('line', { x1: X(v), x2: X(v), y1: m.t + ph, y2: m.t + ph + 4, class: 'axisline' }, g);
    sv('text', { x: X(v), y: m.t + ph + 16, 'text-anchor': 'middle', class: 'tick' }, g).textContent = fmtShort(v);
  }
  sv('line', { x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph, class: 'axisline' }, g);
  sv('line', { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph, class: 'axisline' }, g);
  if (opt.xTitle) sv('text', { x: m.l + pw / 2, y: H - 4, 'text-anchor': 'middle', class: 'axis-title' }, svg).textContent = opt.xTitle;
  if (opt.yTitle) sv('text', { x: 12, y: m.t + ph / 2, 'text-anchor': 'middle', transform: 'rotate(-90 12 ' + (m.t + ph / 2) + ')', class: 'axis-title' }, svg).textContent = opt.yTitle;
  (opt.vlines || []).forEach(function (vl) {
    if (vl.x < xmin || vl.x > xmax) return;
    sv('line', { x1: X(vl.x), x2: X(vl.x), y1: m.t, y2: m.t + ph, stroke: '#d43c3c', 'stroke-dasharray': '4 3', 'stroke-width': 1.2 }, svg);
    if (vl.label) sv('text', { x: X(vl.x) + 3, y: m.t + 10, class: 'tick', fill: '#d43c3c', style: 'fill:#d43c3c' }, svg).textContent = vl.label;
  });
  series.forEach(function (s) {
    var pts = new Array(s.x.length);
    for (var i = 0; i < s.x.length; i++) pts[i] = X(s.x[i]).toFixed(1) + ',' + Y(s.y[i]).toFixed(1);
    if (s.fill) {
      sv('path', { d: 'M' + X(s.x[0]).toFixed(1) + ',' + Y(0) + 'L' + pts.join('L') + 'L' + X(s.x[s.x.length - 1]).toFixed(1) + ',' + Y(0) + 'Z', fill: s.color, 'fill-opacity': 0.28, stroke: 'none' }, svg);
    }
    sv('polyline', { points: pts.join(' '), fill: 'none', stroke: s.color, 'stroke-width': s.width || 1.8, 'stroke-dasharray': s.dash ? '6 3' : 'none', 'stroke-linejoin': 'round' }, svg);
    (s.marks || []).forEach(function (mk) { sv('circle', { cx: X(mk.x), cy: Y(mk.y), r: 4, fill: '#fff', stroke: s.color, 'stroke-width': 2 }, svg); });
  });
  if (!series.length) sv('text', { x: m.l + pw / 2, y: m.t + ph / 2, 'text-anchor': 'middle', class: 'axis-title' }, svg).textContent = 'no samples';
  // Hover readout.
  var cross = sv('line', { y1: m.t, y2: m.t + ph, stroke: '#5b636e', 'stroke-width': 1, visibility: 'hidden' }, svg);
  var dots = series.map(function (s) { return sv('circle', { r: 3.5, fill: s.color, visibility: 'hidden' }, svg); });
  var ov = sv('rect', { x: m.l, y: m.t, width: pw, height: ph, fill: 'transparent' }, svg);
  ov.addEventListener('mousemove', function (ev) {
    var r = svg.getBoundingClientRect();
    var xv = xmin + (ev.clientX - r.left - m.l) / pw * (xmax - xmin);
    var lines = [], ref = -1, refSeries = null;
    series.forEach(function (s, k) {
      var i = nearest(s.x, xv);
      if (i < 0) return;
      if (refSeries == null) { refSeries = s; ref = i; }
      dots[k].setAttribute('cx', X(s.x[i])); dots[k].setAttribute('cy', Y(s.y[i])); dots[k].setAttribute('visibility', 'visible');
      lines.push({ color: s.color, line: true, dash: s.dash, text: s.name + ': ' + (opt.yBytes ? fmtBytes(s.y[i]) : (opt.yFmt || fmtFrac)(s.y[i])) });
    });
    if (refSeries) {
      cross.setAttribute('x1', X(refSeries.x[ref])); cross.setAttribute('x2', X(refSeries.x[ref])); cross.setAttribute('visibility', 'visible');
      lines.unshift({ text: opt.tipTitle ? opt.tipTitle(refSeries, ref) : 'x = ' + fmtCount(refSeries.x[ref]) });
    }
    showTip(lines, ev.clientX, ev.clientY);
  });
  ov.addEventListener('mouseleave', function () { hideTip(); cross.setAttribute('visibility', 'hidden'); dots.forEach(function (d) { d.setAttribute('visibility', 'hidden'); }); });
}

// ---------- data access ----------
var runs = D.runs;
var numCores = D.cores;
function coreEntry(run, c) { for (var i = 0; i < run.per_core.length; i++) if (run.per_core[i].core === c) return run.per_core[i]; return null; }
var tlCache = new Map();
function timeline(pc) {
  var t = tlCache.get(pc);
  if (t) return t;
  var C = pc.timeline_columns;
  if (C) {
    t = { event: C.event || [], t_us: C.t_us || [], inuse: C.bytes_in_use || [], reserved: C.bytes_reserved || [], frag: C.fragmentation || [] };
  } else {
    var n = pc.timeline.length;
    t = { event: new Array(n), t_us: new Array(n), inuse: new Array(n), reserved: new Array(n), frag: new Array(n) };
    pc.timeline.forEach(function (s, i) { t.event[i] = s.event; t.t_us[i] = s.t_us; t.inuse[i] = s.bytes_in_use; t.reserved[i] = s.bytes_reserved; t.frag[i] = s.fragmentation; });
  }
  tlCache.set(pc, t);
  return t;
}
function tlTitle(pc) {
  return function (s, i) { var t = timeline(pc); return 'event ' + fmtCount(s.x[i]) + ' \u00b7 t = ' + fmtUs(t.t_us[i]); };
}
var runItems = runs.map(function (r) { return { name: runName(r), color: allocColor(r.allocator), dash: r.auto_defragment }; });
var coreItems = []; for (var c = 0; c < numCores; c++) coreItems.push({ name: String(c) });

// ---------- header ----------
(function header() {
  var w = D.workload || {};
  document.title = 'vtpu stress: ' + w.name + ' (' + numCores + ' cores)';
  $('title').textContent = 'vtpu stress report \u2014 ' + w.name;
  $('subtitle').textContent = w.description || '';
  var chips = $('chips');
  function chip(k, v) { var s = el('span', 'chip', null, chips); el('span', null, k + ' ', s); el('b', null, v, s); }
  chip('cores', String(numCores));
  chip('HBM per core', fmtBytes(D.hbm_bytes));
  chip('runs', String(runs.length));
  chip('allocators', Array.from(new Set(runs.map(function (r) { return r.allocator; }))).join(', '));
  chip('under load', D.under_load ? 'yes (collectives + compute)' : 'no');
  if (w.seed != null) chip('seed', String(w.seed));
  if (w.trace_path != null) chip('trace', String(w.trace_path));
  $('command').textContent = '$ ' + D.command;
})();

// ---------- summary table ----------
var COLS = [
  { g: 'memory', key: 'peak_reserved_bytes', t: 'peak reserved', f: fmtBytes, best: 'min' },
  { g: 'memory', key: 'peak_live_bytes', t: 'peak live', f: fmtBytes },
  { g: 'memory', key: 'reserved_over_live', t: 'reserved / live', f: fmtRatio, best: 'min' },
  { g: 'memory', key: 'min_capacity_bytes', t: 'HBM needed', f: fmtBytes, best: 'min', text: capacityText },
  { g: 'fragmentation', key: 'fragmentation_mean', t: 'mean', f: fmtFrac, best: 'min' },
  { g: 'fragmentation', key: 'fragmentation_max', t: 'max', f: fmtFrac, best: 'min' },
  { g: 'fragmentation', key: 'reserved_fragmentation_mean', t: 'holes in reserved, mean', f: fmtFrac, best: 'min' },
  { g: 'fragmentation', key: 'reserved_fragmentation_max', t: 'holes in reserved, max', f: fmtFrac, best: 'min' },
  { g: 'out of memory', key: 'false_ooms', t: 'false', f: fmtCount, best: 'min' },
  { g: 'out of memory', key: 'true_ooms', t: 'true', f: fmtCount, best: 'min' },
  { g: 'alloc latency', key: 'alloc_latency_ns', sub: 'median', t: 'median', f: fmtNs, best: 'min' },
  { g: 'alloc latency', key: 'alloc_latency_ns', sub: 'p99', t: 'p99', f: fmtNs, best: 'min' },
  { g: 'alloc latency', key: 'alloc_latency_ns', sub: 'p99_99', t: 'p99.99', f: fmtNs, best: 'min' },
  { g: 'free latency', key: 'free_latency_ns', sub: 'median', t: 'median', f: fmtNs, best: 'min' },
  { g: 'free latency', key: 'free_latency_ns', sub: 'p99', t: 'p99', f: fmtNs, best: 'min' },
  { g: 'free latency', key: 'free_latency_ns', sub: 'p99_99', t: 'p99.99', f: fmtNs, best: 'min' },
  { g: 'throughput', key: 'events', t: 'events', f: fmtCount },
  { g: 'throughput', key: 'events_per_second', t: 'events/s', f: fmtRate, best: 'max' },
  { g: 'defragmentation', key: 'defragmentations', t: 'count', f: fmtCount, best: 'min', defrag: true },
  { g: 'defragmentation', key: 'defrag_bytes_moved', t: 'bytes moved', f: fmtBytes, best: 'min', defrag: true },
  { g: 'defragmentation', key: 'defrag_time_ns', t: 'time', f: fmtNs, best: 'min', defrag: true },
  { g: 'integrity', key: 'integrity_checks', t: 'checks', f: fmtCount },
  { g: 'integrity', key: 'integrity_failures', t: 'failures', f: fmtCount, best: 'min', badIfPositive: true }
];
(function extraColumns() {
  // Summary fields added to the contract after this page was written: shown, not ranked.
  var known = new Set(COLS.map(function (c) { return c.key; }));
  var extra = [];
  runs.forEach(function (r) { Object.keys(r.summary).forEach(function (k) { var v = r.summary[k]; if (!known.has(k) && (typeof v === 'number' || v === null) && extra.indexOf(k) < 0) extra.push(k); }); });
  extra.forEach(function (k) { COLS.push({ g: 'other', key: k, t: k.replace(/_/g, ' '), f: /bytes$/.test(k) ? fmtBytes : /_ns$/.test(k) ? fmtNs : fmtShort }); });
})();
function cellValue(obj, c) { var v = obj[c.key]; if (c.sub) v = v == null ? null : v[c.sub]; return v == null ? null : v; }
// The columns in two tables of the same rows, so that every field fits without scrolling.
var PANELS = [['memory', 'fragmentation', 'out of memory', 'integrity'], ['alloc latency', 'free latency', 'throughput', 'defragmentation', 'other']];
function buildTables(host, rows, rank) {
  host.textContent = '';
  PANELS.forEach(function (groups) {
    var cols = [];
    groups.forEach(function (g) { COLS.forEach(function (c) { if (c.g === g) cols.push(c); }); });
    if (cols.length) buildTable(el('div', 'tablewrap', null, host), rows, rank, cols);
  });
}
function buildTable(host, rows, rank, COLS) {
  var tbl = el('table', null, null, host), thead = el('thead', null, null, tbl);
  var tr1 = el('tr', null, null, thead), tr2 = el('tr', null, null, thead);
  var lead = rows.length && rows[0].core != null ? ['run', 'core'] : ['run'];
  lead.forEach(function (h, i) { var th = el('th', i === 0 ? 'first' : '', '', tr1); th.rowSpan = 1; el('th', i === 0 ? 'first' : '', h, tr2); });
  var prevG = null, gth = null;
  COLS.forEach(function (c) {
    var start = c.g !== prevG;
    if (start) { gth = el('th', 'group', c.g, tr1); gth.colSpan = 1; prevG = c.g; } else gth.colSpan += 1;
    el('th', start ? 'gstart' : '', c.t, tr2);
  });
  var best = COLS.map(function (c) {
    if (!rank || !c.best) return null;
    var vals = [];
    rows.forEach(function (row) {
      if (row.run.error != null) return;  // its figures are zeros, not results
      if (c.defrag && !(row.obj.defragmentations > 0)) return;
      var v = cellValue(row.obj, c); if (v != null) vals.push(v);
    });
    if (vals.length < 2) return null;
    var lo = Math.min.apply(null, vals), hi = Math.max.apply(null, vals);
    if (lo === hi) return null;
    return c.best === 'min' ? lo : hi;
  });
  var tbody = el('tbody', null, null, tbl);
  rows.forEach(function (row) {
    var tr = el('tr', null, null, tbody);
    var td0 = el('td', 'first', null, tr);
    var sw = el('span', 'swl' + (row.run.auto_defragment ? ' dash' : ''), null, td0);
    sw.style.borderTopColor = allocColor(row.run.allocator); sw.style.marginRight = '7px'; sw.style.verticalAlign = 'middle';
    el('span', null, runName(row.run), td0);
    if (row.run.error != null && row.core == null)
      el('span', 'runerr', (row.run.failed ? 'FAILED: ' : 'not run: ') + row.run.error, td0);
    if (row.core != null) el('td', 'first', String(row.core), tr);
    var prevG2 = null;
    COLS.forEach(function (c, k) {
      var v = cellValue(row.obj, c);
      var cls = [];
      if (c.g !== prevG2) { cls.push('gstart'); prevG2 = c.g; }
      var text = c.text ? c.text(row.obj) : v == null ? '\u2013' : c.f(v);
      if (text === '\u2013') cls.push('na');
      else if (c.badIfPositive && v > 0) cls.push('bad');
      else if (best[k] != null && v === best[k] && row.run.error == null && !(c.defrag && !(row.obj.defragmentations > 0))) cls.push('best');
      var td = el('td', cls.join(' '), text, tr);
      if (v != null && typeof v === 'number') td.title = c.g + ' ' + c.t + ': ' + v;
    });
  });
}
buildTables($('summary'), runs.map(function (r) { return { run: r, obj: r.summary }; }), true);
(function perCore() {
  var rows = [];
  runs.forEach(function (r) { r.per_core.slice().sort(function (a, b) { return a.core - b.core; }).forEach(function (pc) { rows.push({ run: r, obj: pc, core: pc.core }); }); });
  buildTables($('percore'), rows, false);
})();

// ---------- default selections ----------
function fmax(o) { return o && o.fragmentation_max != null ? o.fragmentation_max : -1; }
var state = { fragCore: 0, memRun: 0, mapRun: 0, mapCore: 0, hidden: new Set() };
(function defaults() {
  var bestRun = 0, bestCore = 0, bv = -2;
  runs.forEach(function (r, i) {
    r.per_core.forEach(function (pc) {
      var v = !pc.worst ? -1 : pc.worst.reserved_fragmentation != null ? pc.worst.reserved_fragmentation : pc.worst.fragmentation;
      if (v > bv) { bv = v; bestRun = i; bestCore = pc.core; }
    });
  });
  state.mapRun = bestRun; state.mapCore = bestCore; state.fragCore = bestCore;
})();

// ---------- fragmentation over time ----------
function drawFrag() {
  picker($('frag-core'), coreItems, state.fragCore, function (i) { state.fragCore = i; drawFrag(); });
  var leg = $('frag-legend'); leg.textContent = '';
  var series = [];
  runs.forEach(function (r, k) {
    var off = state.hidden.has(k);
    legendItem(leg, runName(r), allocColor(r.allocator), r.auto_defragment, off, function () { if (state.hidden.has(k)) state.hidden.delete(k); else state.hidden.add(k); drawFrag(); });
    if (off) return;
    var pc = coreEntry(r, state.fragCore);
    if (!pc) return;
    var t = timeline(pc);
    var marks = pc.worst ? [{ x: pc.worst.event, y: pc.worst.fragmentation }] : [];
    series.push({ name: runName(r), color: allocColor(r.allocator), dash: r.auto_defragment, x: t.event, y: t.frag, marks: marks });
  });
  var pc0 = coreEntry(runs[0], state.fragCore);
  lineChart($('frag-chart'), { height: 300, series: series, yFixed: 1, yTitle: 'fragmentation', xTitle: 'events replayed on core ' + state.fragCore, yFmt: fmtFrac,
    tipTitle: function (s, i) { return 'event ' + fmtCount(s.x[i]) + (pc0 ? ' \u00b7 t = ' + fmtUs(timeline(pc0).t_us[Math.min(i, timeline(pc0).t_us.length - 1)]) : ''); } });
}

// ---------- memory timeline per core ----------
function drawMem() {
  picker($('mem-run'), runItems, state.memRun, function (i) { state.memRun = i; drawMem(); });
  var run = runs[state.memRun], color = allocColor(run.allocator);
  var leg = $('mem-legend'); leg.textContent = '';
  var it = swatchItem(leg, 'bytes in use', color); it.firstChild.style.opacity = 0.45;
  legendItem(leg, 'bytes reserved', color, false, false, null);
  legendItem(leg, 'worst moment', '#d43c3c', true, false, null);
  var shared = $('mem-shared').checked, ymax = 0;
  (shared ? runs : [run]).forEach(function (r) { r.per_core.forEach(function (pc) { var t = timeline(pc); for (var i = 0; i < t.event.length; i++) ymax = Math.max(ymax, t.reserved[i], t.inuse[i]); }); });
  var grid = $('mem-grid'); grid.textContent = '';
  run.per_core.slice().sort(function (a, b) { return a.core - b.core; }).forEach(function (pc) {
    var cell = el('div', 'cell', null, grid);
    var h = el('h3', null, 'core ' + pc.core + ' ', cell);
    el('span', null, '\u00b7 peak reserved ' + fmtBytes(pc.peak_reserved_bytes) + ' \u00b7 peak live ' + fmtBytes(pc.peak_live_bytes) + ' \u00b7 capacity ' + fmtBytes(pc.worst ? pc.worst.capacity_bytes : D.hbm_bytes), h);
    var ch = el('div', 'chart', null, cell);
    var t = timeline(pc);
    lineChart(ch, { height: 190, yBytes: true, yMax: ymax, xTitle: 'events', series: [
      { name: 'in use', color: color, x: t.event, y: t.inuse, fill: true, width: 1.2 },
      { name: 'reserved', color: color, x: t.event, y: t.reserved, width: 2 }],
      vlines: pc.worst ? [{ x: pc.worst.event, label: 'worst' }] : [], tipTitle: tlTitle(pc) });
  });
}
$('mem-shared').onchange = drawMem;

// ---------- occupancy map ----------
// Segments: {o: offset, b: bytes, s: 0 free | 1 used | 2 merged, l: label, id, q: requested, n: blocks, u: used bytes}
var segCache = new Map();
function mapData(w) {
  var d = segCache.get(w);
  if (d) return d;
  var segs = [], st;
  if (w.blocks_merged) {
    var M = w.blocks_merged;
    M.segments.forEach(function (a) { segs.push({ o: a[0], b: a[1], s: a[2], l: a[3] >= 0 ? M.labels[a[3]] : null, id: a[4], q: a[5], n: a[6], u: a[7] }); });
    st = { used_blocks: M.used_blocks, free_blocks: M.free_blocks, used: M.used_bytes, requested: M.requested_bytes, largest: M.largest_free_bytes, top: M.top_labels, distinct: M.distinct_labels, merged: M };
  } else {
    st = { used_blocks: 0, free_blocks: 0, used: 0, requested: 0, largest: 0 };
    var lb = new Map();
    w.blocks.forEach(function (b) {
      var used = b.state === 'used';
      var q = used ? (b.requested_bytes != null ? b.requested_bytes : b.bytes) : 0;
      var l = used && typeof b.label === 'string' && b.label !== '' ? b.label : null;
      segs.push({ o: b.offset, b: b.bytes, s: used ? 1 : 0, l: l, id: used ? b.id : null, q: q, n: 1, u: used ? b.bytes : 0 });
      if (used) { st.used_blocks++; st.used += b.bytes; st.requested += q; var e = lb.get(l) || { label: l, bytes: 0, blocks: 0 }; e.bytes += b.bytes; e.blocks++; lb.set(l, e); }
      else { st.free_blocks++; if (b.bytes > st.largest) st.largest = b.bytes; }
    });
    st.top = Array.from(lb.values()).sort(function (a, b) { return b.bytes - a.bytes; }).slice(0, 16);
    st.distinct = lb.size;
  }
  st.extent = 0;
  segs.forEach(function (s) { if (s.s !== 0) st.extent = s.o + s.b; });
  st.largestIx = -1;
  segs.forEach(function (s, i) { if (s.s === 0 && s.b === st.largest && st.largestIx < 0) st.largestIx = i; });
  d = { segs: segs, offs: segs.map(function (s) { return s.o; }), st: st };
  segCache.set(w, d);
  return d;
}
var hatchCache = {};
function hatch(ctx, fg, bg, gap) {
  var key = fg + bg + gap;
  if (hatchCache[key]) return hatchCache[key];
  var c = document.createElement('canvas'); c.width = c.height = gap;
  var x = c.getContext('2d');
  if (bg) { x.fillStyle = bg; x.fillRect(0, 0, gap, gap); }
  x.strokeStyle = fg; x.lineWidth = 1;
  x.beginPath(); x.moveTo(0, gap); x.lineTo(gap, 0); x.moveTo(-1, 1); x.lineTo(1, -1); x.moveTo(gap - 1, gap + 1); x.lineTo(gap + 1, gap - 1); x.stroke();
  return (hatchCache[key] = ctx.createPattern(c, 'repeat'));
}
var mapGeom = null;
function drawMap() {
  picker($('map-run'), runItems, state.mapRun, function (i) { state.mapRun = i; drawMap(); });
  picker($('map-core'), coreItems, state.mapCore, function (i) { state.mapCore = i; drawMap(); });
  var pc = coreEntry(runs[state.mapRun], state.mapCore);
  var cv = $('map'), hi = $('map-hi'), stats = $('map-stats'), leg = $('map-legend'), note = $('map-note');
  stats.textContent = ''; leg.textContent = ''; note.textContent = '';
  var w = pc && pc.worst;
  if (!w) { cv.width = cv.height = hi.width = hi.height = 0; mapGeom = null; note.textContent = 'No worst moment recorded for this core.'; return; }
  var d = mapData(w), st = d.st, cap = w.capacity_bytes;
  function stat(k, v) { var s = el('div', null, k + ' ', stats); el('b', null, v, s); }
  stat('event', fmtCount(w.event) + ' (t = ' + fmtUs(w.t_us) + ')');
  stat('fragmentation', fmtFrac(w.fragmentation));
  if (w.reserved_fragmentation != null) stat('holes in reserved', fmtFrac(w.reserved_fragmentation));
  stat('capacity', fmtBytes(cap));
  stat('in use', fmtBytes(st.used) + ' in ' + fmtCount(st.used_blocks) + ' blocks');
  stat('free', fmtBytes(cap - st.used) + ' in ' + fmtCount(st.free_blocks) + ' holes');
  stat('largest hole', fmtBytes(st.largest));
  stat('internal waste', fmtBytes(st.used - st.requested) + (st.used ? ' (' + (100 * (st.used - st.requested) / st.used).toFixed(1) + '%)' : ''));
  var full = $('map-full').checked;
  var viewEnd = full || st.extent === 0 ? cap : Math.min(cap, st.extent);
  var css = Math.max(360, $('map-wrap').clientWidth), gut = 78, pw = css - gut - 6;
  var targetRows = Math.max(8, Math.min(40, Math.round(Math.sqrt(d.segs.length) * 1.5)));
  var bpr = Math.pow(2, Math.ceil(Math.log2(Math.max(1, viewEnd / targetRows))));
  var rows = Math.max(1, Math.ceil(viewEnd / bpr)), rh = 15, gap = 4, top = 16;
  var H = top + rows * (rh + gap) + 2;
  var dpr = window.devicePixelRatio || 1;
  [cv, hi].forEach(function (c) { c.width = Math.round(css * dpr); c.height = Math.round(H * dpr); c.style.width = css + 'px'; c.style.height = H + 'px'; });
  var ctx = cv.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, css, H);
  ctx.font = '11px system-ui, sans-serif'; ctx.fillStyle = '#5b636e'; ctx.textBaseline = 'middle';
  // Column ticks: quarters of a row.
  ctx.textAlign = 'center';
  for (var q = 0; q <= 4; q++) { ctx.textAlign = q === 0 ? 'left' : q === 4 ? 'right' : 'center'; ctx.fillText('+' + (q === 0 ? '0' : fmtBytes(bpr * q / 4)), gut + pw * q / 4, 7); }
  ctx.textAlign = 'right';
  var freePat = hatch(ctx, '#d4d9df', '#ffffff', 6);
  var labelEvery = Math.ceil(rows / 24);
  for (var r = 0; r < rows; r++) {
    var y = top + r * (rh + gap);
    var rowBytes = Math.min(bpr, viewEnd - r * bpr);
    ctx.fillStyle = freePat; ctx.fillRect(gut, y, pw * rowBytes / bpr, rh);
    ctx.strokeStyle = '#c3cad3'; ctx.lineWidth = 1; ctx.strokeRect(gut - 0.5, y - 0.5, pw * rowBytes / bpr + 1, rh + 1);
    if (r % labelEvery === 0) { ctx.fillStyle = '#5b636e'; ctx.fillText(r === 0 ? '0' : fmtBytes(r * bpr), gut - 6, y + rh / 2); }
  }
  function pieces(o, b, fn) {
    var end = Math.min(o + b, viewEnd), p = o;
    while (p < end) {
      var r = Math.floor(p / bpr), rs = r * bpr, re = Math.min(end, rs + bpr);
      fn(gut + (p - rs) / bpr * pw, top + r * (rh + gap), (re - p) / bpr * pw);
      p = re;
    }
  }
  var wastePat = hatch(ctx, 'rgba(0,0,0,0.55)', null, 4);
  d.segs.forEach(function (s) {
    if (s.o >= viewEnd || s.s === 0) return;
    if (s.s === 1) {
      ctx.fillStyle = labelColor(s.l, 0);
      pieces(s.o, s.b, function (x, y, wd) { ctx.fillRect(x, y, Math.max(wd, 0.6), rh); });
      if (s.q < s.b) {
        var wo = s.o + s.q, wb = s.b - s.q;
        ctx.fillStyle = labelColor(s.l, 22);
        pieces(wo, wb, function (x, y, wd) { ctx.fillRect(x, y, wd, rh); });
        ctx.fillStyle = wastePat;
        pieces(wo, wb, function (x, y, wd) { if (wd >= 2) ctx.fillRect(x, y, wd, rh); });
      }
      ctx.fillStyle = 'rgba(255,255,255,0.9)';
      pieces(s.o, 1, function (x, y) { if (s.b / bpr * pw >= 4) ctx.fillRect(x, y, 1, rh); });
    } else {
      // Merged small blocks: the used bytes first, in the main label's colour, then the free
      // bytes left as holes, so free space inside merged runs stays visible (within one segment).
      ctx.fillStyle = labelColor(s.l, 0);
      pieces(s.o, s.u, function (x, y, wd) {
        ctx.fillRect(x, y, Math.max(wd, 0.6), rh);
      });
      if (s.q < s.u) {
        ctx.fillStyle = labelColor(s.l, 22);
        pieces(s.o + s.q, s.u - s.q, function (x, y, wd) {
          ctx.fillRect(x, y, wd, rh);
        });
      }
    }
  });
  if (st.largestIx >= 0) {
    var L = d.segs[st.largestIx];
    ctx.strokeStyle = '#d43c3c'; ctx.lineWidth = 2;
    pieces(L.o, L.b, function (x, y, wd) { ctx.strokeRect(x + 1, y + 1, Math.max(wd - 2, 1), rh - 2); });
  }
  mapGeom = { d: d, gut: gut, pw: pw, top: top, rh: rh, gap: gap, rows: rows, bpr: bpr, viewEnd: viewEnd, pieces: pieces, css: css, H: H, dpr: dpr, w: w };
  // Legend: the labels holding the most bytes, then holes and waste.
  (st.top || []).slice(0, 14).forEach(function (e) {
    swatchItem(leg, (e.label == null ? '(unlabelled)' : e.label) + ' \u00b7 ' + fmtBytes(e.bytes) + (e.blocks > 1 ? ' in ' + fmtCount(e.blocks) : ''), labelColor(e.label, 0));
  });
  if (st.distinct > 14) el('span', 'item static', '+ ' + fmtCount(st.distinct - 14) + ' more labels', leg);
  var hs = swatchItem(leg, 'free (hole)', null, 'repeating-linear-gradient(135deg,#fff 0 3px,#d4d9df 3px 4px)');
  var ws = swatchItem(leg, 'internal waste', null, 'repeating-linear-gradient(135deg,#8a8f96 0 2px,#3c4046 2px 3px)');
  var ls = swatchItem(leg, 'largest hole', null, '#fff'); ls.firstChild.style.border = '2px solid #d43c3c';
  var parts = ['One row = ' + fmtBytes(bpr) + ' of address space; showing [0, ' + fmtBytes(viewEnd) + ') of ' + fmtBytes(cap) + '.'];
  if (st.merged) parts.push(fmtCount(st.merged.original_blocks) + ' blocks; runs of adjacent blocks smaller than ' + fmtBytes(st.merged.min_block_bytes) + ' are merged into ' + fmtCount(d.segs.length) + ' segments to keep the page small: a merged segment shows its used bytes first (in its main label\u2019s colour, waste darker), then its free bytes as a hole, so positions inside it are approximate. Totals above are exact.');
  note.textContent = parts.join(' ');
  hi.getContext('2d').setTransform(dpr, 0, 0, dpr, 0, 0);
}
function mapHover(ev) {
  var g = mapGeom; if (!g) return;
  var r = $('map').getBoundingClientRect();
  var x = ev.clientX - r.left, y = ev.clientY - r.top;
  var row = Math.floor((y - g.top) / (g.rh + g.gap));
  var hx = $('map-hi').getContext('2d');
  hx.clearRect(0, 0, g.css, g.H);
  if (row < 0 || row >= g.rows || x < g.gut || x > g.gut + g.pw || (y - g.top) - row * (g.rh + g.gap) > g.rh) { hideTip(); return; }
  var off = row * g.bpr + (x - g.gut) / g.pw * g.bpr;
  if (off >= g.viewEnd) { hideTip(); return; }
  var i = lowerBound(g.d.offs, off + 1e-9) - 1;
  if (i < 0) { hideTip(); return; }
  var s = g.d.segs[i];
  hx.strokeStyle = '#111'; hx.lineWidth = 2;
  g.pieces(s.o, s.b, function (px, py, wd) { hx.strokeRect(px, py - 1, Math.max(wd, 2), g.rh + 2); });
  var L = [];
  var range = 'offset ' + hex(s.o) + ' (' + fmtBytes(s.o) + ') \u2013 ' + hex(s.o + s.b);
  if (s.s === 1) {
    L.push({ text: s.l == null ? '(unlabelled)' : s.l, color: labelColor(s.l, 0) });
    L.push({ text: 'id ' + s.id });
    L.push({ text: range });
    L.push({ text: 'size ' + fmtBytes(s.b) + ' (' + fmtCount(s.b) + ' B)' });
    L.push({ text: 'requested ' + fmtBytes(s.q) + ' \u00b7 internal waste ' + fmtBytes(s.b - s.q) });
  } else if (s.s === 0) {
    L.push({ text: i === g.d.st.largestIx ? 'free: the largest hole' : 'free (hole)' + (s.n > 1 ? ', ' + fmtCount(s.n) + ' adjacent free blocks' : '') });
    L.push({ text: range });
    L.push({ text: 'size ' + fmtBytes(s.b) + ' (' + fmtCount(s.b) + ' B)' });
  } else {
    L.push({ text: fmtCount(s.n) + ' small blocks (merged)', color: labelColor(s.l, 0) });
    L.push({ text: range + ', ' + fmtBytes(s.b) });
    L.push({ text: 'used ' + fmtBytes(s.u) + ' \u00b7 free ' + fmtBytes(s.b - s.u) + ' \u00b7 waste ' + fmtBytes(s.u - s.q) });
    L.push({ text: 'mostly ' + (s.l == null ? '(unlabelled)' : s.l) });
  }
  showTip(L, ev.clientX, ev.clientY);
}
$('map').addEventListener('mousemove', mapHover);
$('map').addEventListener('mouseleave', function () { hideTip(); if (mapGeom) $('map-hi').getContext('2d').clearRect(0, 0, mapGeom.css, mapGeom.H); });
$('map-full').onchange = drawMap;

function drawAll() { drawFrag(); drawMem(); drawMap(); }
drawAll();
var lastW = window.innerWidth, rt = 0;
window.addEventListener('resize', function () { if (window.innerWidth === lastW) return; lastW = window.innerWidth; clearTimeout(rt); rt = setTimeout(drawAll, 150); });
})();
