// gpuplane ui: the page. It reads the state the server sends over
// server-sent events (/api/events) and draws four views from it. Every
// string from the cluster goes in through textContent, never as markup.
'use strict';

const ROW = 28;          // px per node row of the map (style.css .row)
const HISTORY = 360;     // queue usage samples kept per queue
const ui = {
  state: null, view: 'map', selNode: null, selWait: -1, mapFocus: 0,
  filtered: [], history: new Map(), firstPaint: false, costProm: null,
};
// What the browser tests read: the last state drawn and when.
window.gpuplaneUI = { seq: 0, drawnAt: 0, errors: [] };

const $ = (id) => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function td(text, cls) { return el('td', cls, text); }
function fmt(x, d = 2) { return Number.isFinite(x) ? x.toFixed(d).replace(/\.?0+$/, '') || '0' : '-'; }
function dur(sec) {
  if (sec < 0) return '-';
  if (sec < 60) return sec + ' s';
  if (sec < 7200) return Math.round(sec / 60) + ' min';
  if (sec < 172800) return (sec / 3600).toFixed(1) + ' h';
  return (sec / 86400).toFixed(1) + ' d';
}

// ---- views and keys ----
const views = ['map', 'queues', 'workloads', 'cost'];
function show(view, focusTab) {
  ui.view = view;
  for (const v of views) {
    const tab = $('tab-' + v), panel = $('view-' + v);
    const on = v === view;
    tab.setAttribute('aria-selected', on ? 'true' : 'false');
    tab.tabIndex = on ? 0 : -1;
    panel.hidden = !on;
  }
  if (focusTab) $('tab-' + view).focus();
  draw();
  if (view === 'cost') loadCost();
}
$('tabs').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-view]');
  if (b) show(b.dataset.view, true);
});
$('tabs').addEventListener('keydown', (e) => {
  const i = views.indexOf(ui.view);
  if (e.key === 'ArrowRight') { show(views[(i + 1) % views.length], true); e.preventDefault(); }
  if (e.key === 'ArrowLeft') { show(views[(i + views.length - 1) % views.length], true); e.preventDefault(); }
});
document.addEventListener('keydown', (e) => {
  const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName);
  if (e.key === 'Escape' && typing) { e.target.blur(); return; }
  if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
  const n = '1234'.indexOf(e.key);
  if (n >= 0) { show(views[n], true); e.preventDefault(); return; }
  if (e.key === '/' && ui.view === 'map') { $('f-text').focus(); e.preventDefault(); }
});

// ---- the map ----
for (const id of ['f-text', 'f-pool', 'f-product', 'f-queue', 'f-problem']) {
  $(id).addEventListener('input', () => { ui.mapFocus = 0; drawMap(); });
}
const map = $('map');
map.addEventListener('scroll', () => drawRows());
map.addEventListener('click', (e) => {
  const r = e.target.closest('.row');
  if (!r) return;
  ui.mapFocus = Number(r.dataset.i);
  selectNode(ui.filtered[ui.mapFocus]);
  map.focus();
});
map.addEventListener('keydown', (e) => {
  const n = ui.filtered.length;
  if (!n) return;
  const page = Math.max(1, Math.floor(map.clientHeight / ROW) - 1);
  const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page, j: 1, k: -1 };
  if (e.key in moves) {
    ui.mapFocus = Math.min(n - 1, Math.max(0, ui.mapFocus + moves[e.key]));
  } else if (e.key === 'Home') { ui.mapFocus = 0; } else if (e.key === 'End') { ui.mapFocus = n - 1; } else if (e.key === 'Enter' || e.key === ' ') {
    selectNode(ui.filtered[ui.mapFocus]);
  } else { return; }
  e.preventDefault();
  const top = ui.mapFocus * ROW;
  if (top < map.scrollTop) map.scrollTop = top;
  if (top + ROW > map.scrollTop + map.clientHeight) map.scrollTop = top + ROW - map.clientHeight;
  drawRows();
});

function gpuSymbol(g) {
  if (g.w) return ['out', '✕', 'GPU ' + g.i + ' ' + g.w];
  const held = (g.h || []).length;
  if (!held) return ['free', '□', 'GPU ' + g.i + ' free'];
  const whole = g.h.length === 1 && !g.h[0].part;
  return [whole ? 'whole' : 'part', whole ? '■' : '◧', 'GPU ' + g.i + ' held by ' + g.h.map((h) => h.p + ' (' + (h.part || 'whole') + ')').join(', ')];
}

