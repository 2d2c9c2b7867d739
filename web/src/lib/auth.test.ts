import { afterEach, describe, expect, it, vi } from 'vitest';
import { authHeaders, fetchAuthorized, onTokenRequest, setToken, type TokenReason } from './auth';

// fakeServer answers 401 unless the request carries "Bearer <want>".
function fakeServer(want: string) {
  return vi.fn(async (_url: string, init?: RequestInit) => {
    const auth = (init?.headers as Record<string, string> | undefined)?.Authorization;
    return new Response(auth === `Bearer ${want}` ? '{"ok":true}' : 'unauthorized', { status: auth === `Bearer ${want}` ? 200 : 401 });
  });
}

afterEach(() => {
  vi.unstubAllGlobals();
  setToken(null);
});

describe('authHeaders', () => {
  it('sends a saved token to this server only', () => {
    expect(authHeaders('/api/services')).toEqual({});
    setToken('s3cret');
    expect(authHeaders('/api/services')).toEqual({ Authorization: 'Bearer s3cret' });
    expect(authHeaders('https://elsewhere.example/artifact')).toEqual({});
  });
});

describe('fetchAuthorized', () => {
  it('asks once on a 401, then sends the token', async () => {
    const f = fakeServer('s3cret');
    vi.stubGlobal('fetch', f);
    const asked: TokenReason[] = [];
    const off = onTokenRequest(async (reason) => {
      asked.push(reason);
      return 's3cret';
    });
    try {
      const [a, b] = await Promise.all([fetchAuthorized('/api/services'), fetchAuthorized('/api/traces')]);
      expect([a.status, b.status]).toEqual([200, 200]);
      expect(asked).toEqual(['missing']);
      expect((await fetchAuthorized('/api/v1/anomalies')).status).toBe(200);
      expect(asked).toHaveLength(1);
    } finally {
      off();
    }
  });
  it('asks again when the token is refused', async () => {
    vi.stubGlobal('fetch', fakeServer('right'));
    setToken('wrong');
    const asked: TokenReason[] = [];
    const off = onTokenRequest(async (reason) => {
      asked.push(reason);
      return 'right';
    });
    try {
      expect((await fetchAuthorized('/api/services')).status).toBe(200);
      expect(asked).toEqual(['invalid']);
    } finally {
      off();
    }
  });
  it('gives the 401 back when the user declines', async () => {
    vi.stubGlobal('fetch', fakeServer('right'));
    const off = onTokenRequest(async () => null);
    try {
      expect((await fetchAuthorized('/api/services')).status).toBe(401);
    } finally {
      off();
    }
  });
});
