// The critical path of a span (GET /api/v1/traces/{id}/critical-path,
// docs/api.md) and how the trace page lays it out. Times are Unix ns,
// durations ms.

export const STATES = ['running', 'runqueue', 'throttled', 'steal', 'lock', 'gil', 'disk', 'network', 'sleep', 'memory', 'gc', 'unknown'] as const;
export type State = (typeof STATES)[number];

export interface CPBlockedBy {
  traceId: string;
  spanId: string;
  service: string;
  operation: string;
  ms: number;
  wait?: string;
}

export interface CPThread {
  tid: number;
  pid: number;
  comm: string;
  ms: number;
}

export interface CPSegment {
  tid: number;
  start: number;
  end: number;
  ms: number;
  state: string;
  wait?: string;
  traceId?: string;
  spanId?: string;
  blocking?: boolean;
  syscall?: string;
  device?: string;
  /** Of a runqueue segment: the time the CPU it waited for ran other threads of its own process. */
  ownQueueMs?: number;
  /** Of ownQueueMs: the time the CPU ran its process's garbage-collector threads. */
  gcQueueMs?: number;
  /** Of a runqueue segment: who the snapshot saw run on the CPU it waited for, by process, longest first. */
  heldBy?: CPHolder[];
}

/** CPHolder is a process that held a CPU a path's thread waited for. */
export interface CPHolder {
  pid: number;
  comm: string;
  ms: number;
  /** One of the captured processes (else another program of the node). */
  target?: boolean;
  /** One of Rootline's own processes (the agent, rootline run, a server on the node): what observing cost. */
  observer?: boolean;
}

export interface CPArrow {
  from: number;
  to: number;
  ts: number;
}

export interface CPSpanPath {
  traceId: string;
  spanId: string;
  service: string;
  operation: string;
  start: number;
  end: number;
  ms: number;
  states: Record<string, number>;
  waits: Record<string, number>;
  blockedBy: CPBlockedBy[];
  threads: CPThread[];
  segments: CPSegment[];
  arrows: CPArrow[];
  snapshot?: string;
  lost?: number;
  /** What the stored path left out beyond the server's bounds (its shortest segments). */
  trimmed?: CPTrimmed;
}

export interface CPTrimmed {
  segments?: number;
  segmentsMs?: number;
  arrows?: number;
  blockedBy?: number;
}

/** trimmedNote says what a stored path left out, or undefined when it is whole. */
export function trimmedNote(p: Pick<CPSpanPath, 'trimmed' | 'states'>): string | undefined {
  const t = p.trimmed;
  if (!t) return undefined;
  const parts: string[] = [];
  if (t.segments) parts.push(`its ${t.segments} shortest segments (${(t.segmentsMs ?? 0).toFixed(1)} ms)`);
  if (t.arrows) parts.push(`${t.arrows} wakeup arrows`);
  if (t.blockedBy) parts.push(`${t.blockedBy} more blocking requests`);
  if (parts.length === 0) return undefined;
  return `The server stored this long path without ${parts.join(', ')}; the state totals are over the whole path.`;
}

export interface CPTrace {
  traceId: string;
  spans: CPSpanPath[];
  shared: unknown[];
  notes?: string[];
}

/** STATE_COLORS follow the critical-path colours of trace tools: green runs, orange waits for a CPU. */
export const STATE_COLORS: Record<State, string> = {
  running: '#2e7d32',
  runqueue: '#f59e0b',
  throttled: '#b45309',
  steal: '#fcd34d',
  lock: '#7c3aed',
  gil: '#a78bfa',
  disk: '#0e7490',
  network: '#2563eb',
  sleep: '#9ca3af',
  memory: '#db2777',
  gc: '#b91c1c',
  unknown: '#d1d5db',
};

/** Keys a verdict's waits have beside the states: run-queue time behind the process's own threads, calls without spans. */
export const VERDICT_WAIT_COLORS: Record<string, string> = {
  'runqueue-own': '#65a30d',
  downstream: '#475569',
};

/** VERDICT_WAITS are the keys of a verdict's waits, in display order. */
export const VERDICT_WAITS: readonly string[] = ['running', 'runqueue-own', ...STATES.slice(1), 'downstream'];

