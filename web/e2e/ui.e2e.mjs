// End-to-end test of the web UI in a real browser: a rootline server and
// agent profile a CPU-burning Go program, an anomalous trace gets captured
// evidence, and Chromium (driven by playwright-core, never downloaded:
// /usr/bin/chromium) walks Search → Trace → span panel → flame graph. Then
// two requests contend for a mutex in a C service under `rootline run`
// (test/testdata/cpsvc), and the waiter's trace page shows its kernel
// critical path: per-thread timeline, wakeup arrow, summary bars and the link
// to the request that blocked it. Waves of that contention open an incident,
// and the Incidents page and the trace page show the server's verdict. The
// agent also records every per-container kernel metric, and the Metrics page
// shows the C service's critical ones with the incident on the same axis.
// The server runs with an API token, as it must when reachable from other
// machines: the UI asks for it once and sends it on every call.
//
//   ROOTLINE_BIN=/path/to/rootline npm run e2e
//
// Needs root for the eBPF profiler; without it the test prints why it skips
// and exits 0, unless ROOTLINE_REQUIRE_BPF=1. Screenshots go to
// <repo>/build/screenshots/. Prints "N passed, N failed" and exits non-zero on
// any failure. Every process it starts is killed on the way out.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const webDir = resolve(here, '..');
const repo = resolve(webDir, '..');
const shots = join(repo, 'build', 'screenshots');
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const BIN = process.env.ROOTLINE_BIN;
const requireBPF = process.env.ROOTLINE_REQUIRE_BPF === '1';

const t0 = Date.now();
const elapsed = () => `${((Date.now() - t0) / 1000).toFixed(1)}s`;
const log = (...a) => console.log(`[${elapsed()}]`, ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (!BIN) {
  console.error('ROOTLINE_BIN must name the built rootline binary (make test-ui-e2e sets it)');
  process.exit(2);
}
if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing (scripts/deps.sh installs Debian's chromium)`);
  process.exit(2);
}
if (process.getuid && process.getuid() !== 0) {
  const why = 'skip: the eBPF CPU profiler needs root';
  if (requireBPF) {
    console.log(`${why}, and ROOTLINE_REQUIRE_BPF=1`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
  console.log(why);
  console.log('0 passed, 0 failed, 1 skipped');
  process.exit(0);
}

// ---- processes -------------------------------------------------------------

const procs = [];
const tmp = mkdtempSync(join(tmpdir(), 'rootline-ui-e2e-'));
let browser;

/** start runs a command, keeps its output (for failure reports) and records it for cleanup. */
function start(name, cmd, args, env = {}) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const out = [];
  const keep = (b) => {
    out.push(b.toString());
    if (out.length > 400) out.shift();
  };
  p.stdout.on('data', keep);
  p.stderr.on('data', keep);
  const rec = { name, p, out, exited: false };
  p.on('exit', () => (rec.exited = true));
  procs.push(rec);
  return rec;
}

async function stopAll() {
  if (browser) await browser.close().catch(() => {});
  for (const r of [...procs].reverse()) {
    if (r.exited) continue;
    r.p.kill('SIGTERM');
    for (let i = 0; i < 100 && !r.exited; i++) await sleep(100);
    if (!r.exited) r.p.kill('SIGKILL');
  }
  // ROOTLINE_E2E_KEEP=1 keeps the data directory and the logs to look into.
  if (process.env.ROOTLINE_E2E_KEEP === '1') console.log(`kept ${tmp}`);
  else rmSync(tmp, { recursive: true, force: true });
}

let cleaning = false;
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => {
    if (cleaning) return;
    cleaning = true;
    await stopAll();
    process.exit(130);
  });
}

// ---- the checks ------------------------------------------------------------

let passed = 0;
let failed = 0;
let broken = false; // later checks depend on earlier ones

async function check(name, fn) {
  if (broken) {
    console.log(`SKIP ${name} (an earlier check failed)`);
    failed++;
    return;
  }
  const s = Date.now();
  try {
    await fn();
    passed++;
    console.log(`PASS ${name} (${((Date.now() - s) / 1000).toFixed(1)}s)`);
  } catch (e) {
    failed++;
    broken = true;
    console.log(`FAIL ${name} (${((Date.now() - s) / 1000).toFixed(1)}s): ${e instanceof Error ? e.stack || e.message : e}`);
  }
}

