import { describe, expect, it } from 'vitest';
import { analysisStep, anomalyTicks, bucketLabel, formatValue, groupOf, heatStrip, incidentBands, linePath, rangeMs, shownMetrics, type CriticalReport, type TimelineMetric } from './metrics';
import type { Incident } from './incidents';
import type { Anomaly } from './types';

const runq: TimelineMetric = {
  metric: 'runq', unit: 's', signal: 'mean',
  values: [0.001, null, 0.004],
  events: [10, 0, 4],
  bounds: [0.001, 0.002, 0.004],
  buckets: [[0, 10, 0, 0], null, [0, 0, 1, 3]],
};

describe('linePath', () => {
  it('scales from zero and breaks at gaps', () => {
    const { d, max } = linePath(runq.values, 300, 100);
    expect(max).toBe(0.004);
    expect(d).toBe('M50.0,75.0M250.0,0.0');
  });
  it('draws nothing for no values', () => {
    expect(linePath([], 100, 10).d).toBe('');
  });
});

describe('heatStrip', () => {
  it('keeps the rows between the lowest and the highest used bucket, shaded by share', () => {
    const h = heatStrip(runq);
    expect([h.lo, h.hi, h.rows]).toEqual([1, 3, 3]);
    expect(h.cells).toEqual([
      { i: 0, row: 0, count: 10, shade: 1 },
      { i: 2, row: 1, count: 1, shade: 0.25 },
      { i: 2, row: 2, count: 3, shade: 0.75 },
    ]);
  });
  it('is empty for a counter', () => {
    expect(heatStrip({ ...runq, buckets: undefined }).rows).toBe(0);
  });
});

describe('formatValue and bucketLabel', () => {
  it('prints units', () => {
    expect(formatValue(0.0015, 's', 'mean')).toBe('1.5 ms');
    expect(formatValue(2.5e-7, 's', 'mean')).toBe('250 ns');
    expect(formatValue(2048, 'By', 'sum/s')).toBe('2 KiB/s');
    expect(formatValue(12, '1', 'count/s')).toBe('12 /s');
    expect(formatValue(null, '1', 'count/s')).toBe('–');
    expect(bucketLabel(runq, 0)).toBe('≤ 1 ms');
    expect(bucketLabel(runq, 3)).toBe('> 4 ms');
  });
});

const report: CriticalReport = {
  from: '', to: '', step: '1s', intervals: 10, criterion: '', critical: { cart: ['runq'] },
  services: [
    {
      service: 'cart',
      app: { role: 'app', containers: ['/cart'], metrics: [], k: 2, clusters: [], critical: ['runq'], off: ['oncpu'], costAllNsPerSecond: 1, costCriticalNsPerSecond: 1 },
      sidecar: { role: 'sidecar', containers: ['/cart.sidecar'], metrics: [], k: 2, clusters: [], critical: ['tcp_send_bytes'], off: [], costAllNsPerSecond: 1, costCriticalNsPerSecond: 1 },
    },
  ],
};

describe('groupOf and shownMetrics', () => {
  it('finds the group of a container and filters to its critical metrics', () => {
    const app = groupOf(report, 'cart', { service: 'cart', container: '/cart', sidecar: false, metrics: [] });
    expect(app?.critical).toEqual(['runq']);
    expect(groupOf(report, 'cart', { service: 'cart', container: '/cart.sidecar', sidecar: true, metrics: [] })?.critical).toEqual(['tcp_send_bytes']);
    expect(groupOf(report, 'cart', { service: 'cart', container: '/other', sidecar: false, metrics: [] })).toBeUndefined();
    expect(groupOf(null, 'cart', { service: 'cart', container: '/cart', sidecar: false, metrics: [] })).toBeUndefined();
    const oncpu = { ...runq, metric: 'oncpu' };
    expect(shownMetrics([runq, oncpu], app?.critical, false)).toEqual([runq]);
    expect(shownMetrics([runq, oncpu], app?.critical, true)).toEqual([runq, oncpu]);
    expect(shownMetrics([runq, oncpu], undefined, false)).toEqual([runq, oncpu]);
  });
});

describe('incidentBands and anomalyTicks', () => {
  const inc = (over: Partial<Incident>): Incident => ({
    id: 'i1', entry: 'cart GET /', entryService: 'cart', entryOperation: 'GET /', state: 'closed', start: 1_000_000e6, end: 1_010_000e6,
    opened: 0, requests: 10, anomalous: 5, baselineMs: 1, rule: '', ...over,
  });
  it('places the service\'s incidents on the window', () => {
    const bands = incidentBands([inc({}), inc({ id: 'i2', entryService: 'db' }), inc({ id: 'i3', entryService: 'front', verdict: { service: 'cart', cause: 'lock' } as Incident['verdict'], state: 'open', end: undefined })], 'cart', 995_000, 1_015_000);
    expect(bands.map((b) => [b.id, b.x, b.w, b.open])).toEqual([
      ['i1', 0.25, 0.5, false],
      ['i3', 0.25, 0.75, true],
    ]);
    expect(bands[1]?.label).toBe('cart GET / — cart: lock');
    expect(incidentBands([inc({})], 'cart', 1_020_000, 1_030_000)).toEqual([]);
  });
  it('places anomalies', () => {
    const a = { service: 'cart', start: 1_005_000e6 } as Anomaly;
    expect(anomalyTicks([a, { ...a, service: 'db' }], 'cart', 1_000_000, 1_010_000).map((t) => t.x)).toEqual([0.5]);
  });
  it('reads ranges', () => {
    expect(rangeMs('15m')).toBe(900e3);
    expect(rangeMs('6h')).toBe(6 * 3600e3);
    expect(analysisStep(rangeMs('15m'))).toBe('9s');
    expect(analysisStep(rangeMs('5m'))).toBe('3s');
    expect(analysisStep(10e3)).toBe('1s');
  });
});
