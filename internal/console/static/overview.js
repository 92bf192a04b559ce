// Overview: every queue, live. Polls /ui/api/overview every two seconds with the seq of
// the last answer (only new sparkline samples come back) and its ETag (an idle broker
// answers 304 with no body).
'use strict';
(() => {
  const { api, el, num, rate, dur, sparkline } = okiba;
  const tbody = document.querySelector('#queues tbody');
  const filter = document.getElementById('filter');
  const hidePlayground = document.getElementById('hide-playground');
  const updated = document.getElementById('updated');
  const totals = document.getElementById('totals');
  let seq = 0;
  let etag = null;
  let offset = 0; // server clock minus ours
  let rows = [];
  const sparks = new Map(); // queue → depth samples (at most 30)
  const trs = new Map(); // queue → <tr>, reused between updates

  async function poll() {
    const headers = { Accept: 'application/json' };
    if (etag) headers['If-None-Match'] = etag;
    const res = await fetch('/ui/api/overview?since=' + seq, { headers, credentials: 'same-origin', cache: 'no-store' });
    if (res.status === 401) {
      location.href = '/login?next=/';
      return;
    }
    const now = Number(res.headers.get('X-Okiba-Now'));
    if (now) offset = now - Date.now();
    if (res.status === 304) {
      render();
      return;
    }
    if (!res.ok) throw new Error('overview: ' + res.status);
    etag = res.headers.get('ETag');
    const data = await res.json();
    for (const q of data.queues) {
      if (q.spark) {
        const s = (sparks.get(q.name) || []).concat(q.spark);
        sparks.set(q.name, s.slice(-30));
      }
    }
    const names = new Set(data.queues.map((q) => q.name));
    for (const name of sparks.keys()) if (!names.has(name)) sparks.delete(name);
    seq = data.seq;
    rows = data.queues;
    render();
  }

  function cell(v, cls, link) {
    const td = el('td', { class: 'num' });
    const text = num(v);
    const content = link ? el('a', { href: link }, text) : document.createTextNode(text);
    if (!v) td.append(el('span', { class: 'zero' }, '0'));
    else if (cls) td.append(el('span', { class: cls }, content));
    else td.append(content);
    return td;
  }

  function render() {
    const f = filter.value.trim().toLowerCase();
    const now = Date.now() + offset;
    const shown = rows.filter((q) => (!f || q.name.toLowerCase().includes(f)) && !(hidePlayground.checked && q.name.startsWith('playground-')));
    let ready = 0, inflight = 0, dead = 0, sent = 0;
    for (const q of rows) {
      ready += q.ready || 0;
      inflight += q.in_flight || 0;
      sent += q.send_rate || 0;
      if (q.dlq_for) dead += (q.ready || 0) + (q.delayed || 0) + (q.in_flight || 0);
    }
    totals.replaceChildren(
      card('Queues', num(rows.length)), card('Ready', num(ready)), card('In flight', num(inflight)),
      card('Dead letters', num(dead), dead ? 'bad' : ''), card('Sent /s', rate(sent)));
    const keep = new Set();
    const frag = [];
    for (const q of shown) {
      keep.add(q.name);
      const tr = el('tr', { dataset: { queue: q.name } },
        el('td', { class: 'name' }, el('a', { href: '/queues/' + encodeURIComponent(q.name) }, q.name), ' ',
          q.dlq_for ? el('span', { class: 'badge', title: 'dead-letter queue of ' + q.dlq_for + ' queue(s)' }, 'DLQ') : null),
        cell(q.ready),
        cell(q.delayed),
        cell(q.in_flight),
        q.dlq ? cell(q.dead_letters, 'bad', '/dead-letters?queue=' + encodeURIComponent(q.dlq)) : el('td', { class: 'num muted', title: 'no dead-letter queue' }, '–'),
        el('td', { class: 'num' }, rate(q.send_rate)),
        el('td', { class: 'num' }, rate(q.ack_rate)),
        el('td', { class: 'num' }, q.oldest_at ? dur(Math.max(0, now - q.oldest_at)) : '–'),
        el('td', { class: 'num', title: q.wait_measured_ms ? 'measured over the last minute: ' + dur(q.wait_measured_ms) : 'no deliveries in the last minute' },
          q.wait_ms ? dur(q.wait_ms) : '–'),
        // The samples so far, and the depth now as the last point.
        el('td', {}, sparkline((sparks.get(q.name) || []).concat([(q.ready || 0) + (q.delayed || 0) + (q.in_flight || 0)]).slice(-30))));
      const old = trs.get(q.name);
      if (old && old.innerHTML === tr.innerHTML) frag.push(old);
      else { trs.set(q.name, tr); frag.push(tr); }
    }
    for (const name of trs.keys()) if (!keep.has(name)) trs.delete(name);
    // Replace only if something changed, so that focus and selection survive updates.
    const same = frag.length === tbody.children.length && frag.every((tr, i) => tbody.children[i] === tr);
    if (!same) tbody.replaceChildren(...frag);
    document.getElementById('empty').hidden = rows.length > 0;
    updated.textContent = 'live · ' + new Date().toLocaleTimeString();
  }

  function card(label, value, cls) {
    return el('div', { class: 'card' }, el('div', { class: 'label' }, label), el('div', { class: 'value ' + (cls || '') }, value));
  }

  filter.addEventListener('input', render);
  hidePlayground.addEventListener('change', render);
  okiba.every(2000, poll);
})();
