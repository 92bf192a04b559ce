// Browser test of okiba's console, in real headless Chromium. e2e_test.go starts a real
// okiba (with a token, and a read-only principal declared in its configuration), seeds
// it, and runs this script with OKIBA_URL, OKIBA_TOKEN, OKIBA_VIEWER_SECRET, ARTIFACTS
// (where screenshots go) and CHROMIUM set. Any failed expectation throws, and
// the script exits non-zero; progress goes to stdout, one line a step.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';

const base = process.env.OKIBA_URL;
const token = process.env.OKIBA_TOKEN;
const viewerSecret = process.env.OKIBA_VIEWER_SECRET;
const artifacts = process.env.ARTIFACTS;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
mkdirSync(artifacts, { recursive: true });

const T = 20_000; // the longest any condition may take to show

function expect(cond, what) {
  if (!cond) throw new Error('expected: ' + what);
}
let last = Date.now();
const step = (s) => {
  const now = Date.now();
  console.log(`step: ${s} (previous step ${((now - last) / 1000).toFixed(1)} s)`);
  last = now;
};

let current = null; // the page in use, for a screenshot of a failure
const browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
const errors = [];
let refusals = 0; // answers of 400 a step expects (the browser logs them as errors)
let failed = false;
try {
  await light();
  await dark();
  await viewer();
} catch (e) {
  failed = true;
  console.log('FAIL: ' + e.stack);
  if (current) {
    await current.screenshot({ path: `${artifacts}/failure.png`, fullPage: true }).catch(() => {});
    console.log(`screenshot of the failure: ${artifacts}/failure.png (${current.url()})`);
  }
} finally {
  await browser.close();
}
if (errors.length) {
  console.log('FAIL: errors in the pages:\n' + errors.join('\n'));
  failed = true;
}
process.exit(failed ? 1 : 0);

async function newPage(colorScheme) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme });
  const page = await ctx.newPage();
  current = page;
  page.on('pageerror', (e) => errors.push(`${page.url()}: ${e.message}`));
  page.on('console', (m) => {
    // The sign-in page answers a wrong token with 401, which Chromium logs: expected.
    if (m.type() !== 'error' || (new URL(page.url()).pathname === '/login' && m.text().includes('status of 401'))) return;
    if (refusals > 0 && m.text().includes('status of 400')) {
      refusals--;
      return;
    }
    errors.push(`${page.url()}: console: ${m.text()}`);
  });
  return { ctx, page };
}

async function shot(page, name, fullPage = true) {
  if (fullPage) await page.evaluate(() => window.scrollTo(0, 0)); // else the sticky top bar lands mid-page
  await page.screenshot({ path: `${artifacts}/${name}.png`, fullPage });
  console.log(`screenshot: ${artifacts}/${name}.png`);
}

// text of a cell of the overview row of queue q, by column index.
async function cell(page, q, col) {
  return (await page.locator(`#queues tr[data-queue="${q}"] td`).nth(col).innerText()).trim();
}

