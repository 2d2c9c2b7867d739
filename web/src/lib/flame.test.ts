import { describe, expect, it } from 'vitest';
import { artifactURL, flameFilterFromParams, flameFilterURL, flameMatches, flamePagePath, flameStats, flameURL, isPprof, pruneFlame, selfValue, spanThreadIds, spanWindowNs, topFrames } from './flame';
import type { FlameNode } from './types';

const tree: FlameNode = {
  name: 'root',
  value: 100,
  children: [
    { name: 'main', value: 90, children: [{ name: 'work', value: 60 }, { name: 'gc', value: 20 }] },
    { name: 'gc', value: 10 },
  ],
};

describe('flame helpers', () => {
  it('counts nodes and depth', () => {
    expect(flameStats(tree)).toEqual({ nodes: 5, depth: 3 });
    expect(flameStats(null)).toEqual({ nodes: 0, depth: 0 });
  });
  it('computes self value', () => {
    expect(selfValue(tree.children![0]!)).toBe(10);
    expect(selfValue({ name: 'x', value: 5 })).toBe(5);
  });
  it('ranks frames by summed self value', () => {
    expect(topFrames(tree, 3)).toEqual([
      { name: 'work', self: 60 },
      { name: 'gc', self: 30 },
      { name: 'main', self: 10 },
    ]);
  });
  it('prunes small frames', () => {
    const p = pruneFlame(tree, 0.15);
    expect(flameStats(p).nodes).toBe(4);
    expect(p.children!.map((c) => c.name)).toEqual(['main']);
    expect(tree.children!.length).toBe(2); // input untouched
  });
  it('converts a span to an exact Unix ns window', () => {
    // 1763771000123456 µs: ×1000 exceeds 2^53, so this must not go through a double.
    expect(spanWindowNs(1763771000123456, 789)).toEqual({ start: '1763771000123456000', end: '1763771000124245000' });
  });
  it('builds the flame-graph URL', () => {
    expect(flameURL('a/b')).toBe('/api/v1/artifacts/a%2Fb/flamegraph');
    expect(flameURL('x', { start: '10', end: '20' })).toBe('/api/v1/artifacts/x/flamegraph?start=10&end=20');
  });
  it('recognises pprof like the server', () => {
    expect(isPprof('application/vnd.google.protobuf+gzip', 'x')).toBe(true);
    expect(isPprof('application/octet-stream', 'cpu.pb.gz')).toBe(true);
    expect(isPprof('application/octet-stream', 'rec.jfr')).toBe(false);
  });
});

describe('flame page helpers', () => {
  it('builds the API and page URLs with filters', () => {
    expect(flameFilterURL('a/b', {})).toBe('/api/v1/artifacts/a%2Fb/flamegraph');
    expect(flameFilterURL('x', { tid: ['1,2', ' 3 '], start: '10', end: '20' })).toBe('/api/v1/artifacts/x/flamegraph?tid=1%2C2%2C3&start=10&end=20');
    expect(flamePagePath('x')).toBe('/flame/x');
    expect(flamePagePath('x', { start: '5', end: '9' })).toBe('/flame/x?start=5&end=9');
    expect(artifactURL('x y')).toBe('/api/v1/artifacts/x%20y');
  });
  it('reads the page query back', () => {
    const f = flameFilterFromParams(new URLSearchParams('tid=4&tid=5&start=1&end='));
    expect(f).toEqual({ tid: ['4', '5'], start: '1' });
    expect(flameFilterURL('x', f)).toBe('/api/v1/artifacts/x/flamegraph?tid=4%2C5&start=1');
    expect(flameFilterFromParams(new URLSearchParams(''))).toEqual({});
  });
  it('counts search matches once per subtree', () => {
    expect(flameMatches(tree, 'GC')).toEqual({ frames: 2, value: 30, fraction: 0.3 });
    expect(flameMatches(tree, 'main')).toEqual({ frames: 1, value: 90, fraction: 0.9 });
    // "a" is in main, and nothing else but the nested ones are under main.
    expect(flameMatches(tree, 'a').value).toBe(90);
    expect(flameMatches(tree, ' ')).toEqual({ frames: 0, value: 0, fraction: 0 });
    expect(flameMatches(null, 'x').frames).toBe(0);
  });
});

describe('spanThreadIds', () => {
  it('reads thread.id and rootline.thread.ids, ignoring junk', () => {
    expect(spanThreadIds(undefined)).toEqual([]);
    expect(spanThreadIds([{ key: 'thread.id', value: 4242 }])).toEqual(['4242']);
    expect(spanThreadIds([{ key: 'rootline.thread.ids', value: '7, 8,x,0' }, { key: 'thread.id', value: 7 }, { key: 'http.method', value: 9 }])).toEqual(['7', '8']);
  });
});
