// Dead letters: without ?queue=, every dead-letter queue with its dead letters by source
// and reason; with it, browse one dead-letter queue by source and reason, see each message's
// history, redrive (selected, by reason, all) with progress, delete. The summary says what
// the signed-in principal may do (can_manage, can_redrive_to): the buttons it may not use
// are not shown.
'use strict';
(() => {
  const { api, el, num, time, toast, qpath, messageDetails } = okiba;
  const select = document.getElementById('dlq');
  const reasons = document.querySelector('#reasons tbody');
  const tbody = document.querySelector('#messages tbody');
  const progress = document.getElementById('progress');
  const selAll = document.getElementById('select-all');
  const redriveSel = document.getElementById('redrive-selected');
  const deleteSel = document.getElementById('delete-selected');
  let filter = { reason: '', source: '' };
  let may = { manage: false, to: {} }; // what the last summary said the principal may do
  const redriveAll = document.getElementById('redrive-all');
  const params = new URLSearchParams(location.search);

  async function loadQueues() {
    const data = await api('GET', '/ui/api/overview');
    const dlqs = data.queues.filter((q) => q.dlq_for > 0).map((q) => q.name);
    const want = params.get('queue');
    if (want && !dlqs.includes(want)) dlqs.unshift(want);
    select.replaceChildren(...dlqs.map((n) => el('option', { value: n }, n)));
    if (want) select.value = want;
    document.getElementById('none').hidden = dlqs.length > 0;
    return dlqs.length > 0;
  }

  function selectedIDs() {
    return [...tbody.querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value);
  }
  // sourcesOf returns the source queues of the ticked messages.
  function sourcesOf(ids) {
    return ids.map((id) => tbody.querySelector(`tr[data-message="${CSS.escape(id)}"]`)?.dataset.source || '');
  }
  function updateButtons() {
    const ids = selectedIDs();
    const n = ids.length;
    deleteSel.disabled = n === 0;
    redriveSel.disabled = n === 0 || !sourcesOf(ids).every((s) => may.to[s]);
    redriveSel.textContent = n ? `Redrive ${n} selected` : 'Redrive selected';
    deleteSel.textContent = n ? `Delete ${n} selected` : 'Delete selected';
  }

  async function load() {
    const q = select.value;
    if (!q) return;
    const qs = new URLSearchParams({ limit: '200' });
    if (filter.reason) qs.set('reason', filter.reason);
    if (filter.source) qs.set('source', filter.source);
    const d = await api('GET', '/ui/api/dead-letters/' + encodeURIComponent(q) + '?' + qs);
    may = { manage: d.can_manage, to: d.can_redrive_to || {} };
    redriveSel.hidden = deleteSel.hidden = selAll.hidden = !may.manage;
    redriveAll.hidden = !may.manage || !d.reasons.every((r) => may.to[r.source]);
    document.getElementById('read-only').hidden = may.manage;
    reasons.replaceChildren(...d.reasons.map((r) => el('tr', { dataset: { reason: r.reason, source: r.source } },
      el('td', {}, r.source ? el('a', { href: '/queues/' + encodeURIComponent(r.source) }, r.source) : '–'),
      el('td', {}, el('span', { class: 'badge bad' }, r.reason || '(none)')),
      el('td', { class: 'num' }, num(r.count)),
      el('td', {}, el('div', { class: 'row' },
        el('button', { type: 'button', onclick: () => { filter = { reason: r.reason, source: r.source }; load(); } }, 'Show'),
        may.to[r.source] ? el('button', { type: 'button', class: 'primary', onclick: () => redrive({ reason: r.reason, from: r.source }, `${num(r.count)} ${r.reason} from ${r.source}`) }, 'Redrive these') : null)))));
    if (!d.reasons.length) reasons.append(el('tr', {}, el('td', { colspan: 4, class: 'muted' }, 'No dead letters here. All good.')));
    tbody.replaceChildren(...d.messages.map((m) => {
      const dl = m.dead_letter || {};
      const cb = may.manage ? el('input', { type: 'checkbox', value: m.id, 'aria-label': 'Select ' + m.id, onchange: updateButtons }) : null;
      return el('tr', { dataset: { message: m.id, source: dl.source || '' } },
        el('td', {}, cb),
        el('td', { class: 'mono' }, m.id),
        el('td', {}, dl.source || '–'),
        el('td', {}, el('strong', {}, dl.reason || '–'), dl.description ? el('div', { class: 'muted' }, dl.description) : null),
        el('td', {}, time(dl.at)),
        el('td', { class: 'num' }, num(dl.deliveries)),
        el('td', { class: 'muted' }, `sent ${time(m.enqueued_at)}`, el('br'),
          `delivered ${num(dl.deliveries)}× from ${dl.source || '?'}, then dead-lettered`,
          m.deliveries ? [el('br'), `received ${num(m.deliveries)}× from the dead-letter queue since`] : null),
        el('td', {}, messageDetails(m)));
    }));
    const label = document.getElementById('filter-label');
    label.textContent = filter.reason || filter.source ? `— ${filter.reason || 'any reason'} from ${filter.source || 'any queue'}` : '';
    document.getElementById('clear-filter').hidden = !(filter.reason || filter.source);
    document.getElementById('scan-note').textContent = d.complete
      ? `${num(d.messages.length)} shown of ${num(d.scanned)} in ${q}.`
      : `Summary of the first ${num(d.scanned)} messages only (the queue holds more).`;
    selAll.checked = false;
    updateButtons();
  }

  // redrive starts a redrive task and follows its progress until it ends.
  async function redrive(req, what) {
    const q = select.value;
    let task;
    try {
      task = await api('POST', qpath(q, 'redrive'), req);
    } catch (e) {
      toast('Redrive refused: ' + e.message, 'error');
      return;
    }
    const bar = el('progress', { max: Math.max(1, task.total), value: 0, 'aria-label': 'Redrive progress' });
    const text = el('span', {}, ` redriving ${what}: 0 of ${num(task.total)}`);
    progress.replaceChildren(el('div', { class: 'notice', id: 'redrive-' + task.id }, bar, text));
    for (;;) {
      task = await api('GET', '/v1/redrives/' + encodeURIComponent(task.id));
      bar.value = task.moved + task.skipped;
      text.textContent = ` redriving ${what}: ${num(task.moved)} of ${num(task.total)} moved` + (task.skipped ? `, ${num(task.skipped)} skipped` : '');
      if (task.state !== 'running') break;
      await new Promise((r) => setTimeout(r, 300));
    }
    const ok = task.state === 'completed';
    progress.replaceChildren(el('p', { class: 'notice ' + (ok ? 'success' : 'error'), id: 'redrive-done' },
      ok ? `Redrive finished: ${num(task.moved)} message(s) moved back${task.skipped ? `, ${num(task.skipped)} skipped` : ''}.`
        : `Redrive ${task.state}: ${task.message || ''}`));
    filter = { reason: '', source: '' };
    await load();
  }

  redriveAll.addEventListener('click', () => redrive({}, 'all dead letters'));
  redriveSel.addEventListener('click', () => {
    const ids = selectedIDs();
    redrive({ ids }, `${ids.length} selected`);
  });
  deleteSel.addEventListener('click', async () => {
    const ids = selectedIDs();
    if (!confirm(`Delete ${ids.length} dead letter(s) for good?`)) return;
    let done = 0;
    for (const id of ids) {
      try {
        await api('DELETE', qpath(select.value, 'messages', id));
        done++;
      } catch (e) {
        toast(`delete ${id}: ${e.message}`, 'error');
      }
    }
    toast(`Deleted ${done} message(s).`, 'success');
    load();
  });
  selAll.addEventListener('change', () => {
    for (const c of tbody.querySelectorAll('input[type=checkbox]')) c.checked = selAll.checked;
    updateButtons();
  });
  document.getElementById('clear-filter').addEventListener('click', () => { filter = { reason: '', source: '' }; load(); });
  document.getElementById('refresh').addEventListener('click', () => params.get('queue') && load().catch((e) => toast(e.message, 'error')));
  select.addEventListener('change', () => {
    filter = { reason: '', source: '' };
    history.replaceState(null, '', '/dead-letters?queue=' + encodeURIComponent(select.value));
    load().catch((e) => toast(e.message, 'error'));
  });

  // overview shows every dead-letter queue with its dead letters by source and reason;
  // a queue's name opens its own page (?queue=).
  async function overview() {
    const d = await api('GET', '/ui/api/dead-letters');
    const body = document.querySelector('#dlqs tbody');
    let total = 0;
    body.replaceChildren(...d.queues.map((q) => {
      total += q.messages;
      const href = '/dead-letters?queue=' + encodeURIComponent(q.queue);
      return el('tr', { dataset: { dlq: q.queue } },
        el('td', { class: 'name' }, el('a', { href }, q.queue)),
        el('td', {}, q.sources.map((s, i) => [i ? ', ' : '', el('a', { href: '/queues/' + encodeURIComponent(s) }, s)])),
        el('td', { class: 'num' }, q.messages ? el('span', { class: 'bad' }, num(q.messages)) : el('span', { class: 'zero' }, '0')),
        el('td', {}, q.reasons.length
          ? q.reasons.map((r) => el('span', { class: 'badge bad', dataset: { reason: r.reason, source: r.source } }, `${r.reason || '(none)'} ${num(r.count)}` + (q.sources.length > 1 && r.source ? ` from ${r.source}` : '')))
          : el('span', { class: 'muted' }, q.messages ? '' : 'none'),
          q.complete ? null : el('span', { class: 'muted' }, ` (of the first ${num(q.scanned)})`)));
    }));
    document.getElementById('none').hidden = d.queues.length > 0;
    document.getElementById('all').hidden = d.queues.length === 0;
    document.getElementById('all-note').textContent = d.queues.length
      ? `${num(total)} dead letter(s) in ${num(d.queues.length)} dead-letter queue(s). Open one to redrive or delete its messages.` : '';
  }

  if (params.get('queue')) {
    document.getElementById('single').hidden = false;
    document.getElementById('all-link').hidden = false;
    for (const e of document.querySelectorAll('.single-only')) e.hidden = false;
    loadQueues().then((any) => any && load()).catch((e) => toast(e.message, 'error'));
  } else {
    document.getElementById('refresh').addEventListener('click', () => overview().catch((e) => toast(e.message, 'error')));
    overview().catch((e) => toast(e.message, 'error'));
  }
})();