async function signIn(page, secret = token, name = 'admin') {
  await page.goto(base + '/');
  expect(new URL(page.url()).pathname === '/login', 'a page without a session redirects to /login, got ' + page.url());
  await page.getByLabel('Secret').fill('not the token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForSelector('#login-error');
  await page.getByLabel('Secret').fill(secret);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(base + '/');
  const who = (await page.locator('#principal').innerText()).trim();
  expect(who === 'Signed in as ' + name, `the top bar names the principal ${name}, got ${who}`);
}

async function light() {
  const { ctx, page } = await newPage('light');

  step('sign in');
  await page.goto(base + '/login');
  await shot(page, '01-login');
  await signIn(page);

  step('signed in, a next that a browser would read as another site leads home');
  // The browser drops the TAB: "/\t/attacker.example/" would be "//attacker.example/".
  await page.goto(base + '/login?next=/%09/attacker.example/');
  expect(page.url() === base + '/', 'still on the console, got ' + page.url());

  step('overview shows the seeded queues with their numbers');
  await page.waitForSelector('#queues tr[data-queue="orders"]', { timeout: T });
  expect(await cell(page, 'orders', 1) === '5', 'orders ready 5, got ' + await cell(page, 'orders', 1));
  expect(await cell(page, 'orders', 3) === '2', 'orders in flight 2, got ' + await cell(page, 'orders', 3));
  expect(await cell(page, 'payments', 1) === '1', 'payments ready 1');
  expect(await cell(page, 'payments', 4) === '3', 'payments dead letters 3, got ' + await cell(page, 'payments', 4));
  expect(await cell(page, 'payments-dlq', 1) === '3', 'payments-dlq ready 3');
  // Live: a send through the API shows up without a reload.
  await page.evaluate(async () => {
    await fetch('/v1/queues/orders/messages', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ body: 'live' }) });
  });
  await page.waitForFunction(() => document.querySelector('#queues tr[data-queue="orders"] td:nth-child(2)').textContent.trim() === '6', null, { timeout: T });
  await accessibility(page, 'overview');
  await shot(page, '02-overview');

  step('keyboard: the first Tab reaches the skip link, then the navigation');
  await page.keyboard.press('Tab');
  expect(await page.evaluate(() => document.activeElement.classList.contains('skip')), 'skip link focused first');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  expect(await page.evaluate(() => document.activeElement.textContent.trim()) === 'Queues', 'then the Queues link');

  step('queue page: numbers, send, receive and ack by hand, browse');
  await page.click('#queues tr[data-queue="orders"] a');
  await page.waitForURL(base + '/queues/orders');
  await page.waitForFunction(() => document.querySelector('#stat-ready .value')?.textContent === '6', null, { timeout: T });
  expect((await page.locator('#little').innerText()).includes('L = λ × W'), "Little's law shown");
  await page.getByLabel('Body', { exact: true }).fill('{"order": 99}');
  await page.getByLabel('Group (ordered key, optional)').fill('customer-7');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await page.waitForFunction(() => document.getElementById('send-result').textContent.startsWith('Sent '), null, { timeout: T });
  await page.waitForFunction(() => document.querySelector('#stat-ready .value')?.textContent === '7', null, { timeout: T });
  await page.getByRole('button', { name: 'Receive', exact: true }).click();
  const lease = page.locator('#leased .notice').first();
  await lease.waitFor({ timeout: T });
  // The page's own receive makes it a consumer: over HTTP, known by principal and address.
  await page.waitForFunction(() => {
    const tr = document.querySelector('#consumers tr[data-via="http"]');
    return tr && Number(tr.querySelector('[data-k=leases]').textContent) >= 1 && tr.textContent.includes('admin');
  }, null, { timeout: T });
  await lease.getByRole('button', { name: 'Ack', exact: true }).click();
  await page.waitForFunction(() => document.querySelector('#stat-acked .value')?.textContent === '1', null, { timeout: T });
  await page.waitForFunction(() => document.querySelectorAll('#browse > tbody > tr').length === 8, null, { timeout: T });
  await page.locator('#browse > tbody > tr').first().locator('summary').click();
  // Why? explains the message under its row, in words and fields.
  await page.locator('#browse > tbody > tr').first().getByRole('button', { name: /^Explain message/ }).click();
  await page.waitForFunction(() => /Leased until .* by delivery #1|next in line|behind/.test(document.querySelector('#browse tr.explain .explain-summary')?.textContent || ''), null, { timeout: T });
  await page.waitForFunction(() => document.querySelector('#chart-tput .uplot') && document.querySelector('#chart-depth .uplot'), null, { timeout: T });
  await accessibility(page, 'queue');
  await shot(page, '03-queue');

  step('purge with confirmation');
  await page.goto(base + '/queues/scratch');
  await page.waitForFunction(() => document.querySelector('#stat-ready .value')?.textContent === '3', null, { timeout: T });
  await page.getByRole('button', { name: 'Purge…' }).click();
  const go = page.locator('#purge-go');
  expect(await go.isDisabled(), 'purge is disabled until the name is typed');
  await page.getByLabel('Queue name').fill('scratch');
  await shot(page, '04-purge-dialog', false);
  await go.click();
  await page.waitForFunction(() => document.querySelector('#stat-ready .value')?.textContent === '0', null, { timeout: T });

  step('a deferred message: counted on the queue page, listed by the browser as deferred');
  const post = async (path, body) => {
    const r = await fetch(base + path, { method: 'POST', headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    expect(r.ok, `POST ${path}: ${r.status}`);
    return r.json();
  };
  await post('/v1/queues/scratch/messages', { body: 'set aside' });
  const toDefer = await post('/v1/queues/scratch/receive', { max: 1, wait: '0s' });
  await post('/v1/queues/scratch/defer', { receipts: [toDefer.messages[0].receipt] });
  await page.waitForFunction(() => document.querySelector('#stat-deferred .value')?.textContent === '1', null, { timeout: T });
  await page.locator('#browse-state').selectOption('deferred');
  await page.locator('#browse-refresh').click();
  await page.waitForFunction(() => {
    const rows = document.querySelectorAll('#browse > tbody > tr');
    return rows.length === 1 && rows[0].querySelector('.badge.info')?.textContent === 'deferred';
  }, null, { timeout: T });

  step('a parked group: listed on its queue page with its blocking dead letter, released by hand');
  {
    const r = await fetch(base + '/v1/queues/parking', { method: 'PUT', headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' }, body: JSON.stringify({ on_dead_letter: 'park_group' }) });
    expect(r.ok, `PUT /v1/queues/parking: ${r.status}`);
  }
  await post('/v1/queues/parking/messages', { messages: [{ body: 'pay', group: 'order-7' }, { body: 'ship', group: 'order-7' }] });
  const head = await post('/v1/queues/parking/receive', { max: 1, wait: '0s' });
  await post('/v1/queues/parking/deadletter', { receipts: [head.messages[0].receipt], reason: 'card-declined' });
  await page.goto(base + '/queues/parking');
  await page.waitForFunction((id) => document.querySelector('#parked tr[data-group="order-7"] [data-k="blocker"]')?.textContent === id, head.messages[0].id, { timeout: T });
  await page.waitForFunction(() => document.querySelector('#stat-parked .value')?.textContent === '1', null, { timeout: T });
  await accessibility(page, 'queue page with a parked group');
  await page.locator('#parked tr[data-group="order-7"] button').click();
  await page.waitForFunction(() => document.querySelector('#stat-parked .value')?.textContent === '0' && !document.querySelector('#parked tr[data-group]'), null, { timeout: T });

  step('dead letters: the overview of every dead-letter queue, then one of them');
  await page.goto(base + '/dead-letters');
  await page.waitForSelector('#dlqs tr[data-dlq="payments-dlq"]', { timeout: T });
  const counts = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#dlqs tr[data-dlq="payments-dlq"] .badge')]
    .map((b) => [b.dataset.reason, b.textContent.trim()])));
  expect(counts['invalid-card'] === 'invalid-card 2' && counts.timeout === 'timeout 1', 'payments-dlq by reason: ' + JSON.stringify(counts));
  expect(await page.locator('#dlqs tr[data-dlq="orders-dlq"]').count() === 1, 'the empty orders-dlq listed too');
  expect(await page.locator('#dlqs tbody tr').first().getAttribute('data-dlq') === 'payments-dlq', 'the one holding dead letters first');
  await accessibility(page, 'dead-letter overview');
  await shot(page, '05a-dead-letters-overview');
  await page.locator('#dlqs tr[data-dlq="payments-dlq"] a').first().click();
  await page.waitForURL(base + '/dead-letters?queue=payments-dlq');
  await page.waitForFunction(() => document.querySelectorAll('#reasons tbody tr[data-reason]').length === 2, null, { timeout: T });

  step('dead letters: browse by reason, redrive by reason, redrive selected');
  await page.goto(base + '/dead-letters?queue=payments-dlq');
  const reasons = page.locator('#reasons tbody tr');
  await page.waitForFunction(() => document.querySelectorAll('#reasons tbody tr[data-reason]').length === 2, null, { timeout: T });
  const byReason = {};
  for (const r of await reasons.all()) {
    byReason[await r.getAttribute('data-reason')] = (await r.locator('td').nth(2).innerText()).trim();
  }
  expect(byReason['invalid-card'] === '2' && byReason.timeout === '1', 'reasons ' + JSON.stringify(byReason));
  expect((await page.locator('#messages > tbody > tr').count()) === 3, 'three dead letters listed');
  expect((await page.locator('#messages tbody').innerText()).includes('card number fails the Luhn check'), 'descriptions shown');
  await accessibility(page, 'deadletters');
  await shot(page, '05-dead-letters');
  await page.locator('#reasons tr[data-reason="invalid-card"]').getByRole('button', { name: 'Redrive these' }).click();
  await page.waitForSelector('#redrive-done', { timeout: T });
  expect((await page.locator('#redrive-done').innerText()).includes('2 message(s) moved back'), 'redrive progress reported: ' + await page.locator('#redrive-done').innerText());
  await page.waitForFunction(() => document.querySelectorAll('#messages > tbody > tr').length === 1, null, { timeout: T });
  await page.locator('#messages > tbody > tr input[type=checkbox]').check();
  await page.getByRole('button', { name: 'Redrive 1 selected' }).click();
  await page.waitForFunction(() => document.getElementById('redrive-done')?.textContent.includes('1 message(s) moved back'), null, { timeout: T });
  await page.waitForFunction(() => document.querySelector('#reasons tbody').textContent.includes('No dead letters here'), null, { timeout: T });
  await shot(page, '06-dead-letters-redriven');

  step('a queue created from the console (a bad field refused with the server\'s error), then deleted');
  await page.goto(base + '/');
  await page.getByRole('button', { name: 'New queue…' }).click();
  await page.getByLabel(/^Name/).fill('made-in-console');
  await page.getByLabel(/^Visibility timeout/).fill('banana');
  refusals = 1;
  await page.locator('#manage-go').click();
  await page.waitForFunction(() => /^[a-z_]+: .*visibility_timeout/.test(document.getElementById('manage-error')?.textContent || ''), null, { timeout: T });
  await shot(page, '06a-new-queue-refused', false);
  await page.getByLabel(/^Visibility timeout/).fill('45s');
  await page.locator('#manage-go').click();
  await page.waitForURL(base + '/queues/made-in-console');
  await page.waitForFunction(() => document.getElementById('config')?.textContent.includes('45 s'), null, { timeout: T });
  await page.getByRole('button', { name: 'Delete queue…' }).click();
  await page.locator('#manage-go').click();
  await page.waitForURL(base + '/');
  await page.waitForSelector('#queues tr[data-queue="orders"]', { timeout: T });
  expect(await page.locator('#queues tr[data-queue="made-in-console"]').count() === 0, 'made-in-console is gone');

  step('topics: the list, a topic page with its partitions, subscription and group, live');
  await page.getByRole('link', { name: 'Topics', exact: true }).click();
  await page.waitForURL(base + '/topics');
  const trow = page.locator('#topics tr[data-topic="events"] td');
  expect((await trow.nth(1).innerText()).trim() === '2', 'events has 2 partitions');
  expect((await trow.nth(3).innerText()).trim() === '4', 'events retains 4 records, got ' + await trow.nth(3).innerText());
  await accessibility(page, 'topics');
  await shot(page, '16-topics');
  await page.locator('#topics tr[data-topic="events"] a').click();
  await page.waitForURL(base + '/topics/events');
  const k = async (sel) => (await page.locator(sel).innerText()).trim();
  expect(await k('#partitions tr[data-partition="0"] [data-k=end]') === '3' && await k('#partitions tr[data-partition="1"] [data-k=end]') === '1', 'partition ends 3 and 1');
  expect(await k('#subscriptions tr[data-subscription="audit-feed"] [data-k=state]') === 'live', 'audit-feed is live');
  const grp = '#group-projector tr[data-partition="0"] ';
  expect(await k(grp + '[data-k=committed]') === '2' && await k(grp + '[data-k=position]') === '3' && await k(grp + '[data-k=lag]') === '1',
    `projector on partition 0: committed ${await k(grp + '[data-k=committed]')}, position ${await k(grp + '[data-k=position]')}, lag ${await k(grp + '[data-k=lag]')}`);
  // Live: a record published from the page shows up in the partition and the group's lag.
  await page.evaluate(async () => {
    await fetch('/v1/topics/events/records', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ partition: 0, body: 'live' }) });
  });
  await page.waitForFunction(() => document.querySelector('#partitions tr[data-partition="0"] [data-k=end]')?.textContent.trim() === '4' &&
    document.querySelector('#group-projector tr[data-partition="0"] [data-k=lag]')?.textContent.trim() === '2', null, { timeout: T });
  await accessibility(page, 'topic');
  await shot(page, '17-topic');

  step('topic page: seek a group by hand — a bad offset is refused on the page, then back to the first record');
  const seek = page.locator('form[data-seek="projector"]');
  await seek.getByLabel('to', { exact: true }).selectOption('offset');
  await seek.getByLabel('offset or time').fill('x');
  await seek.getByRole('button', { name: 'Seek', exact: true }).click();
  await page.waitForFunction(() => (document.getElementById('toast')?.textContent || '').includes('whole number'), null, { timeout: T });
  await seek.getByLabel('to', { exact: true }).selectOption('first');
  await seek.getByLabel('offset or time').fill('');
  await seek.getByRole('button', { name: 'Seek', exact: true }).click();
  await page.waitForFunction(() => document.querySelector('#group-projector tr[data-partition="0"] [data-k=committed]')?.textContent.trim() === '0' &&
    document.querySelector('#group-projector tr[data-partition="0"] [data-k=lag]')?.textContent.trim() === '4', null, { timeout: T });

  step('topic page: read partition 1 from offset 0; a hostile record is text');
  await page.getByLabel('Partition', { exact: true }).selectOption('1');
  await page.getByLabel('From offset').fill('0');
  await page.getByRole('button', { name: 'Read', exact: true }).click();
  await page.waitForURL(/partition=1&offset=0/);
  const hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';
  expect(await page.locator('#read tr[data-offset="0"] pre').innerText() === hostile, 'the body is shown as the text it is');
  expect((await page.locator('#read tr[data-offset="0"]').innerText()).includes('<b>bold</b>'), 'the header is shown as text');
  expect(await page.evaluate(() => window.__pwned === undefined && document.querySelectorAll('#read img, #read script, #read b, #read i').length === 0),
    'nothing of the record became markup');
  await shot(page, '18-topic-records');

  step('playground 1: the queue absorbs while the receiver is down, drains after');
  await page.goto(base + '/playground');
  const outcome = (id) => page.locator('#' + id);
  const data = async (id, k) => outcome(id).getAttribute('data-' + k);
  await page.locator('[data-lesson=absorb] [data-run]').click();
  await page.waitForFunction(() => Number(document.getElementById('absorb-outcome').dataset.processed) >= 3, null, { timeout: T });
  await page.getByRole('button', { name: 'Stop the receiver' }).click();
  await page.waitForFunction(() => {
    const d = document.getElementById('absorb-outcome').dataset;
    return d.receiverUp === 'false' && Number(d.rpcFailed) >= 5 && Number(d.depth) >= 5;
  }, null, { timeout: T });
  const sentWhileDown = Number(await data('absorb-outcome', 'sent'));
  const little = await page.locator('#absorb-little').innerText();
  expect(/L = λ × W:\s+\d+ messages = [\d.]+\/s × [\d.]+ s/.test(little), "L = λW with numbers: " + little);
  await shot(page, '07-playground-1-receiver-down');
  await page.getByRole('button', { name: 'Restart the receiver' }).click();
  await page.waitForFunction((sent) => {
    const d = document.getElementById('absorb-outcome').dataset;
    return d.receiverUp === 'true' && Number(d.processed) >= sent && Number(d.depth) === 0;
  }, sentWhileDown, { timeout: T });
  await shot(page, '08-playground-1-drained');
  await page.locator('[data-lesson=absorb] [data-stop]').click();

  step('playground 2: at most once loses, at least once duplicates');
  await page.getByRole('tab', { name: '2. At most once, at least once' }).click();
  await page.locator('[data-lesson=delivery] [data-run]').click();
  await page.getByRole('button', { name: '⚡ Lose the next one' }).click();
  await page.waitForFunction(() => document.getElementById('delivery-outcome').dataset.done === 'true', null, { timeout: T });
  const amoLost = Number(await data('delivery-outcome', 'amo-lost'));
  const aloDup = Number(await data('delivery-outcome', 'alo-dup'));
  const aloLost = Number(await data('delivery-outcome', 'alo-lost'));
  expect(amoLost >= 1 && aloDup >= 1 && aloLost === 0, `at-most-once lost ${amoLost}, at-least-once duplicates ${aloDup} and lost ${aloLost}`);
  expect(await page.locator('#delivery-amo .chip.lost').count() >= 1, 'a lost message drawn');
  expect(await page.locator('#delivery-alo .chip.dup').count() >= 1, 'a duplicate drawn');
  await shot(page, '09-playground-2-delivery');
  await page.locator('[data-lesson=delivery] [data-stop]').click();

  step('playground 3: the naive balance inflates, the inbox keeps it right');
  await page.getByRole('tab', { name: '3. Idempotent consumer' }).click();
  await page.locator('[data-lesson=idempotent] [data-run]').click();
  await page.waitForFunction(() => document.getElementById('idempotent-outcome').dataset.done === 'true', null, { timeout: T });
  const naive = Number(await data('idempotent-outcome', 'naive'));
  const idem = Number(await data('idempotent-outcome', 'idempotent'));
  const expected = Number(await data('idempotent-outcome', 'expected'));
  expect(naive > expected && idem === expected, `naive ${naive} > correct ${expected} = idempotent ${idem}`);
  await shot(page, '10-playground-3-idempotent');
  await page.locator('[data-lesson=idempotent] [data-stop]').click();

  step('playground 4: ordered lanes, then P = 1');
  await page.getByRole('tab', { name: '4. Partitions and order' }).click();
  await page.locator('[data-lesson=partitions] [data-run]').click();
  await page.waitForFunction(() => document.getElementById('partitions-outcome').dataset.done === 'true', null, { timeout: T });
  expect(await data('partitions-outcome', 'all-ordered') === 'true', 'all lanes in order');
  const lanes = await page.evaluate(() => [...document.querySelectorAll('#partitions-lanes .lane')].map((l) =>
    [...l.querySelectorAll('.chip')].map((c) => [c.dataset.key, Number(c.dataset.seq)])));
  let used = 0;
  for (const lane of lanes) {
    if (lane.length) used++;
    const last = {};
    for (const [k, s] of lane) {
      expect(!(k in last) || s > last[k], `in-key numbers ascend in every lane: ${k} ${s} after ${last[k]}`);
      last[k] = s;
    }
  }
  expect(lanes.length === 3 && used >= 2, `3 lanes, ${used} in use`);
  await shot(page, '11-playground-4-partitions');
  const slider = page.getByLabel('Partitions P');
  await slider.focus();
  await page.keyboard.press('Home'); // sliders work from the keyboard
  expect(await slider.inputValue() === '1', 'P slider at 1');
  await page.locator('[data-lesson=partitions] [data-run]').click();
  await page.waitForFunction(() => document.getElementById('partitions-outcome').dataset.done === 'true' &&
    document.getElementById('partitions-outcome').dataset.partitions === '1', null, { timeout: T });
  expect(await data('partitions-outcome', 'total-order') === 'true', 'P = 1 gives total order');
  await shot(page, '12-playground-4-one-partition');
  await page.locator('[data-lesson=partitions] [data-stop]').click();

  step('playground 5: two groups read one log at their own offsets, one replays; a subscription feeds a queue');
  await page.getByRole('tab', { name: '5. The log as a broker' }).click();
  const pace = page.getByLabel('Pace, per step');
  await pace.focus();
  await page.keyboard.press('Home');
  expect(await pace.inputValue() === '0', 'pace slider at 0');
  await page.locator('[data-lesson=log] [data-run]').click();
  await page.waitForFunction(() => document.getElementById('log-outcome').dataset.done === 'true', null, { timeout: T });
  const lg = await page.evaluate(() => ({ ...document.getElementById('log-outcome').dataset }));
  expect(lg.billing === '8' && lg.billingRead === '8' && lg.analytics === '8' && lg.analyticsRead === '16' && lg.analyticsReplays === '8',
    'each group at its own offsets, analytics replayed: ' + JSON.stringify(lg));
  expect(lg.jobs === '3' && lg.depth === '0' && lg.retained === '8', 'the queue forgot its jobs, the log kept its records: ' + JSON.stringify(lg));
  expect((await page.locator('#log-grid .marker[data-group=billing]').innerText()).trim() === '▲ 8', 'billing marked at offset 8');
  expect(await page.locator('#log-read-analytics .chip.dup').count() === 8, 'eight replayed reads drawn');
  await shot(page, '19-playground-5-log');
  // The run's topic on its own page, in a second tab: leaving the playground would end the run.
  const topicTab = await ctx.newPage();
  topicTab.on('pageerror', (e) => errors.push(`${topicTab.url()}: ${e.message}`));
  await topicTab.goto(base + await page.locator('#log-topic-link').getAttribute('href'));
  expect((await topicTab.locator('#group-analytics tr[data-partition="0"] [data-k=committed]').innerText()).trim() === '8', 'the topic page shows analytics at 8');
  await topicTab.close();
  await page.getByRole('button', { name: 'Replay billing' }).click();
  await page.waitForFunction(() => {
    const d = document.getElementById('log-outcome').dataset;
    return d.done === 'true' && d.billingReplays === '8';
  }, null, { timeout: T });
  await page.locator('[data-lesson=log] [data-stop]').click();
  await accessibility(page, 'playground');

  step('tabs: arrow keys move between lessons');
  await page.getByRole('tab', { name: '5. The log as a broker' }).focus();
  await page.keyboard.press('ArrowRight');
  expect(await page.evaluate(() => document.activeElement.id) === 'tab-absorb', 'ArrowRight wraps to the first lesson');
  expect(await page.locator('#lesson-absorb').isVisible(), 'and shows it');
  await ctx.close();
}

