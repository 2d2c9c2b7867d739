import { afterEach, describe, expect, it, vi } from 'vitest';
import { api, errorMessage, getJSON } from './api';

function answer(status: number, body: unknown) {
  return vi.fn(async () => new Response(typeof body === 'string' ? body : JSON.stringify(body), { status }));
}

afterEach(() => vi.unstubAllGlobals());

describe('errorMessage', () => {
  it('reads both envelopes', () => {
    expect(errorMessage({ data: null, errors: [{ code: 400, msg: "unable to parse param 'start'" }] })).toBe("unable to parse param 'start'");
    expect(errorMessage({ code: 422, error: 'not a pprof profile' })).toBe('not a pprof profile');
    expect(errorMessage({ data: [], errors: null })).toBeUndefined();
  });
});

describe('getJSON', () => {
  it('turns an error answer into a message with the status', async () => {
    vi.stubGlobal('fetch', answer(422, { code: 422, error: 'artifact x is application/x-jfr, not a pprof profile' }));
    await expect(getJSON('/x')).rejects.toThrow('422 artifact x is application/x-jfr, not a pprof profile');
  });
  it('says a token is needed when none is given on 401', async () => {
    vi.stubGlobal('fetch', answer(401, 'unauthorized'));
    await expect(getJSON('/x')).rejects.toThrow(/401 unauthorized — this server needs its API token/);
  });
  it('says when the server cannot be reached', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => Promise.reject(new TypeError('Failed to fetch'))));
    await expect(getJSON('/x')).rejects.toThrow('cannot reach the server (Failed to fetch)');
  });
});

describe('api', () => {
  it('unwraps the Jaeger envelope and treats null data as empty', async () => {
    vi.stubGlobal('fetch', answer(200, { data: null, total: 0, errors: null }));
    await expect(api.services()).resolves.toEqual([]);
  });
  it('reports a missing trace', async () => {
    vi.stubGlobal('fetch', answer(200, { data: [], errors: null }));
    await expect(api.trace('abc')).rejects.toThrow('trace abc not found');
  });
  it('escapes path parts', async () => {
    const f = answer(200, { data: ['op'], errors: null });
    vi.stubGlobal('fetch', f);
    await api.operations('a/b c');
    expect(f).toHaveBeenCalledWith('/api/services/a%2Fb%20c/operations', expect.anything());
  });
});
