// Playground: each lesson runs on the broker (POST /ui/api/playground/{lesson}); the
// page polls the run's state four times a second and draws it, and stops the run when
// asked or when the page goes away.
'use strict';
(() => {
  const { api, el, num, rate, toast } = okiba;
  const yen = (v) => '¥' + num(v);

  // ---- Tabs (arrow keys move between them, as the ARIA tabs pattern says) -------------
  const tabs = [...document.querySelectorAll('[role=tab]')];
  function selectTab(tab) {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute('aria-selected', on);
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !on;
    }
    history.replaceState(null, '', '#' + tab.id.replace('tab-', ''));
  }
  tabs.forEach((t, i) => {
    t.addEventListener('click', () => selectTab(t));
    t.addEventListener('keydown', (e) => {
      const d = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
      if (!d) return;
      const n = tabs[(i + d + tabs.length) % tabs.length];
      selectTab(n);
      n.focus();
    });
  });
  const initial = tabs.find((t) => t.id === 'tab-' + location.hash.slice(1));
  if (initial) selectTab(initial);

  // A principal that may not play is offered no lesson to start: nothing more to do.
  if (!document.querySelector('[data-run]')) return;

  // ---- Runs ---------------------------------------------------------------------------
  const runs = {}; // lesson → {id, timer}

  function sliders(section) {
    return [...section.querySelectorAll('input[type=range]')];
  }
  function showValue(input) {
    const out = document.getElementById(input.id + '-out');
    const pct = input.name === 'loss' || input.name === 'duplicates';
    out.textContent = input.value + (pct ? ' %' : input.name === 'rate' || input.name === 'service' ? ' /s' : input.name === 'pace_ms' ? ' ms' : '');
  }
  function params(section) {
    const p = {};
    for (const s of sliders(section)) {
      const v = Number(s.value);
      p[s.name] = s.name === 'loss' || s.name === 'duplicates' ? v / 100 : v;
    }
    return p;
  }

  for (const section of document.querySelectorAll('[data-lesson]')) {
    const lesson = section.dataset.lesson;
    const run = section.querySelector('[data-run]');
    const stop = section.querySelector('[data-stop]');
    for (const s of sliders(section)) {
      showValue(s);
      s.addEventListener('input', () => showValue(s));
      // Lessons 1 and 2 take new settings while they run.
      s.addEventListener('change', () => {
        const r = runs[lesson];
        if (r && (lesson === 'absorb' || (lesson === 'delivery' && s.name === 'loss'))) control(lesson, { params: params(section) });
      });
    }
    run.addEventListener('click', () => start(lesson, section));
    stop.addEventListener('click', () => end(lesson, section));
  }

  async function start(lesson, section) {
    await end(lesson, section);
    let r;
    try {
      r = await api('POST', '/ui/api/playground/' + lesson, params(section));
    } catch (e) {
      toast(e.message, 'error');
      return;
    }
    runs[lesson] = { id: r.id, timer: null };
    section.dataset.run = r.id;
    section.querySelector('[data-run]').textContent = 'Restart';
    section.querySelector('[data-stop]').disabled = false;
    for (const b of section.querySelectorAll('#absorb-receiver, #delivery-lose')) b.disabled = false;
    draw[lesson](r.state, section);
    poll(lesson, section);
  }

  async function poll(lesson, section) {
    const r = runs[lesson];
    if (!r) return;
    try {
      const s = await api('GET', '/ui/api/playground/runs/' + r.id);
      if (runs[lesson] !== r) return;
      draw[lesson](s.state, section);
    } catch (e) {
      if (e.status === 404) {
        finished(lesson, section, 'This run ended.');
        return;
      }
    }
    if (runs[lesson] === r) r.timer = setTimeout(() => poll(lesson, section), 250);
  }

  async function control(lesson, body) {
    const r = runs[lesson];
    if (!r) return;
    try {
      const s = await api('POST', '/ui/api/playground/runs/' + r.id, body);
      draw[lesson](s.state, document.querySelector(`[data-lesson=${lesson}]`));
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function finished(lesson, section, note) {
    const r = runs[lesson];
    if (r && r.timer) clearTimeout(r.timer);
    delete runs[lesson];
    delete section.dataset.run;
    section.querySelector('[data-run]').textContent = 'Start';
    section.querySelector('[data-stop]').disabled = true;
    for (const b of section.querySelectorAll('#absorb-receiver, #delivery-lose, #log-actions button')) b.disabled = true;
    if (note) toast(note);
  }

  async function end(lesson, section) {
    const r = runs[lesson];
    if (!r) return;
    finished(lesson, section);
    try {
      await api('DELETE', '/ui/api/playground/runs/' + r.id);
    } catch (e) {
      if (e.status !== 404) toast(e.message, 'error');
    }
  }

  // Leaving the page stops its runs (the server also ends runs nobody asks about).
  addEventListener('pagehide', () => {
    for (const r of Object.values(runs)) {
      fetch('/ui/api/playground/runs/' + r.id, { method: 'DELETE', keepalive: true, credentials: 'same-origin' });
    }
  });

  function outcome(id, text, kind, data) {
    const o = document.getElementById(id);
    o.textContent = text;
    o.className = 'outcome ' + (kind || '');
    for (const [k, v] of Object.entries(data || {})) o.dataset[k] = v;
  }

  function dots(box, events, cls) {
    box.replaceChildren(...events.map((e) => el('span', { class: 'dot ' + cls(e), title: '#' + e.n + (e.reason ? ': ' + e.reason : '') })));
  }

  // ---- Lesson 1 -----------------------------------------------------------------------
  const receiver = document.getElementById('absorb-receiver');
  receiver.addEventListener('click', () => {
    const down = receiver.getAttribute('aria-pressed') !== 'true';
    control('absorb', { action: down ? 'receiver_down' : 'receiver_up' });
  });
  let absorbChart = null;
  let peak = 20;
  let wasDown = false;

  const draw = {
    absorb(s) {
      if (!absorbChart) {
        absorbChart = okiba.chart(document.getElementById('absorb-chart'), [
          { label: 'in the queue', color: '--chart-3', fill: true }, { label: 'calls failed (total)', color: '--chart-4' },
        ], { time: false, height: 200, xLabel: 'seconds' });
      }
      receiver.setAttribute('aria-pressed', String(!s.receiver_up));
      receiver.textContent = s.receiver_up ? 'Stop the receiver' : 'Restart the receiver';
      dots(document.getElementById('absorb-rpc'), s.rpc.recent, (e) => (e.ok ? 'ok' : 'fail'));
      dots(document.getElementById('absorb-queue'), s.queue.recent, (e) => (e.ok ? 'ok' : 'wait'));
      document.getElementById('absorb-rpc-ok').textContent = num(s.rpc.ok);
      document.getElementById('absorb-rpc-failed').textContent = num(s.rpc.failed);
      document.getElementById('absorb-sent').textContent = num(s.queue.sent);
      document.getElementById('absorb-processed').textContent = num(s.queue.processed);
      document.getElementById('absorb-depth').textContent = num(s.queue.depth);
      peak = Math.max(peak, s.queue.depth);
      document.getElementById('absorb-tank').style.width = Math.min(100, (100 * s.queue.depth) / peak) + '%';
      const l = s.little;
      document.getElementById('absorb-little').textContent =
        `L = λ × W:  ${num(l.l)} messages = ${rate(l.lambda)}/s × ${l.w_s.toFixed(2)} s` +
        (l.w_measured_s ? `   (measured W: ${l.w_measured_s.toFixed(2)} s)` : '');
      absorbChart.set([s.series.t, s.series.depth, s.series.rpc_failed]);
      const data = { rpcFailed: s.rpc.failed, depth: s.queue.depth, sent: s.queue.sent, processed: s.queue.processed, receiverUp: s.receiver_up };
      if (!s.receiver_up) {
        wasDown = true;
        outcome('absorb-outcome', `Receiver down: ${num(s.rpc.failed)} calls failed; the queue holds ${num(s.queue.depth)} message(s) and has lost none.`, 'bad', data);
      } else if (s.rate > s.service) {
        outcome('absorb-outcome', `λ = ${s.rate}/s is more than μ = ${s.service}/s: the queue grows without end (${num(s.queue.depth)} now). Slow the producer down, or add consumers.`, 'bad', data);
      } else if (wasDown && s.queue.depth > 0) {
        outcome('absorb-outcome', `Receiver back: the queue drains (${num(s.queue.depth)} to go). Nothing was lost.`, '', data);
      } else {
        outcome('absorb-outcome', wasDown
          ? `Drained: the queue is empty again and lost nothing (${num(s.queue.processed)} of ${num(s.queue.sent)} processed, the rest in hand), while ${num(s.rpc.failed)} calls failed.`
          : `Steady: λ ≤ μ, the queue stays short. Now stop the receiver.`, wasDown ? 'ok' : '', data);
      }
    },

    // ---- Lesson 2 ---------------------------------------------------------------------
    delivery(s) {
      const amo = s.at_most_once, alo = s.at_least_once;
      document.getElementById('delivery-amo').replaceChildren(...amo.log.map((e) =>
        el('span', { class: 'chip' + (e.lost ? ' lost' : ''), title: e.lost ? `#${e.n} acked, then lost before processing` : `#${e.n} processed` }, e.n)));
      document.getElementById('delivery-alo').replaceChildren(...alo.log.map((e) =>
        el('span', { class: 'chip' + (e.dup ? ' dup' : ''), title: e.dup ? `#${e.n} again (delivery ${e.delivery}): its ack was lost` : `#${e.n} processed` }, e.n)));
      document.getElementById('delivery-amo-processed').textContent = num(amo.processed);
      document.getElementById('delivery-amo-lost').textContent = num(amo.lost);
      document.getElementById('delivery-amo-dup').textContent = '0';
      document.getElementById('delivery-alo-processed').textContent = num(alo.processed);
      document.getElementById('delivery-alo-lost').textContent = num(alo.lost);
      document.getElementById('delivery-alo-dup').textContent = num(alo.duplicates);
      document.getElementById('delivery-alo-acks').textContent = num(alo.acks_lost);
      const data = { amoLost: amo.lost, aloDup: alo.duplicates, aloLost: alo.lost, done: s.done };
      if (s.done) {
        outcome('delivery-outcome', `At most once lost ${num(amo.lost)} of ${num(s.total)}, silently. At least once lost none and processed ${num(alo.duplicates)} duplicate(s).`,
          amo.lost || alo.duplicates ? 'bad' : 'ok', data);
      } else {
        outcome('delivery-outcome', `Sent ${num(s.sent)} of ${num(s.total)}…`, '', data);
      }
    },

    // ---- Lesson 3 ---------------------------------------------------------------------
    idempotent(s) {
      const top = Math.max(s.expected, s.naive.balance, 1);
      const bar = (id, v, over) => {
        const b = document.getElementById(id);
        b.firstElementChild.style.width = (100 * v) / top + '%';
        b.classList.toggle('over', over);
      };
      document.getElementById('idempotent-naive').textContent = yen(s.naive.balance);
      document.getElementById('idempotent-inbox').textContent = yen(s.idempotent.balance);
      document.getElementById('idempotent-expected').textContent = yen(s.expected);
      bar('idempotent-naive-bar', s.naive.balance, s.naive.balance > s.expected);
      bar('idempotent-inbox-bar', s.idempotent.balance, s.idempotent.balance > s.expected);
      document.getElementById('idempotent-naive-note').textContent = `${num(s.naive.applied)} messages applied`;
      document.getElementById('idempotent-inbox-note').textContent = `${num(s.idempotent.applied)} applied, ${num(s.idempotent.skipped)} repeats skipped by the inbox`;
      document.getElementById('idempotent-stream').replaceChildren(...s.stream.map((e) =>
        el('span', { class: 'chip' + (e.dup ? ' dup' : ''), title: e.event + (e.dup ? ' (repeat)' : '') }, '+100')));
      const data = { naive: s.naive.balance, idempotent: s.idempotent.balance, expected: s.expected, done: s.done };
      if (s.done) {
        outcome('idempotent-outcome', s.naive.balance > s.expected
          ? `Naive balance ${yen(s.naive.balance)} is ${yen(s.naive.balance - s.expected)} too much: ${num(s.duplicates)} repeats counted twice. The inbox kept ${yen(s.idempotent.balance)}, the correct balance.`
          : `No repeats this time: both balances are ${yen(s.expected)}. Raise "Repeated events".`, s.naive.balance > s.expected ? 'ok' : '', data);
      } else {
        outcome('idempotent-outcome', `${num(s.events)} events sent (${num(s.duplicates)} repeats)…`, '', data);
      }
    },

    // ---- Lesson 4 ---------------------------------------------------------------------
    partitions(s) {
      const keyIndex = (k) => k.charCodeAt(k.length - 1) - 65;
      document.getElementById('partitions-lanes').replaceChildren(...s.lanes.map((ln) =>
        el('div', { class: 'lane', dataset: { partition: ln.partition, ordered: ln.ordered } },
          el('span', { class: 'lane-label' }, `partition ${ln.partition} `,
            !ln.keys.length ? el('span', { class: 'muted', title: 'no key hashes to this partition' }, 'idle')
              : ln.ordered ? el('span', { class: 'ok', title: 'every key ascending' }, '✓ in order') : el('span', { class: 'bad' }, '✗ out of order')),
          el('div', { class: 'chips' }, ln.items.map((it) =>
            el('span', { class: `chip key k${keyIndex(it.k)}`, title: `${it.k}, event ${it.s}`, dataset: { key: it.k, seq: it.s } }, it.k.slice(-1) + it.s))))));
      document.getElementById('partitions-legend').replaceChildren(...s.lanes.flatMap((ln) => ln.keys.map((k) =>
        el('span', {}, el('span', { class: `chip key k${keyIndex(k)}` }, k.slice(-1)), `${k} → partition ${ln.partition}`))));
      const data = { allOrdered: s.all_ordered, done: s.done, totalOrder: s.total_order, partitions: s.partitions };
      if (s.done) {
        outcome('partitions-outcome', s.partitions === 1
          ? (s.total_order ? `One partition: total order, every event exactly as sent — and parallelism 1 (${(s.elapsed_ms / 1000).toFixed(1)} s).` : 'One partition, but not in send order.')
          : (s.all_ordered ? `Every key's numbers ascend in its lane: order kept per key, ${s.partitions} lanes in parallel (${(s.elapsed_ms / 1000).toFixed(1)} s).` : 'Some lane is out of order.'),
        s.all_ordered ? 'ok' : 'bad', data);
      } else {
        outcome('partitions-outcome', `${num(s.processed)} of ${num(s.total)} processed…`, '', data);
      }
    },

    // ---- Lesson 5 ---------------------------------------------------------------------
    log(s) {
      const keyIndex = (order) => (order.charCodeAt(0) - 65) % 8;
      const [billing, analytics] = s.groups;
      document.getElementById('log-topic').textContent = s.topic || '…';
      if (s.topic) {
        document.getElementById('log-links').hidden = false;
        document.getElementById('log-topic-link').href = '/topics/' + encodeURIComponent(s.topic);
        document.getElementById('log-queue-link').href = '/queues/' + encodeURIComponent(s.queue);
      }
      for (const li of document.querySelectorAll('#log-steps li')) {
        const p = Number(li.dataset.phase);
        li.classList.toggle('done', p < s.phase || (p === s.phase && s.done));
        if (p === s.phase) li.setAttribute('aria-current', 'step');
        else li.removeAttribute('aria-current');
      }
      // One column per offset, and one more for the end: where the next record goes.
      const cols = Math.max(s.end + 1, 9);
      const grid = document.getElementById('log-grid');
      grid.style.gridTemplateColumns = `6.5rem repeat(${cols}, minmax(4.2rem, 1fr))`;
      const cells = [el('div', { class: 'log-label' }, 'offset')];
      for (const e of s.events) {
        cells.push(el('div', { class: `rec chip key k${keyIndex(e.order)}`, dataset: { offset: e.offset }, title: `offset ${e.offset}: order ${e.order} ${e.event}` + (e.job ? ', copied into the shipping queue' : '') },
          el('b', {}, e.offset), ` ${e.order} ${e.event}`, e.job ? el('span', { class: 'job', 'aria-label': 'a shipping job' }, ' ⇢') : null));
      }
      cells.push(el('div', { class: 'rec next', title: 'the end: the offset the next record gets' }, el('b', {}, s.end), ' next'));
      for (let i = s.end + 1; i < cols; i++) cells.push(el('div'));
      for (const g of s.groups) {
        cells.push(el('div', { class: 'log-label' }, g.name));
        for (let i = 0; i < cols; i++) {
          cells.push(i === g.committed
            ? el('div', { class: 'marker', dataset: { group: g.name, committed: g.committed }, title: `${g.name} has committed ${g.committed}: the next record it reads` }, '▲ ' + g.committed)
            : el('div'));
        }
      }
      grid.replaceChildren(...cells);
      for (const g of s.groups) {
        document.getElementById('log-read-' + g.name).replaceChildren(...g.read.map((e) =>
          el('span', { class: 'chip' + (e.r ? ' dup' : ''), title: `offset ${e.o}` + (e.r ? ', read again after a seek' : '') }, e.o)));
      }
      document.getElementById('log-jobs').replaceChildren(...s.jobs.map((j) =>
        el('span', { class: `chip key k${keyIndex(j.order)}`, title: `offset ${j.offset}: order ${j.order} paid, shipped and acked` }, j.order)));
      document.getElementById('log-delivered').textContent = num(s.subscription.delivered);
      document.getElementById('log-depth').textContent = num(s.queue_depth);
      document.getElementById('log-jobs-count').textContent = num(s.jobs.length);
      const idle = s.phase === 6 && !s.busy && !s.failure;
      document.getElementById('log-publish').disabled = !idle || s.end >= 40;
      document.getElementById('log-replay-billing').disabled = !idle;
      document.getElementById('log-replay-analytics').disabled = !idle;
      const data = {
        done: s.done, phase: s.phase, end: s.end, retained: s.retained, jobs: s.jobs.length, depth: s.queue_depth,
        billing: billing.committed, billingRead: billing.read.length, billingReplays: billing.replays,
        analytics: analytics.committed, analyticsRead: analytics.read.length, analyticsReplays: analytics.replays,
      };
      if (s.failure) {
        outcome('log-outcome', 'The lesson stopped: ' + s.failure, 'bad', data);
      } else if (s.done) {
        outcome('log-outcome', `billing read ${num(billing.read.length)} record(s) and stands at offset ${billing.committed}; analytics read ${num(analytics.read.length)}, ` +
          `${num(analytics.replays)} of them again after seeking back. The worker handled ${num(s.jobs.length)} job(s) and the queue holds ${num(s.queue_depth)}; ` +
          `the log still holds all ${num(s.retained)} record(s).`, 'ok', data);
      } else {
        outcome('log-outcome', s.phase === 6 ? 'Working…' : `Step ${s.phase} of 5…`, '', data);
      }
    },
  };

  document.getElementById('delivery-lose').addEventListener('click', () => control('delivery', { action: 'lose_next' }));
  for (const [id, action] of [['log-publish', 'publish'], ['log-replay-billing', 'replay_billing'], ['log-replay-analytics', 'replay_analytics']]) {
    document.getElementById(id).addEventListener('click', () => control('log', { action }));
  }
})();