function nodeMatches(n, text, pool, prod, queue, prob) {
  if (pool !== '*' && (n.pool || '') !== pool) return false;
  if (prod !== '*' && (n.prod || '') !== prod) return false;
  if (queue !== '*' && !(n.q || []).includes(queue)) return false;
  if (prob && !n.prob) return false;
  if (text) {
    if (n.n.toLowerCase().includes(text)) return true;
    for (const g of n.g) for (const h of g.h || []) if (h.p.toLowerCase().includes(text)) return true;
    return false;
  }
  return true;
}

function fillSelect(id, values, label) {
  const s = $(id), cur = s.value;
  const want = ['*', ...values];
  const have = Array.from(s.options).map((o) => o.value);
  if (want.length === have.length && want.every((v, i) => v === have[i])) return;
  s.textContent = '';
  for (const v of want) {
    const o = el('option', null, v === '*' ? 'all' : (v === '' ? '(' + label + ' unset)' : v));
    o.value = v;
    s.append(o);
  }
  s.value = want.includes(cur) ? cur : '*';
}

function drawMap() {
  const st = ui.state;
  if (!st) return;
  fillSelect('f-pool', st.pools, 'pool');
  fillSelect('f-product', st.products, 'product');
  fillSelect('f-queue', st.queues.map((q) => q.name), 'queue');
  const text = $('f-text').value.trim().toLowerCase();
  const pool = $('f-pool').value, prod = $('f-product').value, queue = $('f-queue').value, prob = $('f-problem').checked;
  ui.filtered = st.nodes.filter((n) => nodeMatches(n, text, pool, prod, queue, prob));
  ui.mapFocus = Math.min(ui.mapFocus, Math.max(0, ui.filtered.length - 1));
  // The summary aggregates every node the filters keep: at 5,000 nodes it
  // is what one reads first; the list below draws only the rows in view.
  const agg = new Map();
  for (const n of ui.filtered) {
    const k = (n.pool || '') + '\u0000' + (n.prod || '');
    let a = agg.get(k);
    if (!a) { a = { pool: n.pool || '(none)', prod: n.prod || '(unknown)', nodes: 0, gpus: 0, held: 0, free: 0, out: 0, prob: 0 }; agg.set(k, a); }
    a.nodes++;
    if (n.prob) a.prob++;
    for (const g of n.g) {
      a.gpus++;
      if (g.w) { a.out++; continue; }
      a.held += 1 - g.fm / 1000;
      a.free += g.fm / 1000;
    }
  }
  const body = $('summary').tBodies[0];
  body.textContent = '';
  for (const a of [...agg.values()].sort((x, y) => x.pool.localeCompare(y.pool) || x.prod.localeCompare(y.prod))) {
    const tr = el('tr');
    tr.append(td(a.pool), td(a.prod), td(a.nodes, 'num'), td(a.gpus, 'num'), td(fmt(a.held), 'num'), td(fmt(a.free), 'num'),
      td(a.out, a.out ? 'num bad' : 'num'), td(a.prob, a.prob ? 'num bad' : 'num'));
    body.append(tr);
  }
  $('map-spacer').style.height = (ui.filtered.length * ROW) + 'px';
  $('map-count').textContent = ui.filtered.length + ' of ' + st.nodes.length + ' GPU nodes; ' + st.totals.gpus + ' GPUs, ' +
    fmt(st.totals.heldMilli / 1000) + ' held, ' + st.totals.withdrawn + ' out of service.';
  drawRows();
  if (ui.selNode) {
    const n = st.nodes.find((x) => x.n === ui.selNode);
    drawNode(n);
  }
  if (!ui.firstPaint && st.nodes.length) {
    ui.firstPaint = true;
    performance.mark('gpuplane-map-painted');
  }
}

