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
  if (updated) updated.textContent = 'Updated ' + new Date().toLocaleTimeString();
  timer = setTimeout(refresh, every);
})();
