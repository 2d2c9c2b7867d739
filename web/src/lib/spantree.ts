import type { JaegerSpan, JaegerTrace, KeyValue } from './types';
import type { SortOrder } from './urlstate';

/** One span in the tree, with what the timeline needs precomputed. */
export interface SpanNode {
  span: JaegerSpan;
  service: string;
  depth: number;
  children: SpanNode[];
  /** True when the span's CHILD_OF parent is not in the trace. */
  orphan: boolean;
  anomalous: boolean;
  error: boolean;
  /** rootline.baseline_ms, when the span is anomalous and the tag is set. */
  baselineMs: number | null;
}

export interface SpanTree {
  roots: SpanNode[];
  byId: Map<string, SpanNode>;
  /** Earliest start and latest end over all spans, µs. */
  start: number;
  end: number;
  services: string[];
}

/** tagValue returns the value of the first tag named key, or undefined. */
export function tagValue(tags: KeyValue[] | null | undefined, key: string): unknown {
  if (!tags) return undefined;
  for (const t of tags) if (t.key === key) return t.value;
  return undefined;
}

function truthy(v: unknown): boolean {
  return v === true || v === 'true' || v === 1 || v === '1';
}

/** parentID is the span's CHILD_OF parent within the same trace, if any. */
export function parentID(span: JaegerSpan): string | undefined {
  const refs = span.references ?? [];
  const child = refs.find((r) => r.refType === 'CHILD_OF' && r.traceID === span.traceID);
  // A span with only FOLLOWS_FROM still hangs under what it follows, as Jaeger's UI does.
  return (child ?? refs.find((r) => r.traceID === span.traceID))?.spanID;
}

function byStart(a: SpanNode, b: SpanNode): number {
  return a.span.startTime - b.span.startTime || a.span.spanID.localeCompare(b.span.spanID);
}

/**
 * buildSpanTree turns a Jaeger trace into a forest: each span hangs under its
 * CHILD_OF parent, spans whose parent is missing become roots (orphan), and
 * siblings are sorted by start time. Cycles cannot hang: a span is never
 * placed under one of its own descendants.
 */
export function buildSpanTree(trace: JaegerTrace): SpanTree {
  const byId = new Map<string, SpanNode>();
  let start = Infinity;
  let end = -Infinity;
  const services = new Set<string>();
  for (const span of trace.spans) {
    if (byId.has(span.spanID)) continue; // duplicate ids: keep the first
    const service = trace.processes[span.processID]?.serviceName ?? span.processID ?? 'unknown';
    services.add(service);
    const anomalous = truthy(tagValue(span.tags, 'rootline.anomaly'));
    const baseline = Number(tagValue(span.tags, 'rootline.baseline_ms'));
    byId.set(span.spanID, {
      span,
      service,
      depth: 0,
      children: [],
      orphan: false,
      anomalous,
      error: truthy(tagValue(span.tags, 'error')) || tagValue(span.tags, 'otel.status_code') === 'ERROR',
      baselineMs: anomalous && Number.isFinite(baseline) && tagValue(span.tags, 'rootline.baseline_ms') !== undefined ? baseline : null,
    });
    start = Math.min(start, span.startTime);
    end = Math.max(end, span.startTime + span.duration);
  }
  const roots: SpanNode[] = [];
  const parentOf = new Map<SpanNode, SpanNode>();
  for (const node of byId.values()) {
    const pid = parentID(node.span);
    const parent = pid !== undefined ? byId.get(pid) : undefined;
    if (!parent || parent === node) {
      node.orphan = pid !== undefined;
      roots.push(node);
      continue;
    }
    parentOf.set(node, parent);
  }
  // Break cycles in linear time: walk up from each node until a node already
  // known to reach a root; meeting a node of the current walk closes a cycle,
  // and that node's parent link is cut to make it a root.
  const state = new Map<SpanNode, 1 | 2>(); // 1: on the current walk, 2: reaches a root
  for (const from of [...parentOf.keys()]) {
    if (state.has(from)) continue;
    const walk: SpanNode[] = [];
    let n: SpanNode | undefined = from;
    while (n && !state.has(n)) {
      state.set(n, 1);
      walk.push(n);
      n = parentOf.get(n);
    }
    if (n && state.get(n) === 1) {
      parentOf.delete(n);
      n.orphan = true;
      roots.push(n);
    }
    for (const w of walk) state.set(w, 2);
  }
  for (const [node, parent] of parentOf) parent.children.push(node);
  roots.sort(byStart);
  const stack: SpanNode[] = [...roots];
  while (stack.length > 0) {
    const n = stack.pop()!;
    n.children.sort(byStart);
    for (const c of n.children) {
      c.depth = n.depth + 1;
      stack.push(c);
    }
  }
  if (byId.size === 0) {
    start = 0;
    end = 0;
  }
  return { roots, byId, start, end, services: [...services].sort() };
}

/**
 * visibleRows flattens the tree depth-first (pre-order), skipping the
 * descendants of collapsed spans. It is iterative so deep traces cannot
 * overflow the stack.
 */
export function visibleRows(roots: SpanNode[], collapsed: ReadonlySet<string>): SpanNode[] {
  const out: SpanNode[] = [];
  const stack: SpanNode[] = [];
  for (let i = roots.length - 1; i >= 0; i--) stack.push(roots[i]!);
  while (stack.length > 0) {
    const n = stack.pop()!;
    out.push(n);
    if (collapsed.has(n.span.spanID)) continue;
    for (let i = n.children.length - 1; i >= 0; i--) stack.push(n.children[i]!);
  }
  return out;
}

/** Summary of a trace for the search results list. */
export interface TraceSummary {
  traceID: string;
  rootName: string;
  rootService: string;
  start: number; // µs
  duration: number; // µs
  spanCount: number;
  services: { name: string; count: number }[];
  anomalies: number;
  errors: number;
}

export function summarizeTrace(trace: JaegerTrace): TraceSummary {
  const tree = buildSpanTree(trace);
  const root = tree.roots.find((r) => !r.orphan) ?? tree.roots[0];
  const counts = new Map<string, number>();
  let anomalies = 0;
  let errors = 0;
  for (const n of tree.byId.values()) {
    counts.set(n.service, (counts.get(n.service) ?? 0) + 1);
    if (n.anomalous) anomalies++;
    if (n.error) errors++;
  }
  return {
    traceID: trace.traceID,
    rootName: root ? root.span.operationName : '(no spans)',
    rootService: root ? root.service : '',
    start: tree.start,
    duration: tree.end - tree.start,
    spanCount: tree.byId.size,
    services: [...counts].map(([name, count]) => ({ name, count })).sort((a, b) => a.name.localeCompare(b.name)),
    anomalies,
    errors,
  };
}

/** sortSummaries orders search results without changing the input. */
export function sortSummaries(list: readonly TraceSummary[], order: SortOrder): TraceSummary[] {
  const cmp: Record<SortOrder, (a: TraceSummary, b: TraceSummary) => number> = {
    newest: (a, b) => b.start - a.start,
    oldest: (a, b) => a.start - b.start,
    longest: (a, b) => b.duration - a.duration,
    shortest: (a, b) => a.duration - b.duration,
  };
  return [...list].sort((a, b) => cmp[order](a, b) || a.traceID.localeCompare(b.traceID));
}
