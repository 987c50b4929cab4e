// The Prestroid console: reads the JSON endpoints under api/ and draws
// them. Every value from the proxy goes into the page as text (never as
// HTML): user names and sources are whatever clients sent.
'use strict';

(function () {
  const TOKEN_KEY = 'prestroid-admin-token';
  const REFRESH_MS = 5000;
  const $ = (id) => document.getElementById(id);

  // ---- small DOM and format helpers

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'title') e.title = v;
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function td(content, cls, title) { return el('td', { class: cls, title: title }, content); }

  function fill(tbody, rows, empty, cols) {
    tbody.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { class: 'muted', colspan: cols }, empty))]));
  }

  // trim drops a decimal number's trailing zeros ("1.50" → "1.5", "2.00" →
  // "2"), never an integer's ("100" stays).
  function trim(x) { return x.includes('.') ? x.replace(/\.?0+$/, '') : x; }

  function secs(s) {
    if (s === null || s === undefined || !isFinite(s)) return '–';
    if (s === 0) return '0 s';
    if (s < 0.001) return (s * 1e6).toFixed(0) + ' µs';
    if (s < 1) return trim((s * 1000).toPrecision(3)) + ' ms';
    if (s < 100) return trim(s.toPrecision(3)) + ' s';
    if (s < 3600) return (s / 60).toFixed(1) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  }

  function bytes(b) {
    if (b === null || b === undefined || !isFinite(b)) return '–';
    const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
    let u = 0;
    while (b >= 1000 && u < units.length - 1) { b /= 1024; u++; }
    return (u ? trim(b.toPrecision(3)) : b.toFixed(0)) + ' ' + units[u];
  }

  function waited(s) {
    if (s < 60) return Math.floor(s) + ' s';
    return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
  }

  function clock(t) { return t ? new Date(t).toLocaleTimeString([], { hour12: false }) : '–'; }

  function pct(x) { return x === null || x === undefined ? '–' : (100 * x).toFixed(1) + ' %'; }

  function qclass(q) { return q <= 2 ? 'q-good' : q <= 10 ? 'q-fair' : 'q-bad'; }

  function sourceBadge(src) {
    return el('span', { class: 'badge src-' + src.replace('+', '-') }, src);
  }

  // ---- the admin token and fetching

  let token = sessionStorage.getItem(TOKEN_KEY) || '';

  class Unauthorized extends Error {}

  async function api(path, init) {
    init = init || {};
    const headers = Object.assign({}, init.headers);
    if (token) headers['X-Prestroid-Admin-Token'] = token;
    const resp = await fetch('api/' + path, Object.assign({}, init, { headers: headers, cache: 'no-store' }));
    if (resp.status === 401) throw new Unauthorized('the admin token is required');
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.error || ('HTTP ' + resp.status));
    return body;
  }

  function showLogin(message) {
    $('main').hidden = true;
    $('login').hidden = false;
    $('logout').hidden = true;
    const err = $('login-error');
    err.hidden = !message;
    err.textContent = message || '';
    $('token').focus();
  }

  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    refresh();
  });

  $('logout').addEventListener('click', () => {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin('');
  });

  function banner(message) {
    const b = $('banner');
    b.hidden = !message;
    b.textContent = message || '';
  }

  // ---- clusters

  function renderClusters(c) {
    const rows = c.clusters.map((x) => {
      let health;
      if (!c.monitor) health = el('span', { class: 'badge', title: 'routing.monitor_interval is off' }, 'not checked');
      else if (x.healthy) health = el('span', { class: 'badge ok' }, 'healthy');
      else health = el('span', { class: 'badge bad', title: x.error || '' }, 'down');
      const name = el('span', {}, x.name, x.default ? el('span', { class: 'small', title: 'the first configured cluster' }, 'default') : null);
      return el('tr', { dataset: { cluster: x.name } },
        td(name, null, x.url), td(x.class || '–'),
        td(x.engine === 'unknown' ? el('span', { class: 'muted', title: 'not detected yet: set clusters[].engine, or wait for the monitor' }, 'unknown') : x.engine),
        td(health),
        td(x.load_error ? '?' : x.running, 'num', x.load_error || undefined), td(x.load_error ? '?' : x.queued, 'num'),
        td(x.load, 'num', 'running + queued + sent by this proxy since the check'), td(x.routed, 'num'),
        td(clock(x.checked)));
    });
    fill($('clusters-table').tBodies[0], rows, 'no clusters', 9);
    $('clusters-note').textContent = 'Routed: queries this proxy sent to the cluster in the last ' + c.window_minutes +
      ' minutes. Load: running + queued on the cluster at the last check, plus what this proxy sent since.';
  }

  // ---- decisions

  function renderDecisions(d) {
    $('decisions-count').textContent = d.decisions.length + ' shown, the last ' + d.capacity + ' kept';
    const rows = d.decisions.map((x) => {
      const link = x.ui_path && x.ui_path.startsWith('/ui/')
        ? el('a', { href: x.ui_path, target: '_blank', rel: 'noopener noreferrer', title: "the query in Trino's web UI" }, x.query_id)
        : x.query_id;
      let est = '–', src = '–';
      if (x.estimate) {
        const e = x.estimate;
        est = el('span', {}, secs(e.cpu_seconds), ' ',
          el('span', { class: 'muted' }, '[' + secs(e.lo_seconds) + ' – ' + secs(e.hi_seconds) + ']'));
        const more = [];
        if (e.peak_memory_bytes) more.push('mem ' + bytes(e.peak_memory_bytes));
        if (e.elapsed_seconds) more.push('elapsed ' + secs(e.elapsed_seconds));
        if (more.length) est = el('span', {}, est, el('span', { class: 'small' }, more.join(' · ')));
        src = sourceBadge(e.source);
        if (e.cached) src = el('span', {}, src, el('span', { class: 'small' }, 'cached'));
      }
      const q = x.qerror !== undefined ? el('span', { class: qclass(x.qerror) }, x.qerror.toFixed(2)) : '–';
      const state = x.state
        ? el('span', { class: 'badge ' + (x.state === 'FINISHED' ? 'ok' : 'bad'), title: x.error_name || '' }, x.state)
        : el('span', { class: 'badge', title: 'its last page has not passed through this proxy yet' }, 'in flight');
      return el('tr', { dataset: { queryId: x.query_id } },
        td(clock(x.time)), td(link, 'query'), td(x.user, null, x.source ? 'source: ' + x.source : undefined),
        td(est, 'estimate'), td(src), td(x.class || '–'), td(x.cluster),
        td(x.kind + (x.queued ? ' · queued' : ''), null, x.decision),
        td(x.actual_cpu_seconds !== undefined ? secs(x.actual_cpu_seconds) : '–', 'num actual',
          x.actual_peak_memory_bytes !== undefined ? 'peak memory ' + bytes(x.actual_peak_memory_bytes) +
            (x.actual_elapsed_seconds !== undefined ? ', elapsed ' + secs(x.actual_elapsed_seconds) : '') : undefined),
        td(q, 'num qerror'), td(state));
    });
    fill($('decisions-table').tBodies[0], rows, 'no query placed yet', 11);
  }

  // ---- queue

  function holdText(h) {
    const what = h.budget.endsWith('max_queries')
      ? h.in_flight + ' of ' + h.limit + ' queries in flight'
      : secs(h.in_flight) + ' + ' + secs(h.needs) + ' > ' + secs(h.limit) + ' CPU';
    return h.budget + ' (' + h.scope + '): ' + what;
  }

  function cancelButton(id) {
    const b = el('button', { type: 'button', class: 'cancel', dataset: { id: id } }, 'Cancel');
    let armed = null;
    b.addEventListener('click', async () => {
      if (!armed) { // a second click within 4 s cancels
        b.classList.add('confirm');
        b.textContent = 'Confirm cancel';
        armed = setTimeout(() => { armed = null; b.classList.remove('confirm'); b.textContent = 'Cancel'; }, 4000);
        return;
      }
      clearTimeout(armed);
      b.disabled = true;
      try {
        await api('queue/cancel', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ id: id }) });
        banner('');
      } catch (e) {
        if (e instanceof Unauthorized) { showLogin('The admin token was refused.'); return; }
        banner('Cancel failed: ' + e.message);
      }
      refresh();
    });
    return b;
  }

  function renderQueue(q) {
    const s = $('queue-summary');
    if (!q.enabled) {
      s.textContent = 'Admission control is off (no admission budget is set): nothing waits.';
      fill($('queue-table').tBodies[0], [], 'no queue', 7);
      return;
    }
    const limits = Object.entries(q.limits || {}).map(([k, v]) => k.replace('admission.', '') + ' ' + v).join(', ');
    s.textContent = q.queued + ' waiting, ' + q.in_flight + ' in flight (' + q.store + ' store; budgets: ' + (limits || 'none') + ')' +
      (q.error ? '. The store did not fully answer: ' + q.error : '');
    const rows = q.queries.map((x) => {
      const held = x.held_by.map(holdText);
      if (x.position > 0) held.push('behind ' + x.position + ' earlier ' + (x.position === 1 ? 'query' : 'queries') + ' of ' + x.user);
      if (!held.length) held.push('nothing: it is about to be admitted');
      return el('tr', { dataset: { id: x.id } },
        td(x.id, 'query'), td(x.user), td(x.group), td(waited(x.waited_seconds), 'num', 'since ' + clock(x.enqueued)),
        td(x.cpu_seconds ? secs(x.cpu_seconds) : '–', 'num'),
        td(el('span', {}, ...held.flatMap((h, i) => (i ? [el('br'), h] : [h]))), 'wrap held'),
        td(cancelButton(x.id)));
    });
    fill($('queue-table').tBodies[0], rows, 'nobody waits', 7);
  }

  // ---- guardrails

  function renderGuardrails(g) {
    const rules = g.rules.map((r) => r.name + ': ' + r.target + ' p' + Math.round(r.quantile * 100) + ' ≤ ' + r.limit_text +
      (r.dry_run ? ' (dry run)' : '') + (r.override_tag ? ', override tag ' + r.override_tag : ''));
    $('guardrails-rules').textContent = rules.length ? 'Rules: ' + rules.join('; ') : 'No guardrails are configured.';
    $('guardrails-count').textContent = g.total ? g.total + ' since start' : '';
    const rows = g.events.map((x) => el('tr', { dataset: { rule: x.rule } },
      td(clock(x.time)),
      td(el('span', { class: 'badge ' + (x.outcome === 'refused' ? 'bad' : ''), title: x.outcome === 'dry_run' ? 'dry run: the query ran' : 'the query never reached a cluster' }, x.outcome === 'dry_run' ? 'dry run' : 'refused')),
      td(x.user, null, x.group ? 'group ' + x.group + (x.source ? ', source ' + x.source : '') : x.source || undefined),
      td(x.rule),
      td(x.estimate_text, 'num', x.target + ' at quantile ' + x.quantile),
      td(x.limit_text, 'num'),
      td(x.override_tag || '–'),
      td(el('span', { class: 'mono' }, x.sql), 'wrap')));
    fill($('guardrails-table').tBodies[0], rows, g.rules.length ? 'nothing refused yet' : 'no guardrails', 8);
  }

  // ---- estimator

  function dl(target, pairs) {
    target.replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  }

  const SOURCE_COLORS = {
    cheap: '#78909c', history: '#00897b', 'model+residual': '#7b3fc4', model: '#2457a6', optimizer: '#e07b00', none: '#9e9e9e',
  };
  const charts = {};
  const ROLLING = 20; // queries in the q-error plot's rolling quantiles

  // timeTick labels a time axis: with seconds when it spans under 10 minutes.
  function timeTick(v, i, ticks) {
    const span = ticks.length > 1 ? ticks[ticks.length - 1].value - ticks[0].value : 0;
    const o = { hour12: false, hour: '2-digit', minute: '2-digit' };
    if (span < 600000) o.second = '2-digit';
    return new Date(v).toLocaleTimeString([], o);
  }

  function logTick(v) {
    const l = Math.log10(v);
    return Math.abs(l - Math.round(l)) < 1e-9 ? String(v >= 1 ? v : Number(v.toPrecision(1))) : '';
  }

  // decades widens a logarithmic axis to whole powers of ten, so no point
  // sits on its edge.
  function decades(scale) {
    if (scale.min > 0) scale.min = Math.pow(10, Math.floor(Math.log10(scale.min) + 1e-9));
    if (scale.max > 0) scale.max = Math.pow(10, Math.ceil(Math.log10(scale.max) + 1e-9));
  }

  function makeCharts() {
    if (charts.qerror || typeof Chart === 'undefined') return;
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.animation = false;
    charts.qerror = new Chart($('qerror-plot'), {
      data: { datasets: [
        { type: 'scatter', label: 'query', data: [], pointRadius: 4, backgroundColor: 'rgba(36,87,166,.7)', borderColor: '#2457a6' },
        { type: 'line', label: 'p50 of the last ' + ROLLING, data: [], borderColor: '#1b7f3b', backgroundColor: '#1b7f3b', pointRadius: 0, tension: 0 },
        { type: 'line', label: 'p90 of the last ' + ROLLING, data: [], borderColor: '#b3261e', backgroundColor: '#b3261e', pointRadius: 0, borderDash: [5, 4], tension: 0 },
      ] },
      options: {
        maintainAspectRatio: false,
        scales: {
          x: { type: 'linear', ticks: { callback: timeTick, maxTicksLimit: 8 }, title: { display: true, text: 'finished' } },
          y: { type: 'logarithmic', min: 1, afterDataLimits: decades, ticks: { callback: logTick }, title: { display: true, text: 'q-error' } },
        },
        plugins: { tooltip: { callbacks: { label: (c) => (c.raw.id ? c.raw.id + ': ' : '') + 'q-error ' + c.parsed.y.toFixed(2) } } },
      },
    });
    charts.scatter = new Chart($('scatter-plot'), {
      type: 'scatter',
      data: { datasets: [] },
      options: {
        maintainAspectRatio: false,
        scales: {
          x: { type: 'logarithmic', afterDataLimits: decades, ticks: { callback: logTick }, title: { display: true, text: 'actual CPU seconds' } },
          y: { type: 'logarithmic', afterDataLimits: decades, ticks: { callback: logTick }, title: { display: true, text: 'predicted CPU seconds' } },
        },
        plugins: { tooltip: { callbacks: { label: (c) => (c.raw.id || '') + ' predicted ' + secs(c.parsed.y) + ', actual ' + secs(c.parsed.x) } } },
      },
    });
  }

  function renderEstimator(v) {
    const m = v.model;
    const pairs = m ? [
      ['model', el('span', { class: 'mono' }, m.id)],
      ['loaded', new Date(m.loaded).toLocaleString()],
      ['from', m.source],
      ['created', m.created || '–'],
    ] : [['model', v.estimator ? 'none loaded (cheap statements, history and the optimizer only)' : 'no estimator: queries are not estimated']];
    if (m && m.untrained) pairs.push(['warning', el('span', { class: 'error' }, 'untrained (random weights)')]);
    if (v.history) {
      pairs.push(['history', v.history.entries + ' keys, ' + v.history.observed + ' queries learned from' +
        (v.history.dropped ? ', ' + v.history.dropped + ' dropped' : '')]);
    }
    pairs.push(['batch queue', String(v.batch_queue_depth)]);
    dl($('model'), pairs);
    const d = v.drift;
    dl($('drift'), [
      ['since start', d.unseen_share === null ? 'no table scanned yet' : pct(d.unseen_share) + ' of ' + d.tables + ' scanned tables'],
      ['recent queries', d.recent_unseen_share === null ? '–' : pct(d.recent_unseen_share) + ' of ' + d.recent_tables + ' scanned tables'],
    ]);
    fill($('caches-table').tBodies[0], v.caches.map((c) => el('tr', {},
      td(c.name), td(pct(c.hit_rate), 'num'), td(c.hits, 'num'), td(c.misses, 'num'), td(c.evictions, 'num'))), 'no caches reported', 5);
    fill($('sources-table').tBodies[0], v.sources.map((s) => el('tr', {},
      td(sourceBadge(s.source)), td(s.estimates, 'num'), td(s.finished, 'num'),
      td(s.qerror_p50 === null ? '–' : s.qerror_p50.toFixed(2), 'num'), td(s.qerror_p90 === null ? '–' : s.qerror_p90.toFixed(2), 'num'))),
    'no estimate yet', 5);

    makeCharts();
    if (!charts.qerror) return;
    const q = charts.qerror.data.datasets;
    q[0].data = v.points.map((p) => ({ x: Date.parse(p.finished), y: Math.max(p.qerror, 1), id: p.query_id }));
    q[1].data = [];
    q[2].data = [];
    v.points.forEach((p, i) => { // points are oldest first
      const w = v.points.slice(Math.max(0, i + 1 - ROLLING), i + 1).map((x) => Math.max(x.qerror, 1)).sort((a, b) => a - b);
      const at = (f) => w[Math.min(w.length - 1, Math.max(0, Math.ceil(f * w.length) - 1))]; // nearest rank
      q[1].data.push({ x: Date.parse(p.finished), y: at(0.5) });
      q[2].data.push({ x: Date.parse(p.finished), y: at(0.9) });
    });
    charts.qerror.update();

    const bySource = {};
    for (const p of v.points) (bySource[p.source] = bySource[p.source] || []).push({ x: p.actual_cpu_seconds, y: p.predicted_cpu_seconds, id: p.query_id });
    const all = v.points.flatMap((p) => [p.actual_cpu_seconds, p.predicted_cpu_seconds]).filter((x) => x > 0);
    const lo = all.length ? Math.min(...all) / 2 : 0.01, hi = all.length ? Math.max(...all) * 2 : 10;
    charts.scatter.data.datasets = Object.entries(bySource).map(([src, pts]) => ({
      label: src, data: pts, pointRadius: 4, backgroundColor: SOURCE_COLORS[src] || '#555', borderColor: SOURCE_COLORS[src] || '#555',
    })).concat([{ type: 'line', label: 'predicted = actual', data: [{ x: lo, y: lo }, { x: hi, y: hi }],
      borderColor: '#9aa5b1', borderDash: [4, 4], pointRadius: 0, borderWidth: 1 }]);
    charts.scatter.update();
  }

  // ---- usage (cost accounting)

  const USAGE_BARS = 15; // keys drawn; the table lists every row

  function makeUsageChart() {
    if (charts.usage || typeof Chart === 'undefined') return;
    charts.usage = new Chart($('usage-plot'), {
      type: 'bar',
      data: { labels: [], datasets: [
        { label: 'actual CPU seconds', data: [], backgroundColor: '#2457a6' },
        { label: 'predicted CPU seconds', data: [], backgroundColor: 'rgba(168,98,0,.55)' },
      ] },
      options: {
        indexAxis: 'y',
        maintainAspectRatio: false,
        scales: { x: { beginAtZero: true, title: { display: true, text: 'CPU seconds' } } },
        plugins: { tooltip: { callbacks: { label: (c) => c.dataset.label + ': ' + secs(c.parsed.x) } } },
      },
    });
  }

  // renderUsage draws a report of api/usage, or says why there is none
  // (null: accounting is off).
  function renderUsage(u, why) {
    $('usage-off').hidden = !!u;
    $('usage-off').textContent = u ? '' : why;
    if (!u) {
      fill($('usage-table').tBodies[0], [], 'no usage', 8);
      return;
    }
    $('usage-scope').textContent = (u.shared ? 'all replicas (Redis)' : 'this replica') + ', since ' + clock(u.from);
    const gbs = (x) => x.toFixed(x < 10 ? 3 : 1);
    const row = (name, r, cls) => el('tr', { class: cls, dataset: { key: name } },
      td(name), td(r.queries, 'num'), td(r.failed, 'num'), td(secs(r.cpu_seconds), 'num'),
      td(r.predicted ? secs(r.predicted_cpu_seconds) : '–', 'num', r.predicted + ' of ' + r.queries + ' queries estimated'),
      td(gbs(r.memory_gb_seconds), 'num'), td(secs(r.wall_seconds), 'num'), td(secs(r.elapsed_seconds), 'num'));
    const rows = u.rows.map((r) => row(r.key, r));
    if (u.other) rows.push(row('(other)', u.other, 'muted'));
    if (u.rows.length) rows.push(row('total', u.totals, 'total'));
    fill($('usage-table').tBodies[0], rows, 'no finished query in this window', 8);
    makeUsageChart();
    if (!charts.usage) return;
    const top = u.rows.slice(0, USAGE_BARS);
    charts.usage.data.labels = top.map((r) => r.key);
    charts.usage.data.datasets[0].data = top.map((r) => r.cpu_seconds);
    charts.usage.data.datasets[1].data = top.map((r) => r.predicted_cpu_seconds);
    charts.usage.update();
  }

  // usage reads api/usage; accounting switched off (404) is not an error
  // of the console.
  async function usage() {
    try {
      return { u: await api('usage?by=' + encodeURIComponent($('usage-by').value) + '&window=' + encodeURIComponent($('usage-window').value)) };
    } catch (err) {
      if (err instanceof Unauthorized) throw err;
      return { u: null, why: err.message };
    }
  }

  // ---- refresh loop

  let inFlight = false;

  async function refresh() {
    if (inFlight) return;
    inFlight = true;
    try {
      const minutes = $('minutes').value;
      const [c, d, q, e, g, u] = await Promise.all([
        api('clusters?minutes=' + encodeURIComponent(minutes)), api('decisions?limit=200'), api('queue'), api('estimator'),
        api('guardrails?limit=100'), usage(),
      ]);
      $('login').hidden = true;
      $('main').hidden = false;
      $('logout').hidden = !token;
      banner('');
      renderClusters(c);
      renderDecisions(d);
      renderQueue(q);
      renderGuardrails(g);
      renderEstimator(e);
      renderUsage(u.u, u.why);
      $('updated').textContent = 'updated ' + clock(Date.now());
      document.body.dataset.loaded = String(Date.now()); // for scripts and tests: a refresh completed
    } catch (err) {
      if (err instanceof Unauthorized) showLogin(token ? 'The admin token was refused.' : '');
      else banner('Could not read the console data: ' + err.message);
    } finally {
      inFlight = false;
    }
  }

  $('refresh').addEventListener('click', refresh);
  $('minutes').addEventListener('change', refresh);
  $('usage-by').addEventListener('change', refresh);
  $('usage-window').addEventListener('change', refresh);
  setInterval(() => { if ($('auto').checked && !$('main').hidden) refresh(); }, REFRESH_MS);
  refresh();
})();
