// Types and drawing helpers of the metrics view: the server's kernel-metric
// timeline (GET /api/v1/metrics/timeline) and CriticalMetrics analysis (GET
// /api/v1/critical-metrics), docs/api.md.

import type { Incident } from './incidents';
import type { Anomaly } from './types';

export interface TimelineMetric {
  metric: string;
  /** "s" (durations), "By" (bytes) or "1" (events). */
  unit: string;
  /** "mean" (per event), "sum/s" or "count/s". */
  signal: string;
  values: (number | null)[];
  events: number[];
  bounds?: number[];
  buckets?: (number[] | null)[];
}

export interface TimelineContainer {
  service: string;
  container: string;
  sidecar: boolean;
  metrics: TimelineMetric[] | null;
}

export interface Timeline {
  from: string; // RFC 3339
  to: string;
  step: string;
  stepSeconds: number;
  intervals: number;
  containers: TimelineContainer[];
}

export interface ClusterMember {
  metric: string;
  sbd: number;
}

export interface Cluster {
  members: ClusterMember[];
  centroid: number[];
  representative: string;
}

export interface MetricInfo {
  metric: string;
  signal: string;
  eventsPerSecond: number;
  costNsPerSecond: number;
}

export interface Group {
  role: 'app' | 'sidecar';
  containers: string[];
  metrics: MetricInfo[] | null;
  flat?: string[] | null;
  k: number;
  clusters: Cluster[] | null;
  critical: string[];
  off: string[];
  costAllNsPerSecond: number;
  costCriticalNsPerSecond: number;
}

export interface KSTest {
  metric: string;
  sample: string;
  d: number;
  p: number;
  different: boolean;
}

export interface ServiceAnalysis {
  service: string;
  app?: Group;
  sidecar?: Group;
  ks?: KSTest[] | null;
  ksNote?: string;
  error?: string;
}

export interface CriticalReport {
  from: string;
  to: string;
  step: string;
  intervals: number;
  criterion: string;
  services: ServiceAnalysis[] | null;
  critical: Record<string, string[]>;
}

/** groupOf is the analysis group a container belongs to (undefined: not analysed). */
export function groupOf(report: CriticalReport | null, service: string, container: TimelineContainer): Group | undefined {
  const s = report?.services?.find((x) => x.service === service);
  if (!s) return undefined;
  const g = container.sidecar ? s.sidecar : s.app;
  return g && g.containers.includes(container.container) ? g : undefined;
}

/** shownMetrics is what the view draws: every metric, or the critical ones (all when none are known). */
export function shownMetrics(metrics: TimelineMetric[], critical: string[] | undefined, all: boolean): TimelineMetric[] {
  if (all || !critical || critical.length === 0) return metrics;
  return metrics.filter((m) => critical.includes(m.metric));
}

/** formatValue prints a metric's value with its unit: 1.2 ms, 3.4 KiB/s, 12 /s. */
export function formatValue(v: number | null | undefined, unit: string, signal: string): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (unit === 's') {
    const a = Math.abs(v);
    if (a === 0) return '0 s';
    if (a < 1e-6) return `${round(v * 1e9)} ns`;
    if (a < 1e-3) return `${round(v * 1e6)} µs`;
    if (a < 1) return `${round(v * 1e3)} ms`;
    return `${round(v)} s`;
  }
  const per = signal === 'mean' ? '' : '/s';
  if (unit === 'By') {
    const units = ['B', 'KiB', 'MiB', 'GiB'];
    let i = 0;
    let x = v;
    while (Math.abs(x) >= 1024 && i < units.length - 1) {
      x /= 1024;
      i++;
    }
    return `${round(x)} ${units[i]}${per}`;
  }
  return `${round(v)}${per ? ' /s' : ''}`;
}

function round(v: number): string {
  const a = Math.abs(v);
  const r = a >= 100 ? Math.round(v) : a >= 10 ? Math.round(v * 10) / 10 : Math.round(v * 100) / 100;
  return String(r);
}

/**
 * linePath is an SVG path of values over width × height (the first interval
 * at x = 0, each interval one step wide, its value at the middle); a null
 * value breaks the line. The scale starts at zero: these are rates and
 * latencies, and a floor above zero would magnify noise.
 */
export function linePath(values: (number | null)[], width: number, height: number): { d: string; max: number } {
  let max = 0;
  for (const v of values) if (v !== null && Number.isFinite(v)) max = Math.max(max, v);
  const n = values.length;
  if (n === 0) return { d: '', max };
  const step = width / n;
  const parts: string[] = [];
  let pen = false;
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      pen = false;
      return;
    }
    const x = (i + 0.5) * step;
    const y = max > 0 ? height - (v / max) * height : height;
    parts.push(`${pen ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`);
    pen = true;
  });
  return { d: parts.join(''), max };
}

