// A stand-in for the Rootline query API, for looking at the UI without a
// server: serves dist/ and canned answers, including a 5,000-span trace
// ("big") with a pprof artifact on span s10. Usage: node scripts/mockapi.mjs [port]
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const port = Number(process.argv[2] ?? 5174);
const T0 = 1763771000000000; // µs

function bigTrace(n = 5000) {
  // Deterministic pseudo-random tree: each span's parent is an earlier span.
  let seed = 42;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const spans = [];
  for (let i = 0; i < n; i++) {
    const parent = i === 0 ? null : spans[Math.floor(rnd() * Math.min(i, 200))];
    const start = parent ? parent.startTime + Math.floor(rnd() * parent.duration * 0.5) : T0;
    const duration = parent ? Math.max(1, Math.floor((parent.startTime + parent.duration - start) * rnd())) : 2_000_000;
    const tags = [{ key: 'span.kind', type: 'string', value: 'server' }];
    if (i % 500 === 10) tags.push({ key: 'rootline.anomaly', type: 'bool', value: true }, { key: 'rootline.baseline_ms', type: 'float64', value: duration / 4000 });
    if (i % 700 === 3) tags.push({ key: 'error', type: 'bool', value: true });
    spans.push({
      traceID: 'big',
      spanID: `s${i}`,
      operationName: `op-${i % 37}`,
      references: parent ? [{ refType: 'CHILD_OF', traceID: 'big', spanID: parent.spanID }] : [],
      startTime: start,
      duration,
      tags,
      logs: i === 10 ? [{ timestamp: start + 5, fields: [{ key: 'event', value: 'retry' }] }] : [],
      processID: `p${i % 5}`,
    });
  }
  const processes = {};
  for (let p = 0; p < 5; p++) processes[`p${p}`] = { serviceName: `svc-${p}`, tags: [{ key: 'host.name', value: 'mock' }] };
  return { traceID: 'big', spans, processes, warnings: null };
}

const big = bigTrace();
const s10 = big.spans[10];
const artifacts = [
  {
    id: 'a1', kind: 'cpu', mediaType: 'application/vnd.google.protobuf+gzip', fileName: 'cpu-4242.pb.gz', sha256: '00', size: 123456,
    host: 'mock', service: 'svc-0', pid: 4242, start: (T0 - 5_000_000) * 1000, end: (T0 + 4_000_000) * 1000, created: T0 * 1000,
    partial: false, captureId: 'c1', attributes: { samples: '812' }, spans: [{ traceID: 'big', spanID: 's10' }], url: '/api/v1/artifacts/a1',
  },
];
const flame = (spanOnly) => ({
  artifactId: 'a1', type: 'cpu', unit: 'nanoseconds', samplesTotal: 812, samplesKept: spanOnly ? 90 : 812, valueTotal: 100,
  root: {
    name: 'root', value: spanOnly ? 90 : 812,
    children: [
      { name: 'main.handle', value: spanOnly ? 80 : 600, children: [{ name: 'db.Query', value: spanOnly ? 70 : 400 }, { name: 'json.Marshal', value: 150 }] },
      { name: 'runtime.gcBgMarkWorker', value: spanOnly ? 10 : 200 },
    ],
  },
});

const env = (data) => ({ data, total: Array.isArray(data) ? data.length : 0, limit: 0, offset: 0, errors: null });
const routes = [
  [/^\/api\/services$/, () => env(['svc-0', 'svc-1', 'svc-2', 'svc-3', 'svc-4'])],
  [/^\/api\/services\/[^/]+\/operations$/, () => env(['op-1', 'op-2'])],
  [/^\/api\/traces$/, () => env([big])],
  [/^\/api\/traces\/big$/, () => env([big])],
  [/^\/api\/v1\/traces\/big\/artifacts$/, () => artifacts],
  [/^\/api\/v1\/artifacts\/a1\/flamegraph$/, (u) => flame(u.searchParams.has('start'))],
  [/^\/api\/v1\/anomalies$/, () => big.spans.filter((s) => s.tags.some((t) => t.key === 'rootline.anomaly')).map((s) => ({
    traceID: 'big', spanID: s.spanID, service: big.processes[s.processID].serviceName, operation: s.operationName, start: s.startTime * 1000,
    durationNs: s.duration * 1000, baselineNs: s.duration * 250, threshold: 3, artifacts: s === s10 ? [{ id: 'a1', kind: 'cpu' }] : [],
    evidence: s === s10 ? 'captured' : 'pending',
  })).reverse()],
];

const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css' };
createServer(async (req, res) => {
  const u = new URL(req.url ?? '/', 'http://localhost');
  for (const [re, f] of routes) {
    if (re.test(u.pathname)) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(f(u)));
      return;
    }
  }
  if (u.pathname.startsWith('/api/')) {
    res.writeHead(404, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ data: null, errors: [{ code: 404, msg: 'trace not found' }] }));
    return;
  }
  const file = normalize(join(dist, u.pathname === '/' ? 'index.html' : u.pathname));
  try {
    if (!file.startsWith(dist)) throw new Error('outside dist');
    const body = await readFile(file);
    res.writeHead(200, { 'Content-Type': types[extname(file)] ?? 'application/octet-stream' });
    res.end(body);
  } catch {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(await readFile(join(dist, 'index.html')));
  }
}).listen(port, '127.0.0.1', () => console.log(`mock API and UI on http://127.0.0.1:${port}`));
