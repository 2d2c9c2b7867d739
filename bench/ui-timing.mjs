// UI timing check (issue 5; recorded in bench/RESULTS.md, not an assertion):
// time until the search page shows results over a large store, and until the
// trace page shows the first rows of a 5,000-span trace, in headless Chromium.
//
//   node bench/ui-timing.mjs http://127.0.0.1:16686 <service> <big-trace-id>
//
// Load a server first with `go run ./bench/uiload --otlp <addr>` (1 M spans and one
// 5,000-span trace). playwright-core comes from web/node_modules (make web).
import { createRequire } from 'node:module';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const require = createRequire(new URL('../web/package.json', import.meta.url));
const { chromium } = require('playwright-core');
const [base, service, traceID] = process.argv.slice(2);
if (!base || !service || !traceID) {
  console.error('usage: node bench/ui-timing.mjs <ui-url> <service> <trace-id>');
  process.exit(2);
}
const browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'rootline-timing-')), {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage();
async function timed(name, url, selector, runs = 5) {
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await page.goto('about:blank');
    await page.goto(url);
    await page.waitForSelector(selector, { timeout: 60000 });
    ms.push(performance.now() - t0);
  }
  ms.sort((a, b) => a - b);
  console.log(`${name}: median ${ms[Math.floor(ms.length / 2)].toFixed(0)} ms, min ${ms[0].toFixed(0)} ms, max ${ms[ms.length - 1].toFixed(0)} ms (${runs} loads)`);
}
await timed('search (service, last hour, limit 20)', `${base}/#/search?service=${service}&lookback=1h&limit=20`, 'text=/spans?/');
await timed('trace of 5,000 spans (first rows drawn)', `${base}/#/trace/${traceID}`, 'text=op-');
const t0 = performance.now();
for (let i = 0; i < 50; i++) await page.keyboard.press('ArrowDown');
console.log(`50 key presses on the 5,000-span trace: ${(performance.now() - t0).toFixed(0)} ms`);
await browser.close();
