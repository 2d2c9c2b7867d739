import { useEffect, useState } from 'react';

export type FetchState<T> =
  | { status: 'loading' }
  | { status: 'error'; error: string }
  | { status: 'ok'; data: T };

type Keyed<T> = FetchState<T> & { key: string | null };

/**
 * useFetch runs load whenever key changes, aborting the previous request.
 * The answer is tagged with its key, so the render right after a key change
 * shows "loading" rather than the previous key's data. key null means
 * "nothing to load" (loading forever): callers render something else then.
 */
export function useFetch<T>(key: string | null, load: (signal: AbortSignal) => Promise<T>): FetchState<T> {
  const [state, setState] = useState<Keyed<T>>({ status: 'loading', key: null });
  useEffect(() => {
    if (key === null) return;
    const ctl = new AbortController();
    load(ctl.signal).then(
      (data) => {
        if (!ctl.signal.aborted) setState({ status: 'ok', data, key });
      },
      (e: unknown) => {
        if (!ctl.signal.aborted) setState({ status: 'error', error: e instanceof Error ? e.message : String(e), key });
      },
    );
    return () => ctl.abort();
    // load is a fresh closure each render; key alone says when to reload.
  }, [key]);
  return state.key === key && key !== null ? state : { status: 'loading' };
}
