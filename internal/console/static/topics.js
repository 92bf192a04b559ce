// Topics and topic pages. They are rendered on the server; this refreshes their live
// sections ([data-live]) from the same URL every five seconds while the tab is visible.
// The record view and its form are not live: they change only when asked, so nothing
// moves under the reader's hand. A section holding the focus is left alone until the
// focus leaves it.
'use strict';
(() => {
  const updated = document.getElementById('updated');
  const every = 5000;
  let timer = null;
  let busy = false;

  async function refresh() {
    timer = null;
    if (document.hidden || busy) return;
    busy = true;
    const t0 = performance.now();
    try {
      const u = new URL(location.href);
      u.searchParams.set('live', '1');
      u.hash = '';
      const res = await fetch(u, { credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'text/html' } });
      if (res.redirected && new URL(res.url).pathname === '/login') {
        location.href = '/login?next=' + encodeURIComponent(location.pathname + location.search);
        return;
      }
      if (!res.ok) throw new Error(res.status === 404 ? 'This topic no longer exists.' : 'refresh: ' + res.status + ' ' + res.statusText);
      const doc = new DOMParser().parseFromString(await res.text(), 'text/html');
      for (const box of document.querySelectorAll('[data-live]')) {
        const fresh = doc.getElementById(box.id);
        if (!fresh || box.contains(document.activeElement)) continue;
        box.replaceChildren(...[...fresh.childNodes].map((n) => document.importNode(n, true)));
      }
      if (updated) updated.textContent = 'Updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      okiba.toast(e.message, 'error');
    } finally {
      busy = false;
    }
    // A server slow to answer is asked less often, as on the other pages.
    if (timer === null) timer = setTimeout(refresh, Math.max(every, 20 * (performance.now() - t0)));
  }
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && timer === null) refresh();
  });
  // Seeking a group by hand: the form of each group posts the native API's seek and
  // refreshes the page's live part with the result. The form is inside the live part:
  // a refresh leaves it alone while it holds the focus.
  document.addEventListener('submit', async (ev) => {
    const form = ev.target.closest('form[data-seek]');
    if (!form) return;
    ev.preventDefault();
    const topic = document.getElementById('tname').textContent;
    const group = form.dataset.seek;
    const to = form.elements.to.value;
    const at = form.elements.at.value.trim();
    const body = {};
    if (to === 'first' || to === 'last') {
      body.to = to;
    } else if (to === 'offset') {
      if (!/^[0-9]+$/.test(at)) { okiba.toast('Give the offset as a whole number.', 'error'); return; }
      body.offset = Number(at);
    } else {
      if (Number.isNaN(Date.parse(at))) { okiba.toast('Give the time as 2026-12-01T12:00:00Z.', 'error'); return; }
      body.time = new Date(at).toISOString();
    }
    if (form.elements.partition.value !== '') body.partition = Number(form.elements.partition.value);
    else if (to === 'offset') { okiba.toast('A seek to an offset names its partition.', 'error'); return; }
    try {
      await okiba.api('POST', `/v1/topics/${encodeURIComponent(topic)}/groups/${encodeURIComponent(group)}/seek`, body);
      okiba.toast(`Group ${group} moved.`, 'success');
      form.elements.at.blur();
      document.activeElement && document.activeElement.blur();
      if (timer !== null) clearTimeout(timer);
      refresh();
    } catch (e) {
      okiba.toast('Seek refused: ' + e.message, 'error');
    }
  });
  if (updated) updated.textContent = 'Updated ' + new Date().toLocaleTimeString();
  timer = setTimeout(refresh, every);
})();
