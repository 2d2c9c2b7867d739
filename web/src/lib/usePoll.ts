import { useEffect, useState } from 'react';

/**
 * usePoll loads with load now and every ms milliseconds until paused or
 * unmounted, aborting a load still running when the next starts. It keeps
 * the last data through errors, so a refresh that fails does not blank the
 * page.
 */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, ms: number, paused = false) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [updated, setUpdated] = useState<Date | null>(null);
  useEffect(() => {
    if (paused) return;
    let ctl = new AbortController();
    const run = () => {
      ctl.abort();
      ctl = new AbortController();
      const c = ctl;
      load(c.signal).then(
        (d) => {
          if (c.signal.aborted) return;
          setData(d);
          setError(null);
          setUpdated(new Date());
        },
        (e: unknown) => {
          if (!c.signal.aborted) setError(e instanceof Error ? e.message : String(e));
        },
      );
    };
    run();
    const t = setInterval(run, ms);
    return () => {
      clearInterval(t);
      ctl.abort();
    };
    // load is a module-level API call in its callers: it never changes.
  }, [paused, ms]);
  return { data, error, updated };
}