function drawRows() {
  const first = Math.max(0, Math.floor(map.scrollTop / ROW) - 5);
  const last = Math.min(ui.filtered.length, Math.ceil((map.scrollTop + map.clientHeight) / ROW) + 5);
  for (const r of Array.from(map.querySelectorAll('.row'))) r.remove();
  const frag = document.createDocumentFragment();
  for (let i = first; i < last; i++) {
    const n = ui.filtered[i];
    const r = el('div', 'row' + (i === ui.mapFocus ? ' sel' : ''));
    r.id = 'node-' + i;
    r.setAttribute('role', 'option');
    r.setAttribute('aria-selected', n.n === ui.selNode ? 'true' : 'false');
    r.dataset.i = i;
    r.dataset.node = n.n;
    r.style.top = (i * ROW) + 'px';
    r.append(el('span', 'name', (n.ready ? '' : '! ') + n.n));
    r.append(el('span', 'meta', [n.pool, n.prod].filter(Boolean).join(' · ')));
    const cells = el('span', 'gpus');
    for (const g of n.g) {
      const [cls, sym, label] = gpuSymbol(g);
      const s = el('span', 'gpu ' + cls, sym);
      s.title = label;
      s.setAttribute('aria-label', label);
      cells.append(s);
    }
    r.append(cells);
    r.append(el('span', 'hint', 'free: ' + n.free));
    if (n.prob) r.append(el('span', 'prob', '⚠ ' + n.prob));
    frag.append(r);
  }
  map.append(frag);
  map.setAttribute('aria-activedescendant', ui.filtered.length ? 'node-' + ui.mapFocus : '');
}

function selectNode(n) {
  if (!n) return;
  ui.selNode = n.n;
  drawRows();
  drawNode(n);
}

function drawNode(n) {
  const box = $('node-detail');
  box.textContent = '';
  if (!n) { box.append(el('p', 'hint', 'The node ' + ui.selNode + ' is gone.')); return; }
  box.append(el('h3', null, n.n));
  const dl = el('dl');
  const add = (k, v, cls) => { dl.append(el('dt', null, k), el('dd', cls, v)); };
  add('Ready', n.ready ? 'yes' : 'NO', n.ready ? 'ok' : 'bad');
  add('Health', n.prob || 'ok', n.prob ? 'bad' : 'ok');
  add('Pool', n.pool || '(none)');
  add('Product', n.prod || '(unknown)');
  add('NVLink', n.nvl || '(no NVLink islands reported)');
  for (const [k, v] of Object.entries(n.lab || {}).sort()) add(k, v);
  add('Free', n.free);
  box.append(dl);
  const ul = el('ul');
  ul.className = 'gpus-detail';
  for (const g of n.g) {
    const li = el('li');
    const [cls, sym] = gpuSymbol(g);
    li.append(el('span', 'gpu ' + cls, sym), document.createTextNode(' GPU ' + g.i + (g.mig ? ' (MIG, ' + g.mig + ' slices)' : '') + ': '));
    if (g.w) li.append(el('span', 'bad', g.w.toUpperCase() + '. '));
    if (g.h && g.h.length) {
      li.append(document.createTextNode('held by ' + g.h.map((h) => h.p + ' — ' + (h.part || 'whole') + (h.q ? ', queue ' + h.q : '')).join('; ')));
      const freeTxt = g.mig ? (g.fs ? '; ' + g.fs + ' slices free' : '') : (g.fm > 0 ? '; ' + fmt(g.fm / 1000) + ' free' : '');
      li.append(document.createTextNode(freeTxt));
    } else if (!g.w) {
      li.append(el('span', 'ok', 'free'));
    }
    ul.append(li);
  }
  box.append(ul);
}

// ---- queues ----
function drawQueues() {
  const st = ui.state;
  const body = $('queues').tBodies[0];
  body.textContent = '';
  if (!st.queues.length) {
    const tr = el('tr');
    const c = td('No Queues (or the Queue CRD is not installed).', 'hint');
    c.colSpan = 10;
    tr.append(c);
    body.append(tr);
    return;
  }
  for (const q of st.queues) {
    const tr = el('tr');
    const name = td((q.depth ? '└ ' : '') + q.name, 'indent' + Math.min(4, q.depth));
    tr.append(name, td(q.usage, 'num'), td(q.fairShare, 'num'), td(q.guaranteed || '-', 'num'), td(q.limit || '-', 'num'),
      td(q.borrowedGPUs > 0 ? fmt(q.borrowedGPUs) + ' (borrowing)' : '0', q.borrowedGPUs > 0 ? 'num waiting' : 'num'),
      td(q.pending, q.pending ? 'num waiting' : 'num'), td(q.admitted, 'num'));
    const hist = td('');
    hist.append(spark(ui.history.get(q.name) || []));
    tr.append(hist, td(q.problem || '', q.problem ? 'bad' : ''));
    body.append(tr);
  }
}

