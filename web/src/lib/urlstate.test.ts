import { describe, expect, it } from 'vitest';
import { decodeSearch, defaultSearch, encodeSearch, isDuration, parseTags, searchAPIQuery, type SearchState } from './urlstate';

describe('search URL state', () => {
  it('round-trips every field', () => {
    const s: SearchState = {
      service: 'checkout',
      operation: 'GET /cart',
      lookback: '2d',
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
