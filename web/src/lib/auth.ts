/**
 * The API token of a server that asks for one (ROOTLINE_AUTH_TOKEN). It is
 * asked for once, on the first 401, kept in sessionStorage (so it goes with
 * the tab, not to disk), and sent as "Authorization: Bearer" on every API
 * call to this server — never to another origin.
 */

const KEY = 'rootline.token';

// memo keeps the token where sessionStorage is unavailable.
let memo: string | null = null;

function storage(): Storage | undefined {
  try {
    return globalThis.sessionStorage;
  } catch {
    return undefined;
  }
}

/** token returns the saved token, or null. */
export function token(): string | null {
  try {
    return storage()?.getItem(KEY) ?? null;
  } catch {
    return null;
  }
}

/** setToken saves t, or forgets the token when t is null. */
export function setToken(t: string | null) {
  try {
    if (t) storage()?.setItem(KEY, t);
    else storage()?.removeItem(KEY);
  } catch {
    /* storage disabled: the token lasts until the page reloads */
  }
  memo = t;
}

/** sameOrigin reports whether url (relative or absolute) is on this page's server. */
export function sameOrigin(url: string): boolean {
  const here = globalThis.location?.href;
  if (!here) return !/^[a-z][a-z0-9+.-]*:/i.test(url); // no page (tests): only relative URLs
  try {
    return new URL(url, here).origin === new URL(here).origin;
  } catch {
    return false;
  }
}

/** authHeaders returns the Authorization header for url, when a token is saved and url is this server's. */
export function authHeaders(url: string): Record<string, string> {
  const t = token() ?? memo;
  return t && sameOrigin(url) ? { Authorization: `Bearer ${t}` } : {};
}

/** Why a token is asked for: none was sent, or the one sent was refused. */
export type TokenReason = 'missing' | 'invalid';

type Asker = (reason: TokenReason) => Promise<string | null>;

let asker: Asker | null = null;
let pending: Promise<string | null> | null = null;

/**
 * onTokenRequest registers the UI that asks the user for a token (it
 * resolves with the token, or null when the user declines). It returns the
 * function that unregisters it.
 */
export function onTokenRequest(fn: Asker): () => void {
  asker = fn;
  return () => {
    if (asker === fn) asker = null;
  };
}

/**
 * askToken asks for a token once for all the requests that got a 401 at the
 * same time, saves it, and returns it (null: none was given).
 */
export function askToken(reason: TokenReason): Promise<string | null> {
  if (!asker) return Promise.resolve(null);
  if (!pending) {
    pending = asker(reason)
      .then((t) => {
        const v = t?.trim() || null;
        if (v) setToken(v);
        return v;
      })
      .finally(() => {
        pending = null;
      });
  }
  return pending;
}

/**
 * fetchAuthorized fetches url with the token, asking for one on a 401 and
 * trying again, until the server accepts it or the user declines.
 */
export async function fetchAuthorized(url: string, init: RequestInit = {}): Promise<Response> {
  for (;;) {
    const used = token() ?? memo;
    const res = await fetch(url, { ...init, headers: { ...(init.headers as Record<string, string> | undefined), ...authHeaders(url) } });
    if (res.status !== 401 || !sameOrigin(url)) return res;
    const now = token() ?? memo;
    if (now !== used) continue; // another request got a token meanwhile
    if (used) setToken(null); // the server refused it
    const t = await askToken(used ? 'invalid' : 'missing');
    if (!t) return res;
  }
}

/**
 * openAuthorized follows a link to an artifact of this server when the link
 * cannot carry the token itself: the content is fetched with the token and
 * handed to the browser as a blob: URL — downloaded as fileName, or given to
 * open (which may put it inside another URL, as speedscope's profileURL).
 * Without a token, or for another origin, the plain link is used.
 */
export async function openAuthorized(url: string, opts: { fileName?: string; open?: (blobURL: string) => void }) {
  const res = await fetchAuthorized(url);
  if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
  const blobURL = URL.createObjectURL(await res.blob());
  if (opts.open) {
    opts.open(blobURL);
  } else {
    const a = document.createElement('a');
    a.href = blobURL;
    a.download = opts.fileName || url.split('/').pop() || 'artifact';
    document.body.appendChild(a);
    a.click();
    a.remove();
  }
  // A page opened with the URL has read it by then.
  setTimeout(() => URL.revokeObjectURL(blobURL), 60_000);
}