function spark(samples) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', '0 0 120 20');
  svg.setAttribute('role', 'img');
  const max = Math.max(1, ...samples);
  const last = samples.length ? samples[samples.length - 1] : 0;
  svg.setAttribute('aria-label', 'usage history: ' + samples.length + ' samples, now ' + fmt(last) + ', peak ' + fmt(Math.max(0, ...samples)));
  const line = document.createElementNS(ns, 'polyline');
  const step = samples.length > 1 ? 120 / (samples.length - 1) : 0;
  line.setAttribute('points', samples.map((v, i) => (i * step).toFixed(1) + ',' + (19 - 18 * v / max).toFixed(1)).join(' '));
  svg.append(line);
  const title = document.createElementNS(ns, 'title');
  title.textContent = svg.getAttribute('aria-label');
  svg.append(title);
  return svg;
}

function recordHistory(st) {
  for (const q of st.queues) {
    let h = ui.history.get(q.name);
    if (!h) { h = []; ui.history.set(q.name, h); }
    h.push(q.usageGPUs);
    if (h.length > HISTORY) h.shift();
  }
}

// ---- workloads ----
const waitingBody = $('waiting').tBodies[0];
waitingBody.addEventListener('click', (e) => {
  const tr = e.target.closest('tr[data-i]');
  if (tr) { ui.selWait = Number(tr.dataset.i); drawWaiting(); askWhatIf(); }
});
waitingBody.addEventListener('keydown', (e) => {
  const n = ui.state ? ui.state.waiting.length : 0;
  if (!n) return;
  if (e.key === 'ArrowDown' || e.key === 'j') ui.selWait = Math.min(n - 1, ui.selWait + 1);
  else if (e.key === 'ArrowUp' || e.key === 'k') ui.selWait = Math.max(0, ui.selWait - 1);
  else if (e.key === 'Enter' || e.key === ' ') { askWhatIf(); e.preventDefault(); return; } else return;
  e.preventDefault();
  drawWaiting();
  const tr = waitingBody.querySelector('tr[data-i="' + ui.selWait + '"]');
  if (tr) tr.focus();
});

function drawWaiting() {
  const st = ui.state;
  waitingBody.textContent = '';
  if (!st.waiting.length) {
    const tr = el('tr');
    const c = td('Nothing waits.', 'hint');
    c.colSpan = 7;
    tr.append(c);
    waitingBody.append(tr);
  }
  st.waiting.forEach((w, i) => {
    const tr = el('tr', i === ui.selWait ? 'sel' : '');
    tr.dataset.i = i;
    tr.dataset.group = w.group || '';
    tr.tabIndex = i === Math.max(0, ui.selWait) ? 0 : -1;
    tr.setAttribute('aria-selected', i === ui.selWait ? 'true' : 'false');
    tr.append(td(w.namespace), td(w.name + (w.count > 1 ? ' (' + w.count + ' pods)' : '')), td(w.kind), td(w.queue || '-'), td(w.phase, 'waiting'),
      td((w.scheduled || 0) + ' / ' + w.minMember, 'num'), td(w.why || '(no reason recorded yet)'));
    waitingBody.append(tr);
  });
  $('waiting-count').textContent = st.waitingTotal > st.waiting.length ? 'The first ' + st.waiting.length + ' (by namespace and name) of ' + st.waitingTotal + ' waiting entries.' : '';
  $('running-count').textContent = st.runningTotal > st.running.length ? 'The ' + st.running.length + ' holding the most GPUs of ' + st.runningTotal + ' running workloads.' : '';
  const runBody = $('running').tBodies[0];
  runBody.textContent = '';
  for (const r of st.running) {
    const tr = el('tr');
    tr.append(td(r.group), td(r.queue || '-'), td(r.pods, 'num'), td(fmt(r.gpus), 'num'), td(r.nodes), td(dur(r.ageSec), 'num'),
      td(r.endsInSec >= 0 ? dur(r.endsInSec) : 'no deadline', 'num'), td(fmt(r.gpuHours), 'num'), td(st.price ? fmt(r.cost || 0) : '-', 'num'));
    runBody.append(tr);
  }
}

