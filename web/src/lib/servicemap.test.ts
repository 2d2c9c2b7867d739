import { describe, expect, it } from 'vitest';
import { latencyColor, latencyLabel, layoutServiceMap, lookbackMs, rateColor, serviceSearchPath, shapeServiceMap } from './servicemap';

const links = [
  { parent: 'frontend', child: 'api', callCount: 100, anomalies: 5 },
  { parent: 'api', child: 'db', callCount: 300, anomalies: 0 },
  { parent: 'frontend', child: 'api', callCount: 100, anomalies: 15 }, // same edge again: summed
  { parent: 'worker', child: 'db', callCount: 100, anomalies: 30 },
  { parent: 'db', child: 'db', callCount: 7 }, // self-call: no edge
];

describe('shapeServiceMap', () => {
  const m = shapeServiceMap(links);
  it('sums duplicate edges and drops self-calls', () => {
    expect(m.edges).toEqual([
      { parent: 'api', child: 'db', callCount: 300, anomalies: 0, rate: 0 },
      { parent: 'frontend', child: 'api', callCount: 200, anomalies: 20, rate: 0.1 },
      { parent: 'worker', child: 'db', callCount: 100, anomalies: 30, rate: 0.3 },
    ]);
  });
  it('computes node rates from incoming calls; roots have none', () => {
    const byId = Object.fromEntries(m.nodes.map((n) => [n.id, n]));
    expect(m.nodes.map((n) => n.id)).toEqual(['api', 'db', 'frontend', 'worker']);
    expect(byId.api).toMatchObject({ callsIn: 200, anomaliesIn: 20, callsOut: 300, rate: 0.1 });
    expect(byId.db).toMatchObject({ callsIn: 400, anomaliesIn: 30, callsOut: 7, rate: 0.075 });
    expect(byId.frontend).toMatchObject({ callsIn: 0, callsOut: 200, rate: null });
  });
  it('tolerates empty, missing and bad input', () => {
    expect(shapeServiceMap(null)).toEqual({ nodes: [], edges: [] });
    const bad = shapeServiceMap([
      { parent: 'a', child: 'b', callCount: 2, anomalies: 9 },
      { parent: '', child: 'b', callCount: 1 },
      { parent: 'a', child: 'c', callCount: 0 },
    ]);
    expect(bad.edges.map((e) => [e.child, e.anomalies, e.rate])).toEqual([
      ['b', 2, 1],
      ['c', 0, 0],
    ]);
    expect(bad.nodes.find((n) => n.id === 'c')?.rate).toBeNull();
  });
});

describe('map helpers', () => {
  it('colours by rate', () => {
    expect(rateColor(0)).toBe('hsl(130, 65%, 46%)');
    expect(rateColor(0.1)).toBe('hsl(0, 65%, 42%)');
    expect(rateColor(0.9)).toBe(rateColor(0.1));
    expect(rateColor(0.05)).toBe('hsl(65, 65%, 44%)');
    expect(rateColor(null)).toMatch(/^hsl\(220/);
  });
  it('lays out left to right', () => {
    const l = layoutServiceMap(shapeServiceMap(links));
    const x = Object.fromEntries(l.nodes.map((n) => [n.id, n.x]));
    expect(x.frontend!).toBeLessThan(x.api!);
    expect(x.api!).toBeLessThan(x.db!);
    expect(l.width).toBeGreaterThan(0);
    expect(l.edges.every((e) => e.points.length >= 2)).toBe(true);
  });
  it('links a service to its anomalous search and converts lookbacks', () => {
    expect(serviceSearchPath('hot svc')).toBe('/search?service=hot+svc&anomalous=true');
    expect(serviceSearchPath('a', '2h')).toBe('/search?service=a&lookback=2h&anomalous=true');
    expect(lookbackMs('15m')).toBe(900_000);
    expect(lookbackMs('2d')).toBe(172_800_000);
    expect(lookbackMs('bad')).toBe(3_600_000);
  });
});

describe('latency colouring', () => {
  it('is grey when unknown, green up to 2×, red from 3×', () => {
    expect(latencyColor(undefined)).toBe('hsl(220, 10%, 92%)');
    expect(latencyColor(0)).toBe('hsl(220, 10%, 92%)');
    expect(latencyColor(1.5)).toBe('hsl(130, 70%, 90%)');
    expect(latencyColor(2.5)).toBe('hsl(65, 70%, 90%)');
    expect(latencyColor(7)).toBe('hsl(0, 70%, 90%)');
  });
  it('labels p95 against the baseline', () => {
    expect(latencyLabel(undefined)).toBe('no recent spans');
    expect(latencyLabel({ service: 'a', spans: 3, p95Ns: 40e6, baselineNs: 10e6, ratio: 4 })).toBe('p95 40 ms (×4.0 baseline)');
    expect(latencyLabel({ service: 'a', spans: 3, p95Ns: 2.5e6, baselineNs: 0, ratio: 0 })).toBe('p95 2.5 ms');
  });
});