/** soft is a check later ones don't depend on: its failure doesn't stop the run. */
async function soft(name, fn) {
  const was = broken;
  await check(name, fn);
  if (!was) broken = false;
}

async function waitFor(what, ms, fn) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms / 1000}s waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await sleep(200);
  }
}

let server, query, otlpHTTP, hotPid, slowTrace;
let cpPort, holderTrace, waiterTrace;

// The server's API token: every API call and every export needs it.
const TOKEN = `ui-e2e-${randomBytes(8).toString('hex')}`;
const bearer = { Authorization: `Bearer ${TOKEN}` };

async function getJSON(path) {
  const res = await fetch(`http://${query}${path}`, { headers: bearer });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status}`);
  return res.json();
}

const hex = (n) => randomBytes(n).toString('hex');
const nowNs = () => BigInt(Date.now()) * 1_000_000n;
const str = (k, v) => ({ key: k, value: { stringValue: v } });

/** span builds one OTLP/JSON resourceSpans entry holding one span. */
function resourceSpan(service, extraRes, s) {
  return {
    resource: { attributes: [str('service.name', service), ...extraRes] },
    scopeSpans: [
      {
        scope: { name: 'ui-e2e' },
        spans: [
          {
            traceId: s.traceId,
            spanId: s.spanId,
            ...(s.parent ? { parentSpanId: s.parent } : {}),
            name: s.name,
            kind: s.kind,
            startTimeUnixNano: s.start.toString(),
            endTimeUnixNano: s.end.toString(),
            attributes: [str('test.attr', 'v')],
          },
        ],
      },
    ],
  };
}

/** sendTrace posts one trace: a hot-svc server span with a db client child. */
async function sendTrace(traceId, startNs, durNs, hotRes) {
  const root = hex(8);
  const body = {
    resourceSpans: [
      resourceSpan('hot-svc', hotRes, { traceId, spanId: root, name: 'GET /work', kind: 2, start: startNs, end: startNs + durNs }),
      resourceSpan('db', [], { traceId, spanId: hex(8), parent: root, name: 'SELECT items', kind: 3, start: startNs + 1_000_000n, end: startNs + 5_000_000n }),
    ],
  };
  const res = await fetch(`http://${otlpHTTP}/v1/traces`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...bearer },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) throw new Error(`OTLP POST: ${res.status} ${await res.text()}`);
}

