import { describe, expect, it } from 'vitest';
import { buildSpanTree, parentID, sortSummaries, summarizeTrace, visibleRows } from './spantree';
import type { JaegerSpan, JaegerTrace } from './types';

const T = 'trace1';

function span(id: string, start: number, duration: number, parent?: string, extra: Partial<JaegerSpan> = {}): JaegerSpan {
  return {
    traceID: T,
    spanID: id,
    operationName: `op-${id}`,
    references: parent ? [{ refType: 'CHILD_OF', traceID: T, spanID: parent }] : [],
    startTime: start,
    duration,
    tags: [],
    logs: [],
    processID: 'p1',
    ...extra,
  };
}

function trace(spans: JaegerSpan[]): JaegerTrace {
  return { traceID: T, spans, processes: { p1: { serviceName: 'checkout', tags: [] }, p2: { serviceName: 'db', tags: [] } } };
}

const ids = (nodes: { span: JaegerSpan }[]) => nodes.map((n) => n.span.spanID);

describe('buildSpanTree', () => {
  it('hangs children under their CHILD_OF parent, sorted by start', () => {
    const t = buildSpanTree(trace([span('c2', 300, 10, 'root'), span('root', 100, 1000), span('c1', 200, 50, 'root'), span('g', 210, 5, 'c1')]));
    expect(ids(t.roots)).toEqual(['root']);
    expect(ids(t.roots[0]!.children)).toEqual(['c1', 'c2']);
    expect(t.byId.get('g')!.depth).toBe(2);
    expect(t.start).toBe(100);
    expect(t.end).toBe(1100);
  });

  it('makes spans with a missing parent roots marked orphan', () => {
    const t = buildSpanTree(trace([span('a', 100, 10), span('b', 50, 10, 'missing')]));
    expect(ids(t.roots)).toEqual(['b', 'a']);
    expect(t.byId.get('b')!.orphan).toBe(true);
    expect(t.byId.get('a')!.orphan).toBe(false);
  });

  it('prefers CHILD_OF over FOLLOWS_FROM and falls back to FOLLOWS_FROM', () => {
    const s = span('x', 10, 1, undefined, {
      references: [
        { refType: 'FOLLOWS_FROM', traceID: T, spanID: 'f' },
        { refType: 'CHILD_OF', traceID: T, spanID: 'c' },
      ],
    });
    expect(parentID(s)).toBe('c');
    expect(parentID({ ...s, references: [{ refType: 'FOLLOWS_FROM', traceID: T, spanID: 'f' }] })).toBe('f');
    expect(parentID({ ...s, references: null })).toBeUndefined();
  });

  it('breaks reference cycles instead of losing spans', () => {
    const t = buildSpanTree(trace([span('a', 1, 1, 'b'), span('b', 2, 1, 'a')]));
    expect(t.byId.size).toBe(2);
    expect(visibleRows(t.roots, new Set()).length).toBe(2);
  });

  it('reads service, anomaly, baseline and error from tags', () => {
    const t = buildSpanTree(
      trace([
        span('a', 1, 900, undefined, {
          processID: 'p2',
          tags: [
            { key: 'rootline.anomaly', type: 'bool', value: true },
            { key: 'rootline.baseline_ms', type: 'float64', value: 0.25 },
          ],
        }),
        span('b', 2, 1, 'a', { tags: [{ key: 'error', type: 'bool', value: true }] }),
        span('c', 3, 1, 'a', { tags: [{ key: 'rootline.baseline_ms', value: 3 }] }),
      ]),
    );
    const a = t.byId.get('a')!;
    expect(a.service).toBe('db');
    expect(a.anomalous).toBe(true);
    expect(a.baselineMs).toBe(0.25);
    expect(t.byId.get('b')!.error).toBe(true);
    expect(t.byId.get('c')!.baselineMs).toBeNull(); // not anomalous
    expect(t.services).toEqual(['checkout', 'db']);
  });

  it('handles an empty trace', () => {
    const t = buildSpanTree(trace([]));
    expect(t.roots).toEqual([]);
    expect(t.start).toBe(0);
    expect(t.end).toBe(0);
  });

  it('builds a deep chain without overflowing the stack', () => {
    const spans = [span('s0', 0, 100000)];
    for (let i = 1; i < 20000; i++) spans.push(span(`s${i}`, i, 1, `s${i - 1}`));
    const t = buildSpanTree(trace(spans));
    expect(t.byId.get('s19999')!.depth).toBe(19999);
    expect(visibleRows(t.roots, new Set()).length).toBe(20000);
  });
});

describe('visibleRows', () => {
  const t = buildSpanTree(trace([span('r', 0, 100), span('a', 1, 10, 'r'), span('a1', 2, 1, 'a'), span('b', 20, 10, 'r')]));
  it('flattens pre-order', () => {
    expect(ids(visibleRows(t.roots, new Set()))).toEqual(['r', 'a', 'a1', 'b']);
  });
  it('hides descendants of collapsed spans', () => {
    expect(ids(visibleRows(t.roots, new Set(['a'])))).toEqual(['r', 'a', 'b']);
    expect(ids(visibleRows(t.roots, new Set(['r'])))).toEqual(['r']);
  });
});

describe('summarizeTrace', () => {
  it('counts spans, services, anomalies and errors', () => {
    const s = summarizeTrace(
      trace([
        span('r', 100, 500),
        span('a', 120, 10, 'r', { processID: 'p2', tags: [{ key: 'rootline.anomaly', value: 'true' }] }),
        span('b', 130, 10, 'r', { tags: [{ key: 'otel.status_code', value: 'ERROR' }] }),
      ]),
    );
    expect(s).toMatchObject({ rootName: 'op-r', rootService: 'checkout', start: 100, duration: 500, spanCount: 3, anomalies: 1, errors: 1 });
    expect(s.services).toEqual([
      { name: 'checkout', count: 2 },
      { name: 'db', count: 1 },
    ]);
  });

  it('sorts summaries by time or duration', () => {
    const mk = (id: string, start: number, duration: number) => ({ ...summarizeTrace(trace([])), traceID: id, start, duration });
    const list = [mk('a', 1, 30), mk('b', 3, 10), mk('c', 2, 20)];
    expect(sortSummaries(list, 'newest').map((s) => s.traceID)).toEqual(['b', 'c', 'a']);
    expect(sortSummaries(list, 'oldest').map((s) => s.traceID)).toEqual(['a', 'c', 'b']);
    expect(sortSummaries(list, 'longest').map((s) => s.traceID)).toEqual(['a', 'c', 'b']);
    expect(sortSummaries(list, 'shortest').map((s) => s.traceID)).toEqual(['b', 'c', 'a']);
    expect(list.map((s) => s.traceID)).toEqual(['a', 'b', 'c']); // input untouched
  });
});
