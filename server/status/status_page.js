// The coordinator's status page: polls /api/jobs, /api/history and
// /api/shards and draws tables and inline SVG curves. Every value goes in
// through textContent or an attribute, never as HTML.
'use strict';

const REFRESH_MS = 2000;
const MAX_CURVES = 8;        // newest jobs with progress get a chart
const W = 360, H = 140, PAD = 6;
const SVG_NS = 'http://www.w3.org/2000/svg';

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) {
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function num(x) { return Number(x || 0); }
function fmt(x, digits) {
  const v = num(x);
  return Number.isFinite(v) ? v.toFixed(digits) : '-';
}
function bytes(x) {
  let v = num(x), u = 0;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
  return v.toFixed(u ? 1 : 0) + ' ' + units[u];
}

async function getJson(url) {
  const r = await fetch(url, {cache: 'no-store'});
  const body = await r.json();
  if (!r.ok) throw new Error(url + ': ' + (body.error || r.status));
  return body;
}

// The step split as a stacked bar: data, compute, exposed communication.
function splitBar(p) {
  const parts = [num(p.data_s), num(p.compute_s), num(p.comm_s)];
  const total = parts.reduce((a, b) => a + b, 0);
  if (!(total > 0)) return '-';
  const svg = svgEl('svg', {width: 160, height: 14, class: 'split'});
  const colors = ['#ff7f0e', '#2ca02c', '#9467bd'];
  const names = ['data', 'compute', 'comm'];
  let x = 0;
  const tip = [];
  parts.forEach((v, i) => {
    const w = 160 * v / total;
    svg.append(svgEl('rect', {x: x, y: 0, width: w, height: 14,
                              fill: colors[i], class: names[i]}));
    x += w;
    tip.push(names[i] + ' ' + Math.round(100 * v / total) + '%');
  });
  const title = svgEl('title');
  title.textContent = tip.join(', ');
  svg.append(title);
  return el('span', {title: tip.join(', ')}, svg, ' ', tip.join(' / '));
}

function jobRow(j) {
  const p = j.progress || {};
  const total = num(p.total_steps);
  const step = num(p.step) + (total ? ' / ' + total : '');
  const test = num(p.test_accuracy) >= 0 && p.test_accuracy !== undefined &&
      num(p.step) > 0 ? fmt(p.test_accuracy, 4) : '-';
  return el('tr', {'data-job': j.job_id},
            el('td', {}, j.job_id), el('td', {class: 'text'}, j.name),
            el('td', {class: 'text ' + j.state, title: j.reason || ''},
               j.state),
            el('td', {}, step), el('td', {}, fmt(p.loss, 4)),
            el('td', {}, fmt(p.train_accuracy, 4)), el('td', {}, test),
            el('td', {}, fmt(p.samples_per_s, 0)),
            el('td', {class: 'text'}, splitBar(p)),
            el('td', {}, (j.workers || []).length));
}

// An SVG path through (step, value) scaled into the chart, over the points
// where the value was measured (a Python worker's train accuracy is NaN);
// empty when it never was.
function pathData(points, key) {
  const kept = points.filter((p) => Number.isFinite(num(p[key])));
  if (!kept.length) return '';
  const xs = kept.map((p) => num(p.step));
  const ys = kept.map((p) => num(p[key]));
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => PAD + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (W - 2 * PAD);
  const sy = (y) => H - PAD - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) *
      (H - 2 * PAD);
  return xs.map((x, i) => (i ? 'L' : 'M') + sx(x).toFixed(1) + ' ' +
      sy(ys[i]).toFixed(1)).join(' ');
}

function curveFigure(job, points) {
  const svg = svgEl('svg', {width: W, height: H, class: 'curve',
                            'data-job': job.job_id});
  for (const [key, cls] of [['loss', 'loss'], ['train_accuracy', 'accuracy'],
                            ['samples_per_s', 'rate']]) {
    svg.append(svgEl('path', {class: cls, d: pathData(points, key)}));
  }
  const last = points[points.length - 1];
  return el('figure', {}, svg,
            el('figcaption', {}, job.job_id + ' ' + job.name + ': ' +
               points.length + ' points, step ' + num(last.step) +
               ', loss ' + fmt(last.loss, 4) + ', ' +
               fmt(last.samples_per_s, 0) + ' samples/s'));
}

async function drawCurves(jobs) {
  const chosen = jobs.filter((j) => j.progress && num(j.progress.step) > 0)
                     .slice(-MAX_CURVES).reverse();
  const figures = [];
  for (const j of chosen) {
    const h = await getJson('/api/history?job=' + encodeURIComponent(j.job_id));
    if ((h.points || []).length > 0) figures.push(curveFigure(j, h.points));
  }
  document.getElementById('curves').replaceChildren(...figures);
}

function shardRow(a) {
  const s = a.stats;
  if (!s) {
    return el('tr', {'data-shard': a.shard}, el('td', {}, a.shard),
              el('td', {class: 'text'}, a.address),
              el('td', {class: 'text', colspan: 8}, 'unreachable: ' + a.error));
  }
  let pushes = 0, pulls = 0, bin = 0, bout = 0, p50 = 0, p99 = 0;
  for (const j of s.job_stats || []) {
    pushes += num(j.pushes); pulls += num(j.pulls);
    bin += num(j.bytes_in); bout += num(j.bytes_out);
    p50 = Math.max(p50, num(j.apply_latency_p50_us));
    p99 = Math.max(p99, num(j.apply_latency_p99_us));
  }
  return el('tr', {'data-shard': a.shard}, el('td', {}, a.shard),
            el('td', {class: 'text'}, a.address), el('td', {}, num(s.jobs)),
            el('td', {}, num(s.chunks)),
            el('td', {}, bytes(s.bytes_held) + ' of ' +
               bytes(s.memory_budget_bytes)),
            el('td', {}, pushes), el('td', {}, pulls), el('td', {}, bytes(bin)),
            el('td', {}, bytes(bout)),
            el('td', {}, fmt(p50, 0) + ' / ' + fmt(p99, 0)));
}

async function refresh() {
  const errors = [];
  try {
    const jobs = (await getJson('/api/jobs')).jobs || [];
    document.querySelector('#jobs tbody')
        .replaceChildren(...jobs.slice().reverse().map(jobRow));
    await drawCurves(jobs);
  } catch (e) {
    errors.push(String(e.message || e));
  }
  try {
    const shards = (await getJson('/api/shards')).shards || [];
    document.querySelector('#shards tbody')
        .replaceChildren(...shards.map(shardRow));
  } catch (e) {
    errors.push(String(e.message || e));
  }
  document.getElementById('error').textContent = errors.join('; ');
  document.getElementById('updated').textContent =
      'updated ' + new Date().toLocaleTimeString() + ' (every ' +
      REFRESH_MS / 1000 + ' s)';
  setTimeout(refresh, REFRESH_MS);
}

refresh();
