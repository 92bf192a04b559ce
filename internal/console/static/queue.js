// Queue page: live numbers and charts, configuration, message browser, send, receive
// and settle by hand, purge. The server leaves out the forms the signed-in principal may
// not use (sending, receiving, purging); deleting a message is offered with manage
// (data-can-manage).
'use strict';
(() => {
  const { api, el, num, rate, dur, goDur, time, toast, qpath, messageDetails, parseHeaders } = okiba;
  const app = document.getElementById('app');
  const name = app.dataset.queue;
  const canManage = 'canManage' in app.dataset;
  let queue = null;

  // ---- Live numbers -------------------------------------------------------------------
  function card(label, value, cls, id) {
    return el('div', { class: 'card', id }, el('div', { class: 'label' }, label), el('div', { class: 'value ' + (cls || '') }, value));
  }

  async function refresh() {
    queue = await api('GET', qpath(name));
    const s = queue.stats;
    const dlq = queue.config.dead_letter_queue;
    const cards = [
      card('Ready', num(s.ready), '', 'stat-ready'),
      card('Delayed', num(s.delayed), '', 'stat-delayed'),
      card('In flight', num(s.in_flight), '', 'stat-in-flight'),
      card('Deferred', num(s.deferred || 0), '', 'stat-deferred'),
      ...(queue.config.on_dead_letter === 'park_group' || s.parked_groups ? [card('Parked groups', num(s.parked_groups || 0), s.parked_groups ? 'bad' : '', 'stat-parked')] : []),
      card('Dead letters', dlq && dlq !== 'none' ? el('a', { href: '/dead-letters?queue=' + encodeURIComponent(dlq) }, num(s.dead_letters)) : '–', s.dead_letters ? 'bad' : '', 'stat-dead'),
      card('Oldest ready', s.oldest_ready_age_ms ? dur(s.oldest_ready_age_ms) : '–'),
      card('Sent /s', rate(s.rates.sent)),
      card('Acked /s', rate(s.rates.acked)),
      card('Sent total', num(s.sent), '', 'stat-sent'),
      card('Acked total', num(s.acked), '', 'stat-acked'),
      card('Redelivered', num(s.redelivered)),
    ];
    document.getElementById('cards').replaceChildren(...cards);
    const w = s.waiting;
    document.getElementById('little').textContent = w.lambda > 0
      ? `Little's law, L = λ × W: ${num(w.l)} ready = ${rate(w.lambda)}/s × W, so W ≈ ${dur(w.estimated_ms)} before first delivery` +
        (w.measured_ms ? ` (measured: ${dur(w.measured_ms)})` : '')
      : `Little's law, L = λ × W: no arrivals in the last minute (L = ${num(w.l)} ready)` + (w.measured_ms ? `; measured wait ${dur(w.measured_ms)}` : '');
    const badges = [];
    if (queue.dead_letter_sources && queue.dead_letter_sources.length) {
      badges.push(el('span', { class: 'badge' }, 'dead-letter queue of ' + queue.dead_letter_sources.join(', ')));
    }
    if (name.endsWith('.fifo') || queue.config.ordered_groups) badges.push(el('span', { class: 'badge' }, 'ordered groups'));
    document.getElementById('qbadges').replaceChildren(...badges);
    renderConfig(queue);
    await consumers();
    await parked(queue.config.on_dead_letter === 'park_group' || s.parked_groups > 0);
    document.getElementById('updated').textContent = 'live · ' + new Date().toLocaleTimeString();
  }

  // consumers lists the receivers the node saw lately (GET /v1/queues/{name}/consumers).
  async function consumers() {
    const l = await api('GET', qpath(name, 'consumers'));
    const tb = document.querySelector('#consumers tbody');
    const now = Date.now();
    tb.replaceChildren(...l.consumers.map((c) => el('tr', { dataset: { consumer: c.name || c.remote, via: c.via } },
      el('td', { class: 'mono' }, c.name || el('span', { class: 'muted' }, '(no name)')),
      el('td', {}, c.principal || '–'),
      el('td', { class: 'mono' }, c.remote),
      el('td', {}, el('span', { class: 'badge' }, c.via)),
      el('td', { title: time(c.last_seen) }, dur(Math.max(0, now - Date.parse(c.last_seen))) + ' ago'),
      el('td', { class: 'num' }, num(c.receives)),
      el('td', { class: 'num', dataset: { k: 'waiting' } }, num(c.waiting)),
      el('td', { class: 'num', dataset: { k: 'leases' } }, num(c.leases) + (c.leases_capped ? '+' : '')))));
    if (!l.consumers.length) {
      tb.append(el('tr', {}, el('td', { colspan: 8, class: 'muted' }, `No receiver in the last ${dur(l.window_ms)}.`)));
    }
  }

  // parked lists the groups parked behind a dead letter (GET /v1/queues/{name}/parked),
  // each with a release by hand; the panel shows only on a queue that parks.
  async function parked(show) {
    const panel = document.getElementById('parked-panel');
    panel.hidden = !show;
    if (!show) return;
    const l = await api('GET', qpath(name, 'parked'));
    const tb = document.querySelector('#parked tbody');
    const dlq = (g) => el('a', { href: '/dead-letters?queue=' + encodeURIComponent(g.dead_letter_queue) }, g.dead_letter_queue);
    tb.replaceChildren(...l.groups.map((g) => el('tr', { dataset: { group: g.group } },
      el('td', { class: 'mono' }, g.group),
      el('td', { class: 'mono', dataset: { k: 'blocker' } }, g.blocker),
      el('td', {}, dlq(g)),
      el('td', { title: time(g.since) }, time(g.since)),
      el('td', { class: 'num' }, num(g.messages)),
      el('td', {}, canManage ? el('button', { type: 'button', 'aria-label': 'Release group ' + g.group, onclick: async () => {
        try {
          await api('POST', qpath(name, 'groups', encodeURIComponent(g.group), 'release'));
          toast(`Released group ${g.group}.`);
          await refresh();
        } catch (e) {
          toast(`release ${g.group}: ${e.message}`, 'error');
        }
      } }, 'Release') : null))));
    if (!l.groups.length) {
      tb.append(el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'No parked group: every ordered group is moving.')));
    }
  }

  function renderConfig(q) {
    const c = q.config;
    const rows = [
      ['Visibility timeout', goDur(c.visibility_timeout)], ['Max deliveries', c.max_deliveries === 0 ? 'unlimited' : c.max_deliveries],
      ['Dead-letter queue', c.dead_letter_queue], ['Retry backoff', `${goDur(c.backoff_base)} ×2 up to ${goDur(c.backoff_max)}, jittered`],
      ['Delay', goDur(c.delay)], ['Retention', c.retention === '0s' ? 'unlimited' : goDur(c.retention)], ['Dedup window', goDur(c.dedup_window)],
      ['Max messages', c.max_messages ? num(c.max_messages) : 'unlimited'], ['Max bytes', c.max_bytes ? num(c.max_bytes) : 'unlimited'],
      ['Max message size', num(c.max_message_size) + ' bytes'], ['Receive wait', goDur(c.receive_wait)],
      ['On dead letter', c.on_dead_letter || 'move_on'],
      ['Created', time(q.created_at)],
    ];
    document.getElementById('config').replaceChildren(...rows.map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', {}, String(v)))));
  }

  // ---- Charts -------------------------------------------------------------------------
  const tput = okiba.chart(document.getElementById('chart-tput'), [
    { label: 'sent', color: '--chart-1' }, { label: 'acked', color: '--chart-2' },
    { label: 'nacked', color: '--chart-3' }, { label: 'dead-lettered', color: '--chart-4' },
  ], { span: 600 });
  const depth = okiba.chart(document.getElementById('chart-depth'), [
    { label: 'ready', color: '--chart-1', fill: true }, { label: 'delayed', color: '--chart-3' }, { label: 'in flight', color: '--chart-2' },
  ], { span: 600 });
  async function history() {
    const h = await api('GET', '/ui/api/queues/' + encodeURIComponent(name) + '/history');
    tput.set([h.t || [], h.sent || [], h.acked || [], h.nacked || [], h.dead_lettered || []]);
    depth.set([h.t || [], h.ready || [], h.delayed || [], h.in_flight || []]);
  }

  // ---- Send ---------------------------------------------------------------------------
  document.getElementById('send-form')?.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const out = document.getElementById('send-result');
    const msg = { body: document.getElementById('send-body').value };
    const group = document.getElementById('send-group').value.trim();
    const delay = document.getElementById('send-delay').value.trim();
    const headers = parseHeaders(document.getElementById('send-headers').value);
    if (group) msg.group = group;
    if (delay) msg.delay = delay;
    if (Object.keys(headers).length) msg.headers = headers;
    try {
      const r = await api('POST', qpath(name, 'messages'), msg);
      const res = r.results[0];
      out.textContent = res.error ? 'Refused: ' + res.error.message : 'Sent ' + res.id + (res.duplicate ? ' (duplicate)' : '');
      out.className = res.error ? 'bad' : 'ok';
      live.now();
      browse(true);
    } catch (e) {
      out.textContent = e.message;
      out.className = 'bad';
    }
  });

  // ---- Receive and settle -------------------------------------------------------------
  const leased = document.getElementById('leased');
  document.getElementById('recv-form')?.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const max = Number(document.getElementById('recv-max').value) || 1;
    const visibility = document.getElementById('recv-vis').value.trim() || '60s';
    try {
      const r = await api('POST', qpath(name, 'receive'), { max, visibility, wait: '0s' });
      if (!r.messages.length) toast('Nothing to receive: no ready message.');
      for (const m of r.messages) leased.append(leaseView(m));
      live.now();
      browse(true);
    } catch (e) {
      toast(e.message, 'error');
    }
  });

  function leaseView(m) {
    const box = el('div', { class: 'notice', dataset: { message: m.id } });
    const settle = async (op, extra) => {
      try {
        const r = await api('POST', qpath(name, op), Object.assign({ receipts: [m.receipt] }, extra));
        const res = r.results[0];
        if (res.error) throw new Error(res.error.message);
        box.replaceChildren(el('span', { class: 'ok' }, `${m.id}: ${op === 'ack' ? 'acked' : op === 'nack' ? 'nacked (visible again)' : 'dead-lettered'}`));
        setTimeout(() => box.remove(), 3000);
        live.now();
        browse(true);
      } catch (e) {
        toast(`${op} ${m.id}: ${e.message}`, 'error');
      }
    };
    const reasonId = 'reason-' + m.id;
    box.append(
      el('div', { class: 'row' }, el('strong', { class: 'mono' }, m.id), el('span', { class: 'muted' }, `delivery ${m.deliveries}, lease until ${new Date(m.visible_at).toLocaleTimeString()}`),
        m.group ? el('span', { class: 'badge' }, 'group ' + m.group) : null),
      messageDetails(m),
      el('div', { class: 'row' },
        el('button', { class: 'primary', type: 'button', onclick: () => settle('ack') }, 'Ack'),
        el('button', { type: 'button', onclick: () => settle('nack', { delay: '0s' }) }, 'Nack'),
        el('label', { for: reasonId, class: 'sr-only' }, 'Dead-letter reason'),
        el('input', { id: reasonId, value: 'manual', size: 10 }),
        el('button', { class: 'danger', type: 'button', onclick: () => settle('deadletter', { reason: document.getElementById(reasonId).value || 'manual' }) }, 'Dead-letter')));
    return box;
  }

  // ---- Browse (peek) ------------------------------------------------------------------
  const btbody = document.querySelector('#browse tbody');
  const more = document.getElementById('browse-more');
  let next = '';
  let shown = 0;
  async function browse(reset) {
    if (reset) { next = ''; shown = 0; }
    const state = document.getElementById('browse-state').value;
    const qs = new URLSearchParams({ limit: '50' });
    if (next) qs.set('after', next);
    if (state) qs.set('state', state);
    const r = await api('GET', qpath(name, 'messages') + '?' + qs);
    const trs = r.messages.map((m) => el('tr', { dataset: { message: m.id } },
      el('td', { class: 'mono' }, m.id),
      el('td', {}, el('span', { class: 'badge' + (m.state === 'in_flight' ? ' warn' : m.state === 'deferred' ? ' info' : '') }, m.state.replace('_', ' '))),
      el('td', {}, m.group || ''),
      el('td', { class: 'num' }, num(m.deliveries)),
      el('td', { title: m.first_delivered_at ? 'first delivered ' + time(m.first_delivered_at) : 'never delivered' }, time(m.enqueued_at)),
      el('td', {}, messageDetails(m)),
      el('td', {},
        el('button', { type: 'button', class: 'link', 'aria-label': 'Explain message ' + m.id, onclick: (ev) => explain(m.id, ev.target.closest('tr')) }, 'Why?'),
        canManage ? el('button', { type: 'button', class: 'link', 'aria-label': 'Delete message ' + m.id, onclick: () => del(m.id) }, 'Delete') : null)));
    if (reset) btbody.replaceChildren(...trs); else btbody.append(...trs);
    shown += trs.length;
    next = r.next || '';
    more.hidden = !next;
    document.getElementById('browse-count').textContent = shown ? `${num(shown)} shown` : 'No messages.';
  }
  // explain opens (or closes) a row under a message's saying why it is, or is not, being
  // delivered now (GET /v1/queues/{name}/messages/{id}/explain), in words and in fields.
  async function explain(id, tr) {
    const open = tr.nextElementSibling;
    if (open && open.dataset.explainOf === id) { open.remove(); return; }
    try {
      const ex = await api('GET', qpath(name, 'messages', id, 'explain'));
      const fields = Object.entries(ex).filter(([k, v]) => k !== 'summary' && k !== 'history' && v !== null && v !== '' && typeof v !== 'object');
      const row = el('tr', { class: 'explain', dataset: { explainOf: id } },
        el('td', { colspan: 7 },
          el('div', { class: 'notice' },
            el('p', { class: 'explain-summary' }, ex.summary),
            el('dl', { class: 'kv' }, ...fields.flatMap(([k, v]) => [el('dt', {}, k.replaceAll('_', ' ')), el('dd', { class: 'mono' }, String(v))])),
            ex.history ? el('details', {}, el('summary', {}, 'History' + (ex.history.partial ? ' (what the index keeps)' : '')),
              el('pre', { class: 'mono' }, JSON.stringify(ex.history, null, 2))) : null)));
      tr.after(row);
    } catch (e) {
      toast(`explain ${id}: ${e.message}`, 'error');
    }
  }
  async function del(id) {
    if (!confirm(`Delete message ${id}? It cannot be undone.`)) return;
    try {
      await api('DELETE', qpath(name, 'messages', id));
      toast('Deleted ' + id, 'success');
      browse(true);
      live.now();
    } catch (e) {
      toast(e.message, 'error');
    }
  }
  more.addEventListener('click', () => browse(false).catch((e) => toast(e.message, 'error')));
  document.getElementById('browse-refresh').addEventListener('click', () => browse(true).catch((e) => toast(e.message, 'error')));
  document.getElementById('browse-state').addEventListener('change', () => browse(true).catch((e) => toast(e.message, 'error')));

  // ---- Purge --------------------------------------------------------------------------
  const dialog = document.getElementById('purge-dialog');
  const confirmInput = document.getElementById('purge-confirm');
  const go = document.getElementById('purge-go');
  if (dialog) document.getElementById('purge-open').addEventListener('click', () => {
    confirmInput.value = '';
    go.disabled = true;
    dialog.showModal();
    confirmInput.focus();
  });
  confirmInput?.addEventListener('input', () => { go.disabled = confirmInput.value !== name; });
  dialog?.addEventListener('close', async () => {
    if (dialog.returnValue !== 'purge' || confirmInput.value !== name) return;
    try {
      const r = await api('POST', qpath(name, 'purge'));
      toast(`Purged ${num(r.purged)} messages from ${name}.`, 'success');
      live.now();
      browse(true);
    } catch (e) {
      toast(e.message, 'error');
    }
  });

  const live = okiba.every(2000, refresh);
  okiba.every(5000, history);
  browse(true).catch((e) => toast(e.message, 'error'));
})();
