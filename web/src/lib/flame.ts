import type { FlameNode } from './types';

/**
 * Helpers over the flame tree of /api/v1/artifacts/{id}/flamegraph, which is
 * d3-flame-graph's format: {name, value, children}, a node's value including
 * its children's.
 */

/** flameStats counts nodes and the deepest level (root = 1). Iterative. */
export function flameStats(root: FlameNode | null | undefined): { nodes: number; depth: number } {
  if (!root) return { nodes: 0, depth: 0 };
  let nodes = 0;
  let depth = 0;
  const stack: [FlameNode, number][] = [[root, 1]];
  while (stack.length > 0) {
    const [n, d] = stack.pop()!;
    nodes++;
    depth = Math.max(depth, d);
    for (const c of n.children ?? []) stack.push([c, d + 1]);
  }
  return { nodes, depth };
}

/** selfValue is a node's own value: its value less its children's. */
export function selfValue(n: FlameNode): number {
  let kids = 0;
  for (const c of n.children ?? []) kids += c.value;
  return Math.max(0, n.value - kids);
}

/**
 * topFrames returns the frames with the most self value over the whole tree,
 * summed by name, largest first — a text summary beside the graph.
 */
export function topFrames(root: FlameNode | null | undefined, limit = 10): { name: string; self: number }[] {
  if (!root) return [];
  const sums = new Map<string, number>();
  const stack: FlameNode[] = [root];
  while (stack.length > 0) {
    const n = stack.pop()!;
    const s = selfValue(n);
    if (s > 0 && n !== root) sums.set(n.name, (sums.get(n.name) ?? 0) + s);
    for (const c of n.children ?? []) stack.push(c);
  }
  return [...sums]
    .map(([name, self]) => ({ name, self }))
    .sort((a, b) => b.self - a.self || a.name.localeCompare(b.name))
    .slice(0, limit);
}

/**
 * pruneFlame drops nodes smaller than minFraction of the root's value, so a
 * huge profile stays cheap to draw; the dropped value stays in the parent's
 * total and shows as self time.
 */
export function pruneFlame(root: FlameNode, minFraction: number): FlameNode {
  const min = root.value * minFraction;
  const copy = (n: FlameNode): FlameNode => {
    const kids = (n.children ?? []).filter((c) => c.value >= min);
    return kids.length > 0 ? { name: n.name, value: n.value, children: kids.map(copy) } : { name: n.name, value: n.value };
  };
  return copy(root);
}

/** A window in Unix ns, as decimal strings: Unix ns exceed 2^53, so numbers would round. */
export interface NsWindow {
  start: string;
  end: string;
}

/** flameURL builds the flame-graph request for the whole window or only ns. */
export function flameURL(artifactId: string, ns?: NsWindow): string {
  const base = `/api/v1/artifacts/${encodeURIComponent(artifactId)}/flamegraph`;
  if (!ns) return base;
  const q = new URLSearchParams({ start: ns.start, end: ns.end });
  return `${base}?${q.toString()}`;
}

/** spanWindowNs converts a span's µs start and duration to a Unix ns window, exactly. */
export function spanWindowNs(startUs: number, durationUs: number): NsWindow {
  const s = BigInt(Math.floor(startUs));
  const e = BigInt(Math.ceil(startUs + durationUs));
  return { start: (s * 1000n).toString(), end: (e * 1000n).toString() };
}

/**
 * spanThreadIds returns the OS thread ids a span ran on, from its tags:
 * OpenTelemetry's `thread.id` (set by instrumented runtimes) and Rootline's
 * `rootline.thread.ids` (comma-separated, from thread↔request records).
 */
export function spanThreadIds(tags: { key: string; value: unknown }[] | null | undefined): string[] {
  const out = new Set<string>();
  for (const t of tags ?? []) {
    if (t.key !== 'thread.id' && t.key !== 'rootline.thread.ids') continue;
    for (const v of String(t.value).split(',')) {
      const id = v.trim();
      if (/^[1-9][0-9]*$/.test(id)) out.add(id);
    }
  }
  return [...out];
}

/** isPprof mirrors the server's check (internal/query/handlers_flame.go isPprof). */
export function isPprof(mediaType: string, fileName: string): boolean {
  return mediaType.includes('protobuf') || fileName.endsWith('.pb.gz') || fileName.endsWith('.pprof');
}

/** FlameFilter narrows a flame graph to some threads and/or a time window (Unix ns or RFC 3339). */
export interface FlameFilter {
  tid?: string[];
  start?: string;
  end?: string;
}

function filterQuery(f: FlameFilter): URLSearchParams {
  const q = new URLSearchParams();
  const tids = (f.tid ?? []).flatMap((t) => t.split(',')).map((t) => t.trim()).filter(Boolean);
  if (tids.length > 0) q.set('tid', tids.join(','));
  if (f.start) q.set('start', f.start);
  if (f.end) q.set('end', f.end);
  return q;
}

/** flameFilterURL is the flame-graph API request for an artifact with optional filters. */
export function flameFilterURL(artifactId: string, f: FlameFilter): string {
  const base = `/api/v1/artifacts/${encodeURIComponent(artifactId)}/flamegraph`;
  const q = filterQuery(f).toString();
  return q ? `${base}?${q}` : base;
}

/** flamePagePath is the UI route of the full-page flame graph: /flame/<id>?tid=&start=&end=. */
export function flamePagePath(artifactId: string, f: FlameFilter = {}): string {
  const q = filterQuery(f).toString();
  return `/flame/${encodeURIComponent(artifactId)}${q ? `?${q}` : ''}`;
}

/** flameFilterFromParams reads the flame page's URL query. */
export function flameFilterFromParams(p: URLSearchParams): FlameFilter {
  const f: FlameFilter = {};
  const tid = p.getAll('tid').filter(Boolean);
  if (tid.length > 0) f.tid = tid;
  const start = p.get('start');
  const end = p.get('end');
  if (start) f.start = start;
  if (end) f.end = end;
  return f;
}

/** artifactURL is the raw file of an artifact (the download). */
export function artifactURL(artifactId: string): string {
  return `/api/v1/artifacts/${encodeURIComponent(artifactId)}`;
}

/**
 * flameMatches counts the frames whose name contains term (case-insensitive)
 * and the share of the root's value under them, counting nested matches once.
 */
export function flameMatches(root: FlameNode | null | undefined, term: string): { frames: number; value: number; fraction: number } {
  const t = term.trim().toLowerCase();
  if (!root || !t) return { frames: 0, value: 0, fraction: 0 };
  let frames = 0;
  let value = 0;
  const stack: [FlameNode, boolean][] = [[root, false]];
  while (stack.length > 0) {
    const [n, under] = stack.pop()!;
    const hit = n.name.toLowerCase().includes(t);
    if (hit) frames++;
    if (hit && !under) value += n.value;
    for (const c of n.children ?? []) stack.push([c, under || hit]);
  }
  return { frames, value, fraction: root.value > 0 ? value / root.value : 0 };
}