async function dark() {
  const { ctx, page } = await newPage('dark');
  step('dark mode');
  await signIn(page);
  await page.waitForSelector('#queues tr[data-queue="orders"]', { timeout: T });
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  expect(bg === 'rgb(14, 17, 21)', 'dark background, got ' + bg);
  await shot(page, '13-overview-dark');
  await page.goto(base + '/queues/orders');
  await page.waitForFunction(() => document.querySelector('#chart-depth .uplot'), null, { timeout: T });
  await shot(page, '14-queue-dark');
  await page.goto(base + '/playground#delivery');
  await page.locator('[data-lesson=delivery] [data-run]').click();
  await page.getByRole('button', { name: '⚡ Lose the next one' }).click();
  await page.waitForFunction(() => document.getElementById('delivery-outcome').dataset.done === 'true', null, { timeout: T });
  await shot(page, '15-playground-dark');
  await page.locator('[data-lesson=delivery] [data-stop]').click();
  await page.goto(base + '/topics/events');
  await page.waitForSelector('#group-projector');
  await shot(page, '20-topic-dark');
  await ctx.close();
}

// viewer signs in as a principal that may browse queues and topics, and nothing more: the
// pages show it all and offer none of the actions.
async function viewer() {
  const { ctx, page } = await newPage('light');
  step('a read-only principal: the pages show, and offer no action');
  await signIn(page, viewerSecret, 'viewer');
  await page.waitForSelector('#queues tr[data-queue="orders"]', { timeout: T });
  expect(await page.locator('[data-create]').count() === 0, 'no new queue for a read-only principal');
  await page.goto(base + '/queues/orders');
  await page.waitForFunction(() => document.querySelector('#stat-ready .value'), null, { timeout: T });
  await page.waitForFunction(() => document.querySelectorAll('#browse > tbody > tr').length > 0, null, { timeout: T });
  for (const sel of ['#send-form', '#recv-form', '#purge-open', '#browse button:not([aria-label^="Explain"])', '[data-edit]', '[data-delete]']) {
    expect(await page.locator(sel).count() === 0, `no ${sel} for a read-only principal`);
  }
  // Explaining is reading: a read-only principal may.
  expect(await page.locator('#browse button[aria-label^="Explain"]').count() > 0, 'Why? for a read-only principal');
  await shot(page, '21-queue-read-only');
  // A dead letter to look at (the admin's pages redrove the others), made through the API.
  const v1 = async (path, body) => {
    const r = await fetch(base + path, { method: 'POST', headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    expect(r.ok, `POST ${path}: ${r.status}`);
    return r.json();
  };
  await v1('/v1/queues/scratch/messages', { body: 'for the viewer' });
  const got = await v1('/v1/queues/scratch/receive', { max: 1, wait: '0s' });
  await v1('/v1/queues/scratch/deadletter', { receipts: [got.messages[0].receipt], reason: 'viewer-only' });
  await page.goto(base + '/dead-letters?queue=scratch-dlq');
  await page.waitForSelector('#reasons tr[data-reason="viewer-only"]', { timeout: T });
  expect(await page.locator('#read-only').isVisible(), 'the dead letters say they are read-only');
  expect(await page.getByRole('button', { name: /Redrive|Delete/ }).count() === 0, 'no redrive or delete button');
  await page.goto(base + '/topics/events');
  expect(await page.locator('form[data-seek]').count() === 0, 'no seek form');
  await page.goto(base + '/playground');
  expect(await page.locator('#no-play').isVisible() && await page.locator('[data-run]').count() === 0, 'no lesson to start');
  await shot(page, '22-playground-read-only');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');
  await ctx.close();
}

// accessibility checks what a page must have for keyboard and screen-reader users: a
// label for every control, a name for every button and link, one h1, a lang.
async function accessibility(page, name) {
  const problems = await page.evaluate(() => {
    const out = [];
    const visible = (e) => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);
    for (const e of document.querySelectorAll('input, select, textarea')) {
      if (e.type === 'hidden' || !visible(e)) continue;
      if (!(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby')) out.push('unlabelled ' + e.outerHTML.slice(0, 80));
    }
    for (const e of document.querySelectorAll('button, a[href]')) {
      if (!visible(e)) continue;
      if (!(e.textContent.trim() || e.getAttribute('aria-label') || e.getAttribute('title'))) out.push('nameless ' + e.outerHTML.slice(0, 80));
    }
    if (document.querySelectorAll('h1').length !== 1) out.push(document.querySelectorAll('h1').length + ' h1 elements');
    if (!document.documentElement.lang) out.push('no lang');
    return out;
  });
  expect(problems.length === 0, `accessible ${name} page: ${problems.join('; ')}`);
}
