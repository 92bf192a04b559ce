// okiba console: helpers shared by the pages. Plain browser JavaScript, no build step.
'use strict';

const okiba = (() => {
  // api calls the native API (/v1) or the console's (/ui/api) with the session cookie,
  // and throws an Error carrying the API's error code on failure.
  async function api(method, path, body) {
    const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    if (res.status === 401 && document.body.dataset.page !== 'login') {
      location.href = '/login?next=' + encodeURIComponent(location.pathname + location.search);
      throw new Error('signed out');
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = null; }
    }
    if (!res.ok) {
      const e = new Error((data && data.error && data.error.message) || res.status + ' ' + res.statusText);
      e.code = data && data.error && data.error.code;
      e.status = res.status;
      e.data = data;
      throw e;
    }
    return data;
  }

  // el builds an element: el('td', {class: 'num'}, 'text', child…).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const nf = new Intl.NumberFormat();
  const num = (n) => nf.format(n || 0);
  function rate(x) {
    if (!x) return '0';
    return x >= 100 ? nf.format(Math.round(x)) : x.toFixed(x >= 10 ? 1 : 2);
  }
  // dur formats milliseconds for people: 850 ms, 12.3 s, 4 min 05 s, 3 h 02 min.
  function dur(ms) {
    if (ms === undefined || ms === null || isNaN(ms)) return '–';
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + String(Math.floor(s % 60)).padStart(2, '0') + ' s';
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + String(m % 60).padStart(2, '0') + ' min';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }
  const time = (t) => (t ? new Date(t).toLocaleString() : '–');
  // goDur makes a Go duration string ("336h0m0s", "1.5s", "250ms") readable ("14 d 0 h").
  function goDur(s) {
    if (!s) return '–';
    let ms = 0;
    const re = /([0-9.]+)(h|ms|m|s|µs|us|ns)/g;
    let m;
    while ((m = re.exec(s)) !== null) {
      const v = parseFloat(m[1]);
      ms += v * ({ h: 3600e3, m: 60e3, s: 1e3, ms: 1, 'µs': 1e-3, us: 1e-3, ns: 1e-6 })[m[2]];
    }
    if (ms === 0) return '0';
    return dur(ms);
  }

  // toast shows a short notice in the live region.
  function toast(msg, kind) {
    const box = document.getElementById('toast');
    if (!box) return;
    const n = el('p', { class: 'notice ' + (kind || '') }, msg);
    box.replaceChildren(n);
    setTimeout(() => { if (n.parentNode === box) n.remove(); }, kind === 'error' ? 8000 : 4000);
  }

  // every runs fn now and then every ms while the page is visible; errors show once. A
  // server that takes long to answer is asked less often: the next call waits at least
  // 20 times the last one's duration.
  function every(ms, fn) {
    let timer = null;
    let failing = false;
    async function tick() {
      timer = null;
      if (document.hidden) return;
      const t0 = performance.now();
      try {
        await fn();
        failing = false;
      } catch (e) {
        if (!failing) toast(e.message, 'error');
        failing = true;
      }
      if (timer === null) timer = setTimeout(tick, Math.max(ms, 20 * (performance.now() - t0)));
    }
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden && timer === null) tick();
    });
    tick();
    return { now: () => { if (timer) clearTimeout(timer); timer = null; tick(); } };
  }

  // sparkline draws points as a small SVG line, labelled for screen readers.
  function sparkline(points, w = 120, h = 24) {
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('width', w);
    svg.setAttribute('height', h);
    svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
    svg.setAttribute('role', 'img');
    const pts = points || [];
    const last = pts.length ? pts[pts.length - 1] : 0;
    const peak = Math.max(1, ...pts);
    svg.setAttribute('aria-label', pts.length ? `depth ${num(pts[0])} to ${num(last)}, peak ${num(Math.max(0, ...pts))}` : 'no history yet');
    const base = document.createElementNS(ns, 'line');
    base.setAttribute('x1', 0); base.setAttribute('x2', w); base.setAttribute('y1', h - 1); base.setAttribute('y2', h - 1);
    svg.append(base);
    if (pts.length > 1) {
      const step = w / (30 - 1);
      const x0 = w - step * (pts.length - 1);
      const line = document.createElementNS(ns, 'polyline');
      line.setAttribute('points', pts.map((v, i) => `${(x0 + i * step).toFixed(1)},${(h - 2 - (v / peak) * (h - 4)).toFixed(1)}`).join(' '));
      svg.append(line);
    }
    return svg;
  }

  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  // chart makes a uPlot time chart in box with the given series ({label, color var}).
  function chart(box, series, opts = {}) {
    const mk = () => {
      const axis = { stroke: css('--muted'), grid: { stroke: css('--border'), width: 1 }, ticks: { stroke: css('--border') } };
      return new uPlot({
        width: Math.max(300, box.clientWidth),
        height: opts.height || 220,
        scales: {
          x: {
            time: opts.time !== false,
            // Up to opts.span seconds before the last sample: what history there is, and
            // at least a minute, so that a young chart still has a sensible time axis.
            range: opts.span ? (u) => {
              const xs = u.data[0];
              const end = xs && xs.length ? xs[xs.length - 1] : Date.now() / 1000;
              const start = xs && xs.length ? Math.max(xs[0], end - opts.span) : end - opts.span;
              return [Math.min(start, end - 60), end];
            } : undefined,
          },
          y: { range: (u, min, max) => [0, Math.max(max || 0, opts.minMax || 1)] },
        },
        axes: [axis, Object.assign({}, axis, { size: 55 })],
        legend: { live: false },
        cursor: { drag: { x: false, y: false } },
        series: [{ label: opts.xLabel || 'time' }].concat(series.map((s) => ({
          label: s.label, stroke: css(s.color), width: 2, points: { show: false },
          fill: s.fill ? css(s.color) + '22' : undefined,
        }))),
      }, [[], ...series.map(() => [])], box);
    };
    let u = mk();
    let data = null;
    const ro = new ResizeObserver(() => u.setSize({ width: Math.max(300, box.clientWidth), height: opts.height || 220 }));
    ro.observe(box);
    // Redraw in the new colours when the system switches between light and dark.
    matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      u.destroy();
      u = mk();
      if (data) u.setData(data);
    });
    return { set: (d) => { data = d; u.setData(d); } };
  }

  // bodyText shows a message body: its text, or a note for binary bodies.
  function bodyText(m) {
    if (m.body !== undefined && m.body !== null) return m.body;
    if (m.body_base64) return '(binary, ' + Math.floor(m.body_base64.length * 3 / 4) + ' bytes, base64) ' + m.body_base64.slice(0, 120);
    return '';
  }

  // messageDetails is an expandable view of a message's body and headers.
  function messageDetails(m) {
    const body = bodyText(m);
    const preview = body.length > 60 ? body.slice(0, 60) + '…' : body;
    const headers = Object.entries(m.headers || {});
    const d = el('details', {},
      el('summary', {}, el('span', { class: 'mono' }, preview || '(empty)')),
      el('pre', { class: 'msgbody' }, body),
      headers.length ? el('table', { class: 'kv' }, headers.map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', { class: 'mono' }, v)))) : null,
      m.dedup_id ? el('p', { class: 'muted' }, 'dedup id: ', el('code', {}, m.dedup_id)) : null);
    return d;
  }

  const qpath = (name, ...rest) => '/v1/queues/' + encodeURIComponent(name) + rest.map((r) => '/' + r).join('');

  // parseHeaders reads "name: value" lines.
  function parseHeaders(text) {
    const out = {};
    for (const line of text.split('\n')) {
      const i = line.indexOf(':');
      if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    return out;
  }

  return { api, el, num, rate, dur, goDur, time, toast, every, sparkline, chart, css, bodyText, messageDetails, qpath, parseHeaders };
})();