export interface HeatCell {
  /** interval index and bucket row (0 = the lowest bucket of the rows shown). */
  i: number;
  row: number;
  count: number;
  /** 0…1: the share of the interval's events in this bucket. */
  shade: number;
}

/**
 * heatStrip lays a histogram metric out as a heat map: one column per
 * interval, one row per bucket between the lowest and the highest bucket
 * that ever held an event. A cell's shade is its share of its interval's
 * events, so quiet intervals stay as readable as busy ones.
 */
export function heatStrip(m: TimelineMetric): { cells: HeatCell[]; rows: number; lo: number; hi: number } {
  const buckets = m.buckets ?? [];
  let lo = Infinity;
  let hi = -Infinity;
  for (const b of buckets) {
    b?.forEach((c, j) => {
      if (c > 0) {
        lo = Math.min(lo, j);
        hi = Math.max(hi, j);
      }
    });
  }
  if (!Number.isFinite(lo)) return { cells: [], rows: 0, lo: 0, hi: -1 };
  const cells: HeatCell[] = [];
  buckets.forEach((b, i) => {
    if (!b) return;
    const total = b.reduce((a, c) => a + Math.max(c, 0), 0);
    if (total <= 0) return;
    for (let j = lo; j <= hi; j++) {
      const c = b[j] ?? 0;
      if (c > 0) cells.push({ i, row: j - lo, count: c, shade: c / total });
    }
  });
  return { cells, rows: hi - lo + 1, lo, hi };
}

/** bucketLabel names bucket j of a histogram: "≤ 1 ms", or "> 2 s" for the last. */
export function bucketLabel(m: TimelineMetric, j: number): string {
  const b = m.bounds ?? [];
  if (j < b.length) return `≤ ${formatValue(b[j], m.unit, 'mean')}`;
  return `> ${formatValue(b[b.length - 1], m.unit, 'mean')}`;
}

export interface Band {
  id: string;
  /** 0…1 of the window. */
  x: number;
  w: number;
  label: string;
  open: boolean;
}

/**
 * incidentBands are the incidents of service (its entry point, or the
 * culprit its verdict names) that overlap [fromMs, toMs], as shares of the
 * window; an open incident runs to the window's end.
 */
export function incidentBands(incidents: Incident[], service: string, fromMs: number, toMs: number): Band[] {
  const span = toMs - fromMs;
  if (span <= 0) return [];
  const out: Band[] = [];
  for (const inc of incidents) {
    if (inc.entryService !== service && inc.verdict?.service !== service) continue;
    const a = inc.start / 1e6;
    const b = inc.end ? inc.end / 1e6 : toMs;
    if (b < fromMs || a > toMs) continue;
    const x = (Math.max(a, fromMs) - fromMs) / span;
    const w = Math.max((Math.min(b, toMs) - Math.max(a, fromMs)) / span, 0.004);
    const verdict = inc.verdict?.service ? `${inc.verdict.service}: ${inc.verdict.cause}` : 'no verdict yet';
    out.push({ id: inc.id, x, w, label: `${inc.entry} — ${verdict}`, open: inc.state === 'open' });
  }
  return out;
}

export interface Tick {
  x: number;
  anomaly: Anomaly;
}

/** anomalyTicks places the service's anomalous spans in [fromMs, toMs] on the window (0…1). */
export function anomalyTicks(anomalies: Anomaly[], service: string, fromMs: number, toMs: number): Tick[] {
  const span = toMs - fromMs;
  if (span <= 0) return [];
  return anomalies
    .filter((a) => a.service === service && a.start / 1e6 >= fromMs && a.start / 1e6 <= toMs)
    .map((a) => ({ x: (a.start / 1e6 - fromMs) / span, anomaly: a }));
}

export const ranges = ['5m', '15m', '1h', '6h', '24h'];

/** rangeMs is a range's length: "15m" → 900000 (the view's own choices only). */
export function rangeMs(r: string): number {
  const m = /^(\d+)([mh])$/.exec(r);
  if (!m) return 3600e3;
  return Number(m[1]) * (m[2] === 'h' ? 3600e3 : 60e3);
}

/**
 * analysisStep is the grid step the view asks the analysis for: about 100
 * intervals over the range, whole seconds, at least one. The analysis' cost
 * grows with the cube of the series' length; 100 intervals keep the shapes
 * and answer in seconds.
 */
export function analysisStep(rangeMillis: number): string {
  return `${Math.max(1, Math.round(rangeMillis / 100 / 1000))}s`;
}