async function askWhatIf() {
  const w = ui.state && ui.state.waiting[ui.selWait];
  const box = $('whatif');
  box.textContent = '';
  if (!w) return;
  if (!w.group) { box.append(el('p', 'hint', 'No pending group of the scheduler matches ' + w.namespace + '/' + w.name + '.')); return; }
  box.append(el('p', 'hint', 'Asking the scheduling core about ' + w.group + '…'));
  let ans;
  try {
    const res = await fetch('api/whatif?group=' + encodeURIComponent(w.group));
    if (!res.ok) throw new Error(await res.text());
    ans = await res.json();
  } catch (err) {
    box.textContent = '';
    box.append(el('p', 'bad', 'What-if failed: ' + err.message));
    return;
  }
  box.textContent = '';
  box.dataset.group = ans.group;
  box.dataset.verdict = ans.verdict;
  box.append(el('h3', null, 'What would admit ' + w.namespace + '/' + w.name));
  box.append(el('p', 'verdict', ans.summary));
  if (ans.reason) box.append(el('p', null, 'Now: ' + ans.reason));
  if (ans.filtered && ans.filtered.length) {
    const ul = el('ul');
    for (const f of ans.filtered) ul.append(el('li', null, f.filter + ': ' + f.nodes + ' node(s)'));
    box.append(el('p', 'hint', 'Nodes refused for its first pod, by filter:'), ul);
  }
  box.append(el('p', 'hint', ans.runs + ' run(s) of the scheduling core on the current snapshot, ' + ans.millis + ' ms.'));
}

// ---- cost ----
async function loadCost() {
  if (!ui.state || !ui.state.costFromPrometheus) return;
  try {
    const [ns, q] = await Promise.all(['namespace', 'queue'].map(async (by) => {
      const res = await fetch('api/cost?by=' + by);
      if (!res.ok) throw new Error(await res.text());
      return res.json();
    }));
    ui.costProm = { ns, q };
  } catch (err) {
    ui.costProm = { error: err.message };
  }
  drawCost();
}

function drawCost() {
  const st = ui.state;
  const fill = (id, rows, total) => {
    const body = $(id).tBodies[0];
    body.textContent = '';
    for (const r of rows) {
      const tr = el('tr');
      tr.append(td(r.name || '(none)'), td(fmt(r.gpuHours), 'num'), td(total > 0 ? (100 * r.gpuHours / total).toFixed(1) + '%' : '-', 'num'),
        td(st.price ? fmt(r.cost || 0) : '-', 'num'));
      body.append(tr);
    }
  };
  const sum = (rows) => rows.reduce((a, r) => a + r.gpuHours, 0);
  const p = ui.costProm;
  if (p && p.ns) {
    $('cost-source').textContent = 'From Prometheus, as gpuplane cost computes it: ' + p.ns.start + ' to ' + p.ns.end + ', sampled every ' + p.ns.resolution +
      '; ' + fmt(p.ns.allocatedGPUHours) + ' GPU-hours held of ' + fmt(p.ns.capacityGPUHours) + '.';
    fill('cost-ns', p.ns.rows, p.ns.allocatedGPUHours);
    fill('cost-queue', p.q.rows, p.q.allocatedGPUHours);
    return;
  }
  $('cost-source').textContent = (p && p.error ? 'Prometheus failed (' + p.error + '); ' : '') +
    'GPU-hours of the running pods since each started (give --prometheus for the history gpuplane cost reads). A GPU-hour is one physical GPU held for one hour.';
  fill('cost-ns', st.cost.byNamespace, sum(st.cost.byNamespace));
  fill('cost-queue', st.cost.byQueue, sum(st.cost.byQueue));
}

// ---- state ----
function draw() {
  if (!ui.state) return;
  if (ui.view === 'map') drawMap();
  if (ui.view === 'queues') drawQueues();
  if (ui.view === 'workloads') drawWaiting();
  if (ui.view === 'cost') drawCost();
  window.gpuplaneUI.seq = ui.state.seq;
  window.gpuplaneUI.drawnAt = Date.now();
}

function onState(st) {
  ui.state = st;
  recordHistory(st);
  const un = $('unreadable');
  un.hidden = !(st.unreadable && st.unreadable.length);
  un.textContent = un.hidden ? '' : 'Your credentials may not list: ' + st.unreadable.join(', ') + '. What depends on them is not shown.';
  $('conn').className = '';
  $('conn').textContent = st.cluster + ' · updated ' + new Date(st.built).toLocaleTimeString();
  draw();
}

function connect() {
  const es = new EventSource('api/events');
  es.addEventListener('state', (e) => onState(JSON.parse(e.data)));
  es.onerror = () => {
    $('conn').className = 'down';
    $('conn').textContent = 'disconnected: retrying…';
  };
}
connect();