export function stateColor(s: string): string {
  return (STATE_COLORS as Record<string, string>)[s] ?? VERDICT_WAIT_COLORS[s] ?? STATE_COLORS.unknown;
}

export interface Share {
  state: string;
  ms: number;
  pct: number;
}

/** shares lists the non-zero states of a summary, largest first, with their share of total. */
export function shares(m: Record<string, number> | null | undefined, total: number, keys: readonly string[] = STATES): Share[] {
  if (!m) return [];
  return keys
    .filter((s) => (m[s] ?? 0) > 0)
    .map((s) => ({ state: s, ms: m[s]!, pct: total > 0 ? (100 * m[s]!) / total : 0 }))
    .sort((a, b) => b.ms - a.ms);
}

export interface RowLayout {
  tid: number;
  label: string;
  /** own: the span's own thread (its first segment's). */
  own: boolean;
}

export interface RectLayout {
  row: number;
  /** left and width in % of the span. */
  left: number;
  width: number;
  seg: CPSegment;
}

export interface ArrowLayout {
  /** x in % of the span. */
  x: number;
  fromRow: number;
  toRow: number;
}

export interface PathLayout {
  rows: RowLayout[];
  rects: RectLayout[];
  arrows: ArrowLayout[];
}

/**
 * layoutPath puts a path on a per-thread timeline: one row per thread, the
 * span's own thread first, the others in the order the path reaches them;
 * each segment a rectangle in its thread's row; each wakeup an arrow from
 * the waker's row to the woken thread's at its time. Arrows from threads
 * the path never shows (no row) are left out.
 */
export function layoutPath(p: CPSpanPath): PathLayout {
  const rowOf = new Map<number, number>();
  const rows: RowLayout[] = [];
  const comm = new Map(p.threads.map((t) => [t.tid, t]));
  for (const s of p.segments) {
    if (rowOf.has(s.tid)) continue;
    rowOf.set(s.tid, rows.length);
    const t = comm.get(s.tid);
    rows.push({ tid: s.tid, label: t ? `${t.comm} ${s.tid}${t.pid ? ` (pid ${t.pid})` : ''}` : String(s.tid), own: rows.length === 0 });
  }
  const span = p.end - p.start;
  const pct = (ns: number) => (span > 0 ? Math.min(100, Math.max(0, ((ns - p.start) / span) * 100)) : 0);
  const rects = p.segments.map((seg) => {
    const left = pct(seg.start);
    return { row: rowOf.get(seg.tid)!, left, width: Math.max(pct(seg.end) - left, 0.15), seg };
  });
  const arrows: ArrowLayout[] = [];
  for (const a of p.arrows) {
    const f = rowOf.get(a.from);
    const t = rowOf.get(a.to);
    if (f === undefined || t === undefined || f === t) continue;
    arrows.push({ x: pct(a.ts), fromRow: f, toRow: t });
  }
  return { rows, rects, arrows };
}

/** segmentTitle is a segment's tooltip. */
export function segmentTitle(s: CPSegment, spanStart: number): string {
  const parts = [`${s.state} ${s.ms.toFixed(3)} ms at +${((s.start - spanStart) / 1e6).toFixed(3)} ms on thread ${s.tid}`];
  if (s.syscall) parts.push(`in ${s.syscall}${s.device ? ` on ${s.device}` : ''}`);
  if (s.wait) parts.push(`the span's thread waiting on ${s.wait}`);
  if (s.blocking && s.spanId) parts.push(`blocked by span ${s.spanId}`);
  if (s.ownQueueMs) parts.push(`${s.ownQueueMs.toFixed(3)} ms of it behind its own process's threads`);
  if (s.gcQueueMs) parts.push(`${s.gcQueueMs.toFixed(3)} ms of those behind its garbage collector's`);
  if (s.heldBy?.length) {
    parts.push('the CPU ran ' + s.heldBy.map((h) => `${h.comm} (pid ${h.pid}${h.observer ? ', Rootline' : ''}) ${h.ms.toFixed(3)} ms`).join(', '));
  }
  return parts.join(' · ');
}
