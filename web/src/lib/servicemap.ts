import dagre from '@dagrejs/dagre';
import { defaultSearch, encodeSearch } from './urlstate';

/** One edge of GET /api/dependencies: calls from parent to child; anomalies = anomalous child spans. */
export interface DependencyLink {
  parent: string;
  child: string;
  callCount: number;
  anomalies?: number;
}

export interface MapNode {
  id: string;
  /** Calls into this service from other services, and how many were anomalous. */
  callsIn: number;
  anomaliesIn: number;
  callsOut: number;
  /** anomaliesIn / callsIn, or null for a service nobody calls (a root). */
  rate: number | null;
}

export interface MapEdge {
  parent: string;
  child: string;
  callCount: number;
  anomalies: number;
  rate: number;
}

export interface ServiceMap {
  nodes: MapNode[];
  edges: MapEdge[];
}

/**
 * shapeServiceMap turns dependency links into nodes and edges: duplicate
 * edges are summed, self-calls dropped, rates computed; sorted by name.
 */
export function shapeServiceMap(links: DependencyLink[] | null | undefined): ServiceMap {
  const edges = new Map<string, MapEdge>();
  const nodes = new Map<string, MapNode>();
  const node = (id: string) => {
    let n = nodes.get(id);
    if (!n) {
      n = { id, callsIn: 0, anomaliesIn: 0, callsOut: 0, rate: null };
      nodes.set(id, n);
    }
    return n;
  };
  for (const l of links ?? []) {
    if (!l.parent || !l.child) continue;
    const calls = Math.max(0, l.callCount || 0);
    const anomalies = Math.min(calls, Math.max(0, l.anomalies ?? 0));
    node(l.parent).callsOut += calls;
    const c = node(l.child);
    if (l.parent === l.child) continue;
    c.callsIn += calls;
    c.anomaliesIn += anomalies;
    const key = `${l.parent}\u0000${l.child}`;
    const e = edges.get(key);
    if (e) {
      e.callCount += calls;
      e.anomalies += anomalies;
    } else edges.set(key, { parent: l.parent, child: l.child, callCount: calls, anomalies, rate: 0 });
  }
  for (const e of edges.values()) e.rate = e.callCount > 0 ? e.anomalies / e.callCount : 0;
  for (const n of nodes.values()) n.rate = n.callsIn > 0 ? n.anomaliesIn / n.callsIn : null;
  const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return {
    nodes: [...nodes.values()].sort((a, b) => byName(a.id, b.id)),
    edges: [...edges.values()].sort((a, b) => byName(a.parent, b.parent) || byName(a.child, b.child)),
  };
}

/**
 * rateColor maps an anomaly rate to a colour: green at 0, through amber, to
 * red at `full` (10 % by default) and above; grey when unknown.
 */
export function rateColor(rate: number | null, full = 0.1): string {
  if (rate === null || Number.isNaN(rate)) return 'hsl(220, 10%, 60%)';
  const t = Math.min(1, Math.max(0, rate / full));
  return `hsl(${Math.round(130 * (1 - t))}, 65%, ${Math.round(42 + 4 * (1 - t))}%)`;
}

/** One row of GET /api/v1/services/latency: recent p95 against the detector's baseline. */
export interface ServiceLatency {
  service: string;
  spans: number;
  p95Ns: number;
  baselineNs: number;
  /** p95 / baseline; 0 when either is unknown. */
  ratio: number;
}

/**
 * latencyColor maps p95 / baseline to a colour: green up to `ok` (2×: a p95
 * of twice the median is normal spread), through amber, to red at the
 * detector's threshold `bad` (3×) and above; grey when unknown.
 */
export function latencyColor(ratio: number | undefined, ok = 2, bad = 3): string {
  if (!ratio || !Number.isFinite(ratio) || ratio <= 0) return 'hsl(220, 10%, 92%)';
  const t = Math.min(1, Math.max(0, (ratio - ok) / (bad - ok)));
  return `hsl(${Math.round(130 * (1 - t))}, 70%, 90%)`;
}

/** latencyLabel describes a service's p95 against its baseline. */
export function latencyLabel(l: ServiceLatency | undefined): string {
  if (!l || l.p95Ns <= 0) return 'no recent spans';
  const ms = (ns: number) => `${(ns / 1e6).toFixed(ns < 1e7 ? 1 : 0)} ms`;
  return l.baselineNs > 0 ? `p95 ${ms(l.p95Ns)} (×${l.ratio.toFixed(1)} baseline)` : `p95 ${ms(l.p95Ns)}`;
}

export interface Laid {
  width: number;
  height: number;
  nodes: (MapNode & { x: number; y: number; w: number; h: number })[];
  edges: (MapEdge & { points: { x: number; y: number }[] })[];
}

/** layoutServiceMap places the graph left to right with dagre. */
export function layoutServiceMap(m: ServiceMap, nodeHeight = 44, charWidth = 8): Laid {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 30, ranksep: 90, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of m.nodes) g.setNode(n.id, { width: Math.max(130, n.id.length * charWidth + 30), height: nodeHeight });
  for (const e of m.edges) g.setEdge(e.parent, e.child);
  dagre.layout(g);
  const gl = g.graph();
  return {
    width: Math.ceil(gl.width ?? 0),
    height: Math.ceil(gl.height ?? 0),
    nodes: m.nodes.map((n) => {
      const p = g.node(n.id);
      return { ...n, x: p.x, y: p.y, w: p.width, h: p.height };
    }),
    edges: m.edges.map((e) => ({ ...e, points: (g.edge(e.parent, e.child)?.points ?? []).map((p: { x: number; y: number }) => ({ x: p.x, y: p.y })) })),
  };
}

/** serviceSearchPath is the search page for a service's anomalous traces. */
export function serviceSearchPath(service: string, lookback = defaultSearch.lookback): string {
  return `/search?${encodeSearch({ ...defaultSearch, service, lookback, anomalous: true }).toString()}`;
}

/** lookbackMs converts the map's lookback choice (5m, 1h, 2d…) to ms. */
export function lookbackMs(lb: string): number {
  const m = /^(\d+)(m|h|d)$/.exec(lb);
  if (!m) return 3_600_000;
  const unit = m[2] === 'm' ? 60_000 : m[2] === 'h' ? 3_600_000 : 86_400_000;
  return Number(m[1]) * unit;
}
