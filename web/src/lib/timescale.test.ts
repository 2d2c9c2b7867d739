import { describe, expect, it } from 'vitest';
import { formatBytes, formatDuration, labelPlacement, ticks, timeScale } from './timescale';

describe('timeScale', () => {
  const s = timeScale(1000, 2000);
  it('maps µs to percent of the trace', () => {
    expect(s.pct(1000)).toBe(0);
    expect(s.pct(1500)).toBe(50);
    expect(s.pct(2000)).toBe(100);
    expect(s.pct(500)).toBe(0); // clamped
    expect(s.pct(3000)).toBe(100);
  });
  it('gives bars a left and a width', () => {
    expect(s.bar(1250, 500)).toEqual({ left: 25, width: 50 });
  });
  it('keeps tiny bars visible and inside the track', () => {
    expect(s.bar(1500, 0).width).toBe(0.2);
    const end = s.bar(2000, 0);
    expect(end.left + end.width).toBeLessThanOrEqual(100);
  });
  it('handles a zero-length trace', () => {
    const z = timeScale(5, 5);
    expect(z.pct(5)).toBe(0);
    expect(z.bar(5, 0)).toEqual({ left: 0, width: 0.2 });
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0µs'],
    [850, '850µs'],
    [1500, '1.5ms'],
    [12345, '12.3ms'],
    [4_560_000, '4.56s'],
    [123_000_000, '2m 3s'],
  ])('%d µs → %s', (us, want) => expect(formatDuration(us)).toBe(want));
});

describe('ticks and bytes', () => {
  it('spreads tick labels over the duration', () => {
    expect(ticks(4000, 4).map((t) => t.label)).toEqual(['0µs', '1ms', '2ms', '3ms', '4ms']);
    expect(ticks(4000, 4).map((t) => t.pct)).toEqual([0, 25, 50, 75, 100]);
  });
  it('formats sizes', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(5 * 1024 * 1024)).toBe('5 MiB');
  });
});

describe('labelPlacement', () => {
  it('puts the label after a bar with room to its right', () => {
    expect(labelPlacement(10, 20)).toEqual({ side: 'after', pct: 30.5 });
  });
  it('puts it before a bar that ends near the right edge', () => {
    expect(labelPlacement(60, 35)).toEqual({ side: 'before', pct: 40.5 });
    expect(labelPlacement(40, 30).side).toBe('before');
  });
  it('puts it inside a bar that spans the trace', () => {
    expect(labelPlacement(0, 100)).toEqual({ side: 'inside', pct: 0.5 });
  });
});