async function main() {
  mkdirSync(shots, { recursive: true });

  await check('build the hotgo target', async () => {
    execFileSync('go', ['build', '-o', join(tmp, 'hotgo'), '../bench/spin'], { cwd: webDir, stdio: 'inherit' });
  });

  await check('rootline server starts', async () => {
    server = start('server', BIN, [
      'server', '--data-dir', join(tmp, 'data'), '--log.format', 'json',
      '--otlp.grpc.addr', '127.0.0.1:0', '--otlp.http.addr', '127.0.0.1:0',
      '--zipkin.addr', '127.0.0.1:0', '--query.addr', '127.0.0.1:0',
      '--detector.min-fill', '10', '--capture.pre', '3s', '--capture.post', '0s', '--capture.settle', '500ms',
    ], { ROOTLINE_AUTH_TOKEN: TOKEN });
    const ready = await waitFor('"rootline server ready"', 30_000, () => {
      if (server.exited) throw new Error(`server exited:\n${server.out.join('')}`);
      for (const line of server.out.join('').split('\n')) {
        try {
          const j = JSON.parse(line);
          if (j.msg === 'rootline server ready') return j;
        } catch {
          /* not a JSON line */
        }
      }
      return undefined;
    });
    query = ready.query;
    otlpHTTP = ready.otlp_http;
    if (!query || !otlpHTTP) throw new Error(`ready line lacks addresses: ${JSON.stringify(ready)}`);
    log(`server: query ${query}, otlp http ${otlpHTTP}`);
  });

  await check('the API refuses calls without the token', async () => {
    for (const path of ['/api/services', '/api/traces?service=x', '/api/v1/anomalies', '/api/v1/metrics/timeline', '/api/v1/critical-metrics', '/metrics']) {
      const res = await fetch(`http://${query}${path}`);
      if (res.status !== 401) throw new Error(`GET ${path} without the token: ${res.status}, want 401`);
    }
    const res = await fetch(`http://${otlpHTTP}/v1/traces`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    if (res.status !== 401) throw new Error(`OTLP export without the token: ${res.status}, want 401`);
  });

  await check('agent registers the hot-svc process', async () => {
    const hot = start('hotgo', join(tmp, 'hotgo'), ['--duration', '2m']);
    hotPid = hot.p.pid;
    const agent = start('agent', BIN, [
      'agent', '--server', `http://${query}`, '--listen', '127.0.0.1:0', '--socket', join(tmp, 'agent.sock'), '--discover=false', '--log.format', 'json',
      '--profilers', 'cpu,kernel', '--target', `pid=${hotPid},service=hot-svc`,
      // Every kernel metric of every container, pushed each second: the
      // metrics page shows them.
      '--kmetrics', '--kmetrics.enable', 'all', '--kmetrics.push-interval', '1s', '--kmetrics.otlp-url', `http://${otlpHTTP}/v1/metrics`,
    ], { ROOTLINE_AUTH_TOKEN: TOKEN });
    await waitFor('the agent to register pid ' + hotPid, 30_000, async () => {
      if (agent.exited) throw new Error(`agent exited:\n${agent.out.join('')}`);
      const agents = (await getJSON('/api/v1/agents')) ?? [];
      return agents.some((a) => (a.processes ?? []).some((p) => Number(p.pid ?? p.PID) === hotPid));
    });
    await sleep(4000); // let the profiler gather the capture's pre-window
  });

  await check('an anomalous trace gets a captured artifact', async () => {
    const base = nowNs() - 60_000_000_000n;
    for (let i = 0; i < 20; i++) {
      await sendTrace(hex(16), base + BigInt(i) * 2_000_000_000n, 10_000_000n, []);
    }
    slowTrace = hex(16);
    await sendTrace(slowTrace, nowNs() - 1_000_000_000n, 1_000_000_000n, [{ key: 'process.pid', value: { intValue: String(hotPid) } }]);
    const arts = await waitFor('an artifact on the slow trace', 60_000, async () => {
      const a = (await getJSON(`/api/v1/traces/${slowTrace}/artifacts`)) ?? [];
      return a.length > 0 ? a : undefined;
    });
    log(`artifacts: ${arts.map((a) => `${a.kind} ${a.id}`).join(', ')}`);
  });

  let page;
  await check('search page finds the anomalous trace', async () => {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      chromiumSandbox: false,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(20_000);
    page.on('pageerror', (e) => console.log('page error:', e.message));
    await page.goto(`http://${query}/`);
    await page.waitForURL(/#\/search/);
    // The first API call is refused: the UI asks for the token, once.
    const prompt = page.getByRole('dialog', { name: 'API token' });
    await prompt.waitFor();
    await page.screenshot({ path: join(shots, 'token-prompt.png') });
    await prompt.getByLabel('API token').fill('not-the-token');
    await prompt.getByRole('button', { name: 'Use token' }).click();
    await prompt.getByText('The server refused that token').waitFor();
    await prompt.getByLabel('API token').fill(TOKEN);
    await prompt.getByRole('button', { name: 'Use token' }).click();
    await prompt.waitFor({ state: 'detached' });
    const svc = page.getByLabel('Service');
    await page.locator('select option', { hasText: 'hot-svc' }).first().waitFor({ state: 'attached' });
    await svc.selectOption('hot-svc');
    await page.getByLabel('Anomalous only').check();
    await page.getByRole('button', { name: 'Find traces' }).click();
    await page.locator('.resultlist li').first().waitFor();
    const n = await page.locator('.resultlist li').count();
    if (n !== 1) throw new Error(`want 1 result, got ${n}`);
    await page.screenshot({ path: join(shots, 'search.png'), fullPage: true });
  });

  await check('trace page: span panel shows the cpu artifact', async () => {
    await page.locator('.resultlist li a.result').first().click();
    await page.waitForURL(new RegExp(`#/trace/${slowTrace}`));
    const row = page.locator('.trow.anomalous', { has: page.locator('.svcname', { hasText: 'hot-svc' }) }).first();
    await row.click();
    const panel = page.locator('aside.spanpanel');
    await panel.waitFor();
    await panel.locator('.artifact', { hasText: 'cpu' }).first().waitFor();
  });

  await check('inline flame graph contains main.hotLoop', async () => {
    await page.waitForFunction(
      () => Array.from(document.querySelectorAll('aside.spanpanel .flamechart')).some((el) => el.textContent?.includes('main.hotLoop')),
      undefined,
      { timeout: 30_000 },
    );
    await sleep(500); // let the flame graph's transition finish for the picture
    await page.screenshot({ path: join(shots, 'trace-span-panel.png'), fullPage: true });
  });

  await soft('full-page flame graph: zoom, search, invert', async () => {
    await page.locator('aside.spanpanel a.fullflame').first().click();
    await page.waitForURL(/#\/flame\//);
    await page.waitForFunction(() => document.querySelector('.flamepage .flamechart')?.textContent?.includes('main.hotLoop'), undefined, { timeout: 30_000 });
    await page.getByLabel('Search frames').fill('hotLoop');
    await page.locator('.flametools', { hasText: '1 frame,' }).waitFor();
    // d3-flame-graph marks search hits with its highlight colour.
    await page.waitForFunction(() => Array.from(document.querySelectorAll('.flamepage .flamechart rect')).some((r) => (r.getAttribute('fill') || '').toUpperCase() === '#E600E6'));
    await page.locator('.flamepage .flamechart g', { hasText: 'main.hotLoop' }).last().click(); // zoom in
    await page.getByLabel('Inverted (icicle)').check();
    await page.waitForFunction(() => document.querySelector('.flamepage .flamechart')?.textContent?.includes('main.hotLoop'));
    await sleep(500);
    await page.screenshot({ path: join(shots, 'flame-page.png'), fullPage: true });
    // The download link cannot carry the token: the UI fetches with it.
    const [download] = await Promise.all([page.waitForEvent('download'), page.locator('.flametools a', { hasText: 'download' }).click()]);
    const size = (await readFile(await download.path())).byteLength;
    if (size === 0) throw new Error(`download ${download.suggestedFilename()} is empty`);
    const dl = await page.locator('.flametools a', { hasText: 'download' }).getAttribute('href');
    if ((await fetch(new URL(dl, `http://${query}/`))).status !== 401) throw new Error(`${dl} without the token is not refused`);
  });

  await soft('speedscope opens the artifact', async () => {
    // Speedscope fetches the profile itself, without the token: the link
    // hands it the content fetched with the token, as a blob: URL.
    const [sp] = await Promise.all([page.waitForEvent('popup'), page.locator('.flametools a', { hasText: 'speedscope' }).click()]);
    await sp.setViewportSize({ width: 1400, height: 900 });
    const consoleLines = [];
    sp.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
    sp.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
    try {
      await sp.waitForURL(/speedscope\/view\.html#profileURL=blob/, { timeout: 20_000 });
      await sp.waitForFunction(() => document.title.endsWith(' - speedscope'), undefined, { timeout: 20_000 });
      if (await sp.getByText('Something went wrong').count()) throw new Error('speedscope could not read the profile');
      await sleep(500);
      await sp.screenshot({ path: join(shots, 'speedscope.png') });
    } catch (e) {
      await sp.screenshot({ path: join(shots, 'speedscope-failed.png') }).catch(() => {});
      throw new Error(`${e.message}\nspeedscope console:\n${consoleLines.join('\n')}\ntitle: ${await sp.title()}`);
    } finally {
      await sp.close();
    }
  });

  await soft('service map links hot-svc to its anomalous search', async () => {
    await page.goto(`http://${query}/#/map`);
    const hotNode = page.locator('svg.servicemap g.mapnode', { hasText: 'hot-svc' });
    await hotNode.waitFor();
    await page.locator('svg.servicemap g.mapnode', { hasText: 'db' }).waitFor();
    const edges = await page.locator('svg.servicemap g.mapedge').count();
    if (edges !== 1) throw new Error(`want 1 edge (hot-svc → db), got ${edges}`);
    await page.screenshot({ path: join(shots, 'service-map.png'), fullPage: true });
    await hotNode.click();
    await page.waitForURL(/#\/search\?service=hot-svc&anomalous=true/);
    await page.locator('.resultlist li').first().waitFor();
    const n = await page.locator('.resultlist li').count();
    if (n !== 1) throw new Error(`want 1 anomalous result, got ${n}`);
  });

  await soft('critical path: two requests contend for a mutex in a C service', async () => {
    execFileSync('gcc', ['-O2', '-pthread', '-o', join(tmp, 'cpsvc'), join(repo, 'test/testdata/cpsvc/cpsvc.c')], { stdio: 'inherit' });
    const agents = await getJSON('/api/v1/agents');
    const agentURL = agents[0].dumpUrl.replace(/\/api\/v1\/dump$/, '');
    const svc = start('cpsvc', BIN, ['run', '--mode', 'ebpf', '--service', 'cp-ui', '--server', `http://${otlpHTTP}`, '--agent', agentURL, '--', join(tmp, 'cpsvc')], { ROOTLINE_AUTH_TOKEN: TOKEN });
    cpPort = await waitFor('cpsvc to listen', 30_000, () => {
      if (svc.exited) throw new Error(`rootline run exited:\n${svc.out.join('')}`);
      const m = svc.out.join('').match(/listening (\d+)/);
      return m ? Number(m[1]) : undefined;
    });
    await waitFor('cp-ui to register with the agent', 30_000, async () =>
      ((await getJSON('/api/v1/agents')) ?? []).some((a) => (a.processes ?? []).some((p) => p.service === 'cp-ui')),
    );
    const work = async (q) => {
      const trace = hex(16);
      const res = await fetch(`http://127.0.0.1:${cpPort}/work?${q}`, { headers: { traceparent: `00-${trace}-${hex(8)}-01` } });
      return { trace, body: await res.text() };
    };
    for (let i = 0; i < 20; i++) await work('do=fast');
    await sleep(500);
    for (let attempt = 0; ; attempt++) {
      const holder = work('do=lock&hold=600');
      await sleep(150);
      const waiter = await work('do=lock&hold=1');
      const h = await holder;
      const waited = Number((waiter.body.match(/lock_wait_ns=(\d+)/) ?? [])[1] ?? 0);
      if (waited > 150e6) {
        holderTrace = h.trace;
        waiterTrace = waiter.trace;
        log(`waiter ${waiterTrace} waited ${(waited / 1e6).toFixed(1)} ms for holder ${holderTrace}`);
        break;
      }
      if (attempt === 2) throw new Error(`the requests never contended (last wait ${waited} ns)`);
    }
    // With no incident open the server stores no paths of the capture (only
    // --capture.eager-paths does): the API computes them from its kernel
    // snapshot when asked, as the trace page does.
    await waitFor("the waiter's critical path", 120_000, async () => {
      const arts = (await getJSON(`/api/v1/traces/${waiterTrace}/artifacts`)) ?? [];
      if (!arts.some((a) => a.kind === 'kernel')) return undefined;
      const cp = await getJSON(`/api/v1/traces/${waiterTrace}/critical-path`);
      return cp.spans.some((p) => p.service === 'cp-ui' && p.blockedBy.length > 0);
    });
  });

  await soft('trace page shows the critical path and links the blocking request', async () => {
    await page.goto(`http://${query}/#/trace/${waiterTrace}`);
    const idx = page.locator('.cpindex button', { hasText: 'cp-ui' }).first();
    await idx.click();
    const cp = page.locator('aside.spanpanel .critpath');
    await cp.waitFor();
    const rows = await cp.locator('svg.cptimeline g.cprow').count();
    if (rows < 2) throw new Error(`want the waiter's and the holder's threads, got ${rows} rows`);
    if ((await cp.locator('svg.cptimeline line.cparrow').count()) < 1) throw new Error('no wakeup arrow');
    if ((await cp.locator('svg.cptimeline rect.cpseg.blocking').count()) < 1) throw new Error('no segment on the blocking request');
    const bars = await cp.locator('.cpbar').evaluateAll((els) => els.map((e) => e.getAttribute('aria-label')));
    if (!bars.some((b) => /lock \d+%/.test(b ?? ''))) throw new Error(`no lock share in the summary bars: ${bars}`);
    await sleep(300);
    await page.screenshot({ path: join(shots, 'critical-path.png'), fullPage: true });
    const link = cp.locator('a.blockedby').first();
    if (!(await link.textContent())?.includes('cp-ui: GET /work')) throw new Error(`blocked-by link: ${await link.textContent()}`);
    await link.click();
    await page.waitForURL(new RegExp(`#/trace/${holderTrace}\\?span=`));
    await page.locator('aside.spanpanel h2', { hasText: 'cp-ui' }).waitFor();
  });

  await soft('incidents page shows the server\'s verdict on lock contention', async () => {
    if (!cpPort) throw new Error('the C service did not start');
    // Requests without trace context: the service's span is the root, the
    // entry point incidents are counted at.
    const root = (q) => fetch(`http://127.0.0.1:${cpPort}/work?${q}`).then((r) => r.text());
    for (let i = 0; i < 30; i++) await root('do=fast');
    await sleep(500);
    for (let wave = 0; wave < 6; wave++) {
      const holder = root('do=lock&hold=300');
      await sleep(60);
      await Promise.all([root('do=lock&hold=1'), root('do=lock&hold=1'), root('do=lock&hold=1'), holder]);
    }
    const inc = await waitFor('an incident with a verdict from critical paths', 150_000, async () => {
      const { incidents } = await getJSON('/api/v1/incidents?service=cp-ui');
      return (incidents ?? []).find((i) => i.verdict && i.verdict.pathSpans > 0);
    });
    log(`incident ${inc.id}: ${inc.verdict.service} / ${inc.verdict.cause}`);
    await page.goto(`http://${query}/#/incidents`);
    const row = page.locator('tr.incident', { hasText: 'cp-ui GET /work' }).first();
    await row.waitFor();
    const verdict = await row.locator('td.verdict').textContent();
    if (!verdict?.startsWith('cp-ui: lock')) throw new Error(`verdict cell: ${verdict}`);
    await row.click();
    const detail = page.locator('tr.incidentdetail');
    await detail.locator('li', { hasText: 'kernel critical paths' }).first().waitFor();
    await page.screenshot({ path: join(shots, 'incidents.png'), fullPage: true });
    await detail.locator('a[href*="#/trace/"]').first().click();
    const line = page.locator('.traceverdict');
    await line.waitFor();
    if (!(await line.textContent())?.includes('cp-ui: lock')) throw new Error(`trace page verdict: ${await line.textContent()}`);
  });

  await soft("metrics page: cp-ui's critical kernel metrics next to its incident", async () => {
    if (!cpPort) throw new Error('the C service did not start');
    const { incidents } = await getJSON('/api/v1/incidents?service=cp-ui');
    const inc = (incidents ?? [])[0];
    if (!inc) throw new Error('cp-ui has no incident');
    // The server's analysis of the last 15 minutes, as the page asks for it,
    // once the window holds enough intervals (8 of 9 s).
    const rep = await waitFor("the server's CriticalMetrics analysis of cp-ui", 120_000, async () => {
      const t = Date.now();
      const to = t;
      const from = to - 15 * 60e3;
      const res = await fetch(`http://${query}/api/v1/critical-metrics?service=cp-ui&from=${from}&to=${to}&step=9s`, { headers: bearer });
      if (res.ok) return res.json();
      throw new Error(`${res.status} after ${((Date.now() - t) / 1000).toFixed(1)}s: ${await res.text()}`);
    });
    if (!(rep.critical['cp-ui'] ?? []).length) {
      const why = (rep.services ?? []).map((s) => `${s.service}: ${s.error ?? (s.app?.metrics ?? []).map((m) => m.metric).join(' ')}`);
      writeFileSync(join(shots, 'critical-metrics-failed.json'), JSON.stringify(rep, null, 1));
      throw new Error(`no critical metrics for cp-ui: ${JSON.stringify(rep.critical)} (${why.join('; ')})`);
    }

    // The page analyses its own window (the last 15 minutes when it loads):
    // what it shows must be what the server answered it.
    const [answer, tlAnswer] = await Promise.all([
      page.waitForResponse((r) => r.url().includes('/api/v1/critical-metrics?service=cp-ui'), { timeout: 120_000 }),
      page.waitForResponse((r) => r.url().includes('/api/v1/metrics/timeline?service=cp-ui'), { timeout: 120_000 }),
      page.goto(`http://${query}/#/metrics?service=cp-ui&range=15m`),
    ]);
    if (!tlAnswer.ok()) throw new Error(`the page's timeline: ${tlAnswer.status()} ${await tlAnswer.text()}`);
    const timeline = await tlAnswer.json();
    if (!answer.ok()) throw new Error(`the page's analysis: ${answer.status()} ${await answer.text()}`);
    const mine = await answer.json();
    const critical = mine.critical['cp-ui'] ?? [];
    const app = mine.services.find((s) => s.service === 'cp-ui').app;
    log(`cp-ui: ${app.containers.join(', ')}: ${app.k} clusters, critical ${critical.join(', ')}`);
    const list = page.locator('.criticallist');
    await list.waitFor({ timeout: 120_000 });
    const shown = (await list.textContent()).split(', ');
    if ([...shown].sort().join() !== [...critical].sort().join()) throw new Error(`page lists ${shown}, the API ${critical}`);
    // Only the critical metrics are drawn, each a line through every value
    // the server gave for the container shown (a gap where it gave none).
    const rows = await page.locator('.metricrow').evaluateAll((els) => els.map((e) => e.getAttribute('data-metric')));
    if ([...rows].sort().join() !== [...critical].sort().join()) throw new Error(`rows ${rows}, want the critical ${critical}`);
    const ctrName = await page.getByLabel('Container').inputValue();
    const ctr = timeline.containers.find((c) => c.container === ctrName);
    if (!ctr || !app.containers.includes(ctrName)) throw new Error(`container ${ctrName} shown, analysed ${app.containers}`);
    for (const m of critical) {
      const want = ctr.metrics.find((x) => x.metric === m).values.filter((v) => v !== null).length;
      const d = await page.locator(`.metricrow[data-metric="${m}"] svg.metricline path`).getAttribute('d');
      const drawn = (d?.match(/[ML]/g) ?? []).length;
      if (want < 2 || drawn !== want) throw new Error(`${m}: ${drawn} points drawn, the server gave ${want} values: ${d}`);
    }
    // The incident is a band on the event strip and on every chart.
    await page.locator(`.eventstrip rect.incband[data-incident="${inc.id}"]`).waitFor({ state: 'attached' });
    if ((await page.locator('svg.metricline rect.incband').count()) < critical.length) throw new Error('the incident band is missing from a chart');
    if ((await page.locator('.eventstrip line.anomtick').count()) < 1) throw new Error('no anomalous request on the event strip');
    // The clusters, each with its representative among the critical metrics.
    const reps = await page.locator('table.clustertable[data-role="app"] td.representative').allTextContents();
    if (reps.length !== app.k || reps.some((r) => !critical.includes(r))) throw new Error(`clusters' representatives ${reps}, critical ${critical}, k ${app.k}`);
    await sleep(300);
    await page.screenshot({ path: join(shots, 'metrics.png'), fullPage: true });
    // All metrics: every metric the container recorded.
    await page.getByLabel('Show all metrics').check();
    const total = await waitFor('every metric drawn', 10_000, async () => {
      const n = await page.locator('.metricrow').count();
      return n > critical.length ? n : undefined;
    });
    const histograms = await page.locator('svg.heatstrip rect:not(.incband)').count();
    if (histograms < 1) throw new Error('no histogram cell drawn');
    log(`metrics page: ${critical.length} critical of ${total} metrics, ${histograms} heat-strip cells`);
    await page.screenshot({ path: join(shots, 'metrics-all.png'), fullPage: true });
  });

  await soft('anomalies page lists the trace', async () => {
    await page.goto(`http://${query}/#/anomalies`);
    await page.locator(`a[href*="${slowTrace}"]`).first().waitFor();
    await page.screenshot({ path: join(shots, 'anomalies.png'), fullPage: true });
  });
}

try {
  await main();
} catch (e) {
  failed++;
  console.log('FAIL unexpected:', e);
} finally {
  if (failed > 0) {
    for (const r of procs) {
      if (r.name === 'hotgo') continue;
      console.log(`---- ${r.name} output (last lines) ----\n${r.out.join('').split('\n').slice(-40).join('\n')}`);
    }
  }
  await stopAll();
}
console.log(`ui e2e took ${elapsed()}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
