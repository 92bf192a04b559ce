// Creating, editing and deleting queues and topics, on every page that offers it: a
// button with data-create="queue|topic", or data-edit / data-delete with data-name,
// opens a dialog whose form the native API checks (PUT and DELETE /v1/queues/… and
// /v1/topics/…). The form checks nothing itself: a refusal shows the server's error
// code and message in the dialog, and the dialog stays open to fix the field. The
// confirmations are the CLI's: deleting a queue that holds messages asks for its name to
// be typed (okiba queue purge's question); a queue used as a dead-letter queue, or a
// topic with subscriptions or consumer groups, is refused (queue_in_use, topic_in_use)
// and then offered "Delete anyway" (--force).
'use strict';
(() => {
  const { api, el, toast } = okiba;

  // The fields each kind's form offers, as the API names them. kind: dur (a Go
  // duration such as 30s), int, text, bool. createOnly: fixed at creation.
  const fields = {
    queue: [
      { k: 'visibility_timeout', label: 'Visibility timeout', kind: 'dur', hint: 'lease length, 0..12h (default 30s)' },
      { k: 'max_deliveries', label: 'Max deliveries', kind: 'int', hint: 'dead-letter after this many; 0 = never (default 10)' },
      { k: 'dead_letter_queue', label: 'Dead-letter queue', kind: 'text', hint: 'a name, or none (default NAME-dlq)' },
      { k: 'retention', label: 'Retention', kind: 'dur', hint: '0s = unlimited (default 336h)' },
      { k: 'delay', label: 'Delay', kind: 'dur', hint: 'initial invisibility, 0..168h' },
      { k: 'receive_wait', label: 'Receive wait', kind: 'dur', hint: 'default long poll, 0..60s' },
      { k: 'max_messages', label: 'Max messages', kind: 'int', hint: '0 = unlimited' },
      { k: 'ordered_groups', label: 'Ordered groups', kind: 'bool', createOnly: true, hint: 'deliver a group strictly in order' },
    ],
    topic: [
      { k: 'partitions', label: 'Partitions', kind: 'int', createOnly: true, hint: '1..256 (default 1)' },
      { k: 'retention', label: 'Retention', kind: 'text', hint: 'a duration, or forever (default 168h)' },
      { k: 'max_record_size', label: 'Max record size', kind: 'int', hint: 'bytes, up to 1048576' },
      { k: 'dedup_window', label: 'Dedup window', kind: 'dur', hint: '0s = off (default 5m)' },
    ],
  };
  const path = (kind, name) => `/v1/${kind === 'queue' ? 'queues' : 'topics'}/` + encodeURIComponent(name);
  const page = (kind, name) => `/${kind === 'queue' ? 'queues' : 'topics'}/` + encodeURIComponent(name);
  const problem = (e) => (e.code ? `${e.code}: ${e.message}` : e.message);

  // dialog opens a modal with the given body, an error line and buttons; the buttons'
  // handlers get the dialog's parts and may throw to show an error and stay open.
  function dialog(title, body, buttons) {
    const err = el('p', { class: 'notice error', role: 'alert', id: 'manage-error', hidden: true });
    const row = el('div', { class: 'row' });
    const form = el('form', { method: 'dialog', id: 'manage-form' }, el('h2', { id: 'manage-title' }, title), body, err, row);
    const d = el('dialog', { 'aria-labelledby': 'manage-title', id: 'manage-dialog' }, form);
    const close = () => { d.close(); d.remove(); };
    const parts = { d, form, err, close, fail: (msg) => { err.textContent = msg; err.hidden = false; } };
    for (const b of buttons) {
      const btn = el('button', { type: b.submit ? 'submit' : 'button', class: b.class || '', id: b.id }, b.label);
      btn.addEventListener('click', async (ev) => {
        ev.preventDefault();
        if (!b.run) return close();
        err.hidden = true;
        btn.disabled = true;
        try {
          await b.run(parts, btn);
        } catch (e) {
          parts.fail(problem(e));
        } finally {
          btn.disabled = false;
        }
      });
      row.append(btn);
      if (b.init) b.init(btn, parts);
    }
    d.addEventListener('cancel', () => setTimeout(() => d.remove(), 0));
    document.body.append(d);
    d.showModal();
    form.querySelector('input')?.focus();
    return parts;
  }

  function input(f, value, create) {
    const id = 'f-' + f.k;
    const attrs = { id, name: f.k, autocomplete: 'off' };
    if (f.kind === 'bool') {
      const cb = el('input', Object.assign(attrs, { type: 'checkbox' }));
      cb.checked = value === undefined ? true : !!value;
      cb.dataset.initial = String(cb.checked);
      return el('div', { class: 'field' }, el('label', { class: 'row' }, cb, ' ' + f.label), el('small', { class: 'muted' }, f.hint));
    }
    const i = el('input', Object.assign(attrs, { size: 14, placeholder: create ? 'default' : '' }));
    i.value = value === undefined || value === null ? '' : String(value);
    i.dataset.initial = i.value;
    return el('div', { class: 'field' }, el('label', { for: id }, f.label, ' ', el('small', {}, '(' + f.hint + ')')), i);
  }

  // values reads the form: on create every field given, on edit every field changed.
  function values(kind, form, create) {
    const out = {};
    for (const f of fields[kind]) {
      const i = form.querySelector('#f-' + f.k);
      if (!i) continue;
      if (f.kind === 'bool') {
        if (create || String(i.checked) !== i.dataset.initial) out[f.k] = i.checked;
        continue;
      }
      const v = i.value.trim();
      if (v === '' || (!create && v === i.dataset.initial)) continue;
      // A number the server reads as one; anything else goes as typed, for the server to judge.
      out[f.k] = f.kind === 'int' && /^-?\d+$/.test(v) ? Number(v) : v;
    }
    return out;
  }

  function create(kind) {
    const nameInput = el('input', { id: 'f-name', name: 'name', autocomplete: 'off', required: true });
    const body = el('div', {},
      el('div', { class: 'field' }, el('label', { for: 'f-name' }, 'Name ', el('small', {}, kind === 'queue' ? '([A-Za-z0-9_-]{1,80}, optionally .fifo)' : '([A-Za-z0-9_.-]{1,80})')), nameInput),
      el('p', { class: 'muted' }, 'Fields left empty take okiba\'s defaults.'),
      fields[kind].map((f) => input(f, undefined, true)));
    dialog(`New ${kind}`, body, [
      {
        label: `Create ${kind}`, class: 'primary', submit: true, id: 'manage-go',
        run: async (p) => {
          const name = nameInput.value.trim();
          // PUT also updates an existing one (okiba queue create does so): ask first, so
          // that a form for a new one never changes an old one.
          const list = await api('GET', `/v1/${kind}s?prefix=` + encodeURIComponent(name));
          const exists = (list[kind + 's'] || []).some((x) => x.name === name);
          if (exists) throw Object.assign(new Error(`a ${kind} named ${name} exists; edit it on its page`), { code: kind + '_exists' });
          await api('PUT', path(kind, name), values(kind, p.form, true));
          p.close();
          toast(`Created ${kind} ${name}.`, 'success');
          location.href = page(kind, name);
        },
      },
      { label: 'Cancel' },
    ]);
  }

  async function edit(kind, name) {
    const cur = await api('GET', path(kind, name));
    const c = cur.config || {};
    const body = el('div', {}, fields[kind].filter((f) => !f.createOnly).map((f) => input(f, c[f.k], false)),
      el('p', { class: 'muted' }, 'Only the fields you change are sent.'));
    dialog(`Edit ${name}`, body, [
      {
        label: 'Save', class: 'primary', submit: true, id: 'manage-go',
        run: async (p) => {
          const changes = values(kind, p.form, false);
          if (!Object.keys(changes).length) throw new Error('nothing changed');
          await api('PUT', path(kind, name), changes);
          p.close();
          toast(`Saved ${name}: ${Object.keys(changes).join(', ')}.`, 'success');
          document.dispatchEvent(new CustomEvent('okiba:changed'));
          if (kind === 'topic') location.reload();
        },
      },
      { label: 'Cancel' },
    ]);
  }

  async function remove(kind, name) {
    const cur = await api('GET', path(kind, name));
    let held = 0;
    if (kind === 'queue') held = cur.stats.ready + cur.stats.delayed + cur.stats.in_flight;
    else held = cur.stats.records || 0;
    const confirmBox = el('input', { id: 'f-confirm', autocomplete: 'off' });
    const body = el('div', {},
      el('p', {}, held
        ? `${name} holds ${okiba.num(held)} ${kind === 'queue' ? 'message(s)' : 'record(s)'}, which go with it. It cannot be undone. Type its name to confirm.`
        : `Delete the empty ${kind} ${name}? It cannot be undone.`),
      held ? el('div', { class: 'field' }, el('label', { for: 'f-confirm' }, `${kind === 'queue' ? 'Queue' : 'Topic'} name`), confirmBox) : null);
    let force = false;
    const go = async (p, btn) => {
      await api('DELETE', path(kind, name) + (force ? '?force=true' : '')).catch((e) => {
        if (e.code === kind + '_in_use' && !force) {
          force = true;
          btn.textContent = 'Delete anyway';
          btn.id = 'manage-force';
        }
        throw e;
      });
      p.close();
      toast(`Deleted ${kind} ${name}.`, 'success');
      location.href = kind === 'queue' ? '/' : '/topics';
    };
    dialog(`Delete ${name}?`, body, [
      {
        label: `Delete ${kind}`, class: 'danger solid', submit: true, id: 'manage-go', run: go,
        init: (btn) => {
          if (!held) return;
          btn.disabled = true;
          confirmBox.addEventListener('input', () => { btn.disabled = confirmBox.value !== name; });
        },
      },
      { label: 'Cancel' },
    ]);
  }

  document.addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-create], button[data-edit], button[data-delete]');
    if (!b) return;
    const run = b.dataset.create ? () => create(b.dataset.create)
      : b.dataset.edit ? () => edit(b.dataset.edit, b.dataset.name) : () => remove(b.dataset.delete, b.dataset.name);
    Promise.resolve().then(run).catch((e) => toast(problem(e), 'error'));
  });
})();
