import { describe, expect, it } from 'vitest';
import { decodeSearch, defaultSearch, encodeSearch, isDuration, parseTags, rangeError, searchAPIQuery, type SearchState } from './urlstate';

describe('search URL state', () => {
  it('round-trips every field', () => {
    const s: SearchState = {
      service: 'checkout',
      operation: 'GET /cart',
      lookback: '2d',
      start: '2026-11-22T01:00',
      end: '2026-11-22T02:30:15',
      minDuration: '100ms',
      maxDuration: '2s',
      tags: 'http.status_code=500',
      anomalous: true,
      limit: 50,
      sort: 'longest',
    };
    expect(decodeSearch(new URLSearchParams(encodeSearch(s).toString()))).toEqual(s);
  });
  it('leaves defaults out of the URL', () => {
    expect(encodeSearch(defaultSearch).toString()).toBe('');
    expect(encodeSearch({ ...defaultSearch, service: 'a' }).toString()).toBe('service=a');
  });
  it('falls back to defaults for bad values', () => {
    const s = decodeSearch(new URLSearchParams('lookback=forever&limit=-3&sort=random&minDuration=fast&anomalous=yes'));
    expect(s).toEqual(defaultSearch);
  });
  it('validates durations', () => {
    expect(isDuration('')).toBe(true);
    expect(isDuration('1.5s')).toBe(true);
    expect(isDuration('100')).toBe(false);
  });
});

describe('parseTags', () => {
  it('reads key=value pairs, quoted values included', () => {
    expect(parseTags('error=true  http.route="/a b" empty=')).toEqual({ tags: { error: 'true', 'http.route': '/a b', empty: '' } });
  });
  it('reports a token without =', () => {
    expect(parseTags('error').error).toMatch(/key=value/);
  });
});

describe('custom time range', () => {
  it('drops malformed times from the URL', () => {
    const s = decodeSearch(new URLSearchParams('start=yesterday&end=2026-11-22T02:30'));
    expect(s.start).toBe('');
    expect(s.end).toBe('2026-11-22T02:30');
  });
  it('sends start/end in µs instead of the lookback', () => {
    const q = searchAPIQuery({ ...defaultSearch, service: 'a', start: '2026-11-22T01:00', end: '2026-11-22T02:00' });
    expect(q.get('lookback')).toBeNull();
    expect(Number(q.get('end')) - Number(q.get('start'))).toBe(3600 * 1e6);
    expect(Number(q.get('start'))).toBe(new Date('2026-11-22T01:00').getTime() * 1000);
  });
  it('keeps the lookback when only an end is given, and rejects an inverted range', () => {
    const q = searchAPIQuery({ ...defaultSearch, service: 'a', end: '2026-11-22T02:00' });
    expect(q.get('lookback')).toBe('1h');
    expect(rangeError({ ...defaultSearch, start: '2026-11-22T02:00', end: '2026-11-22T01:00' })).not.toBe('');
    expect(rangeError({ ...defaultSearch, start: '2026-11-22T01:00', end: '2026-11-22T02:00' })).toBe('');
  });
});

describe('searchAPIQuery', () => {
  it('builds the /api/traces query', () => {
    const q = searchAPIQuery({ ...defaultSearch, service: 'checkout', tags: 'error=true', anomalous: true, minDuration: '1ms' });
    expect(Object.fromEntries(q)).toEqual({
      service: 'checkout',
      lookback: '1h',
      minDuration: '1ms',
      tags: '{"error":"true"}',
      anomalous: 'true',
      limit: '20',
    });
  });
});
