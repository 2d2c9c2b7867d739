import { describe, expect, it } from 'vitest';
import { layoutPath, segmentTitle, shares, stateColor, trimmedNote, VERDICT_WAITS, type CPSpanPath } from './critpath';

const ms = 1_000_000;
const path: CPSpanPath = {
  traceId: 't1',
  spanId: 's1',
  service: 'app',
  operation: 'GET /lock',
  start: 0,
  end: 100 * ms,
  ms: 100,
  states: { running: 60, runqueue: 0, lock: 0, unknown: 40 },
  waits: { running: 20, lock: 80 },
  blockedBy: [{ traceId: 't2', spanId: 's2', service: 'app', operation: 'POST /hold', ms: 80, wait: 'lock' }],
  threads: [
    { tid: 102, pid: 100, comm: 'app', ms: 80 },
    { tid: 101, pid: 100, comm: 'app', ms: 20 },
  ],
  segments: [
    { tid: 101, start: 0, end: 10 * ms, ms: 10, state: 'running' },
    { tid: 102, start: 10 * ms, end: 90 * ms, ms: 80, state: 'running', wait: 'lock', traceId: 't2', spanId: 's2', blocking: true },
    { tid: 101, start: 90 * ms, end: 100 * ms, ms: 10, state: 'running', syscall: 'futex' },
  ],
  arrows: [
    { from: 102, to: 101, ts: 90 * ms },
    { from: 999, to: 101, ts: 50 * ms }, // a waker without a row
  ],
};

describe('layoutPath', () => {
  it('puts the own thread first, one row per thread, segments in their rows', () => {
    const l = layoutPath(path);
    expect(l.rows.map((r) => [r.tid, r.own])).toEqual([
      [101, true],
      [102, false],
    ]);
    expect(l.rows[1]!.label).toBe('app 102 (pid 100)');
    expect(l.rects.map((r) => [r.row, r.left, r.width])).toEqual([
      [0, 0, 10],
      [1, 10, 80],
      [0, 90, 10],
    ]);
  });
  it('draws arrows between rows at the wakeup time, and drops those without a row', () => {
    expect(layoutPath(path).arrows).toEqual([{ x: 90, fromRow: 1, toRow: 0 }]);
  });
  it('keeps tiny segments visible and clamps to the span', () => {
    const p = { ...path, segments: [{ tid: 1, start: -5, end: 0, ms: 0, state: 'sleep' }], arrows: [] };
    const r = layoutPath(p).rects[0]!;
    expect(r.left).toBe(0);
    expect(r.width).toBeGreaterThan(0);
  });
});

describe('shares', () => {
  it('lists non-zero states, largest first, with percentages', () => {
    expect(shares(path.waits, path.ms)).toEqual([
      { state: 'lock', ms: 80, pct: 80 },
      { state: 'running', ms: 20, pct: 20 },
    ]);
    expect(shares(undefined, 10)).toEqual([]);
    // A verdict's waits have keys beyond the states: run-queue time behind the process's own threads, untraced calls.
    expect(shares({ running: 6, 'runqueue-own': 3, runqueue: 1, downstream: 0 }, 10, VERDICT_WAITS)).toEqual([
      { state: 'running', ms: 6, pct: 60 },
      { state: 'runqueue-own', ms: 3, pct: 30 },
      { state: 'runqueue', ms: 1, pct: 10 },
    ]);
    expect(stateColor('runqueue-own')).not.toEqual(stateColor('unknown'));
  });
});

describe('stateColor and titles', () => {
  it('colours unknown states as unknown', () => {
    expect(stateColor('bogus')).toBe(stateColor('unknown'));
  });
  it('says what blocked a segment', () => {
    expect(segmentTitle(path.segments[1]!, 0)).toContain('blocked by span s2');
    expect(segmentTitle(path.segments[2]!, 0)).toContain('in futex');
    expect(segmentTitle({ tid: 1, start: 0, end: ms, ms: 1, state: 'runqueue', ownQueueMs: 0.25 }, 0)).toContain("0.250 ms of it behind its own process's threads");
    expect(segmentTitle({ tid: 1, start: 0, end: ms, ms: 1, state: 'runqueue', ownQueueMs: 0.25, gcQueueMs: 0.1 }, 0)).toContain("0.100 ms of those behind its garbage collector's");
    expect(
      segmentTitle({ tid: 1, start: 0, end: ms, ms: 1, state: 'runqueue', heldBy: [{ pid: 7, comm: 'sh', ms: 0.9 }] }, 0),
    ).toContain('the CPU ran sh (pid 7) 0.900 ms');
  });
});

describe('trimmedNote', () => {
  it('says nothing of a whole path', () => {
    expect(trimmedNote({ states: {} })).toBeUndefined();
    expect(trimmedNote({ states: {}, trimmed: {} })).toBeUndefined();
  });
  it('says what a bounded path left out', () => {
    expect(trimmedNote({ states: {}, trimmed: { segments: 7209, segmentsMs: 412.25, arrows: 300, blockedBy: 3 } })).toBe(
      'The server stored this long path without its 7209 shortest segments (412.3 ms), 300 wakeup arrows, 3 more blocking requests; the state totals are over the whole path.',
    );
  });
});
