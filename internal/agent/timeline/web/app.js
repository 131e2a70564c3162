// podvisor timeline: lanes per container on a time axis, from the agent's
// /timeline API; polls while "live" is checked. No dependencies.
(function () {
  'use strict';
  const base = window.TL_BASE || '';
  const rest = location.pathname.substring(location.pathname.indexOf('/timeline-ui/') + '/timeline-ui/'.length);
  const parts = rest.split('/').filter(Boolean);
  const ns = parts[0], pod = parts[1];
  const chart = document.getElementById('chart');
  const statusEl = document.getElementById('status');
  const SVGNS = 'http://www.w3.org/2000/svg';
  const LANE = 34, TOP = 28, LEFT = 150, RIGHT = 20;
  let data = null, view = null; // view: {start, end} in ms since the first entry; null: fit

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVGNS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function title(e, text) { el('title', {}, e).textContent = text; }
  function fmt(ms) { return ms >= 10000 ? (ms / 1000).toFixed(1) + ' s' : Math.round(ms) + ' ms'; }

  function describe(e, t0) {
    let s = '+' + fmt(new Date(e.time) - t0) + '  ' + e.kind;
    if (e.name) s += ' ' + e.name;
    if (e.state) s += ' ' + e.state;
    if (e.reason) s += ' (' + e.reason + ')';
    if (e.exitCode !== undefined) s += ' exit ' + e.exitCode;
    if (e.message) s += ': ' + e.message;
    return s;
  }

  // lanes: the pod's (phase segments, pod-level marks), then one per
  // container in the order they first appear.
  function lanes(tl) {
    const t0 = new Date(tl.entries[0].time);
    const end = new Date(tl.entries[tl.entries.length - 1].time) - t0;
    const byName = new Map([['', { name: '', segs: [], marks: [], open: null }]]);
    for (const e of tl.entries) {
      const at = new Date(e.time) - t0;
      const key = e.container || '';
      if (!byName.has(key)) byName.set(key, { name: key, segs: [], marks: [], open: null });
      const lane = byName.get(key);
      let cls = null;
      if (e.kind === 'Container') {
        cls = e.state === 'terminated' ? (e.exitCode === 0 ? 'terminated-ok' : 'terminated-err') : e.state;
      } else if (e.kind === 'Phase') {
        cls = 'phase-' + e.state;
      }
      if (cls) {
        if (lane.open) lane.open.end = at;
        lane.open = { start: at, end: end, cls: cls, text: describe(e, t0) };
        lane.segs.push(lane.open);
      } else {
        lane.marks.push({ at: at, kind: e.kind, warning: e.state === 'Warning', text: describe(e, t0) });
      }
    }
    return { t0: t0, end: Math.max(end, 1), lanes: [...byName.values()] };
  }

  function render() {
    chart.textContent = '';
    if (!data || !data.entries || data.entries.length === 0) return;
    const L = lanes(data);
    const width = Math.max(chart.clientWidth, 600);
    const height = TOP + L.lanes.length * LANE + 10;
    const v = view || { start: -L.end * 0.02, end: L.end * 1.02 };
    const x = ms => LEFT + (ms - v.start) / (v.end - v.start) * (width - LEFT - RIGHT);
    const svg = el('svg', { width: width, height: height, id: 'timeline-svg' }, chart);
    // Axis: about 8 ticks at a round step.
    const span = v.end - v.start;
    const raw = span / 8, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
    const axis = el('g', { class: 'axis' }, svg);
    for (let t = Math.ceil(v.start / step) * step; t <= v.end; t += step) {
      el('line', { x1: x(t), x2: x(t), y1: TOP - 6, y2: height }, axis);
      el('text', { x: x(t) + 2, y: TOP - 10 }, axis).textContent = '+' + fmt(t);
    }
    const clip = el('clipPath', { id: 'plot' }, el('defs', {}, svg));
    el('rect', { x: LEFT, y: 0, width: width - LEFT - RIGHT, height: height }, clip);
    L.lanes.forEach((lane, i) => {
      const y = TOP + i * LANE;
      const g = el('g', { class: 'lane', 'data-container': lane.name || '(pod)' }, svg);
      el('rect', { class: 'lane-bg', x: LEFT, y: y + 4, width: width - LEFT - RIGHT, height: LANE - 8 }, g);
      el('text', { class: 'lane-label', x: 8, y: y + LANE / 2 + 4 }, g).textContent = lane.name || 'pod ' + data.name;
      const plot = el('g', { 'clip-path': 'url(#plot)' }, g);
      for (const s of lane.segs) {
        const r = el('rect', { class: 'seg ' + s.cls, x: x(s.start), y: y + 8, width: Math.max(1, x(s.end) - x(s.start)), height: LANE - 16 }, plot);
        title(r, s.text + ' — until +' + fmt(s.end));
      }
      for (const m of lane.marks) {
        const line = el('line', { class: 'mark ' + m.kind + (m.warning ? ' Warning' : ''), x1: x(m.at), x2: x(m.at), y1: y + 4, y2: y + LANE - 4 }, plot);
        title(line, m.text);
        // A wider invisible target, so that hovering finds the mark.
        const hit = el('rect', { x: x(m.at) - 4, y: y + 4, width: 8, height: LANE - 8, fill: 'transparent' }, plot);
        title(hit, m.text);
      }
    });
    const dropped = data.dropped ? ' (' + data.dropped + ' older entries not kept)' : '';
    statusEl.textContent = data.namespace + '/' + data.name + ' — ' + data.entries.length + ' entries over ' + fmt(L.end) + dropped +
      ', since ' + L.t0.toISOString();
    chart.__scale = { x: x, v: v, width: width };
  }

  function zoom(factor, atX) {
    const s = chart.__scale;
    if (!s) return;
    const v = s.v;
    const at = atX === undefined ? (v.start + v.end) / 2 : v.start + (atX - LEFT) / (s.width - LEFT - RIGHT) * (v.end - v.start);
    view = { start: at - (at - v.start) * factor, end: at + (v.end - at) * factor };
    render();
  }

  async function load() {
    try {
      const r = await fetch(base + '/timeline/' + encodeURIComponent(ns) + '/' + encodeURIComponent(pod));
      if (!r.ok) { statusEl.textContent = 'no timeline: ' + r.status + ' ' + (await r.text()); return; }
      data = await r.json();
      render();
    } catch (err) {
      statusEl.textContent = 'cannot load the timeline: ' + err;
    }
  }

  async function loadNode() {
    document.getElementById('controls').style.display = 'none';
    document.getElementById('legend').style.display = 'none';
    const r = await fetch(base + '/timeline/');
    const pods = await r.json();
    statusEl.textContent = pods.length + ' pods with a timeline on this node';
    const table = document.createElement('table');
    table.className = 'pods';
    table.innerHTML = '<tr><th>namespace</th><th>pod</th><th>entries</th><th>last</th></tr>';
    for (const p of pods) {
      const tr = table.insertRow();
      tr.insertCell().textContent = p.namespace;
      const a = document.createElement('a');
      a.href = base + '/timeline-ui/' + encodeURIComponent(p.namespace) + '/' + encodeURIComponent(p.name);
      a.textContent = p.name;
      tr.insertCell().appendChild(a);
      tr.insertCell().textContent = p.entries;
      tr.insertCell().textContent = p.last || '';
    }
    chart.replaceWith(table);
  }

  if (!ns || !pod) { loadNode(); return; }
  document.getElementById('title').textContent = 'timeline of ' + ns + '/' + pod;
  const trace = document.getElementById('trace');
  trace.href = base + '/timeline/' + encodeURIComponent(ns) + '/' + encodeURIComponent(pod) + '?format=trace';
  trace.setAttribute('download', ns + '_' + pod + '.trace.json');
  document.getElementById('fit').onclick = () => { view = null; render(); };
  document.getElementById('zoomin').onclick = () => zoom(0.5);
  document.getElementById('zoomout').onclick = () => zoom(2);
  chart.addEventListener('wheel', ev => { ev.preventDefault(); zoom(ev.deltaY < 0 ? 0.8 : 1.25, ev.offsetX); }, { passive: false });
  let drag = null;
  chart.addEventListener('mousedown', ev => { drag = { x: ev.clientX, v: chart.__scale && chart.__scale.v }; });
  window.addEventListener('mouseup', () => { drag = null; });
  window.addEventListener('mousemove', ev => {
    if (!drag || !drag.v) return;
    const s = chart.__scale;
    const dms = (ev.clientX - drag.x) / (s.width - LEFT - RIGHT) * (drag.v.end - drag.v.start);
    view = { start: drag.v.start - dms, end: drag.v.end - dms };
    render();
  });
  window.addEventListener('resize', render);
  load();
  setInterval(() => { if (document.getElementById('live').checked) load(); }, 1000);
})();
