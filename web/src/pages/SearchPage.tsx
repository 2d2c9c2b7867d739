import { useMemo, useState } from 'react';
import { Link, useSearchParams } from 'react-router';
import { api } from '../lib/api';
import { sortSummaries, summarizeTrace } from '../lib/spantree';
import { formatDuration, formatTime } from '../lib/timescale';
import { useFetch } from '../lib/useFetch';
import {
  decodeSearch,
  defaultSearch,
  encodeSearch,
  isDuration,
  lookbacks,
  rangeError,
  parseTags,
  searchAPIQuery,
  type SearchState,
  type SortOrder,
} from '../lib/urlstate';

export function SearchPage() {
  const [params, setParams] = useSearchParams();
  const applied = useMemo(() => decodeSearch(params), [params]);
  // The form edits a draft; Search writes it to the URL, which runs the query.
  const [draft, setDraft] = useState<SearchState>(applied);
  const [draftKey, setDraftKey] = useState(params.toString());
  if (draftKey !== params.toString()) {
    // The URL changed (back button, shared link): show what it says.
    setDraftKey(params.toString());
    setDraft(applied);
  }

  const services = useFetch('services', (s) => api.services(s));
  const operations = useFetch(draft.service ? `ops:${draft.service}` : null, (s) => api.operations(draft.service, s));

  const tagsError = parseTags(draft.tags).error;
  const durError = !isDuration(draft.minDuration) || !isDuration(draft.maxDuration) ? 'durations are written like 100ms, 1.5s, 2m' : undefined;
  const formError = tagsError ?? durError ?? (rangeError(draft) || undefined);

  const set = <K extends keyof SearchState>(k: K, v: SearchState[K]) => setDraft((d) => ({ ...d, [k]: v }));
  const submit = (e: React.FormEvent) => {
    e.preventDefault();
    if (formError || !draft.service) return;
    setParams(encodeSearch(draft));
  };

  return (
    <div className="search">
      <form className="searchform" onSubmit={submit}>
        <label>
          Service
          {services.status === 'loading' && <span className="muted"> loading…</span>}
          {services.status === 'error' && <span className="error"> {services.error}</span>}
          <select value={draft.service} onChange={(e) => setDraft((d) => ({ ...d, service: e.target.value, operation: '' }))}>
            <option value="">— choose a service —</option>
            {services.status === 'ok' && services.data.map((s) => <option key={s}>{s}</option>)}
            {draft.service && services.status === 'ok' && !services.data.includes(draft.service) && <option>{draft.service}</option>}
          </select>
          {services.status === 'ok' && services.data.length === 0 && <span className="muted">No services yet: no spans have arrived.</span>}
        </label>
        <label>
          Operation
          <select value={draft.operation} onChange={(e) => set('operation', e.target.value)} disabled={!draft.service}>
            <option value="">all</option>
            {operations.status === 'ok' && operations.data.map((o) => <option key={o}>{o}</option>)}
            {draft.operation && operations.status === 'ok' && !operations.data.includes(draft.operation) && <option>{draft.operation}</option>}
          </select>
          {draft.service && operations.status === 'error' && <span className="error">{operations.error}</span>}
        </label>
        <label>
          Lookback
          <select value={draft.lookback} onChange={(e) => set('lookback', e.target.value)}>
            {(lookbacks.includes(draft.lookback) ? lookbacks : [draft.lookback, ...lookbacks]).map((l) => (
              <option key={l} value={l}>
                last {l}
              </option>
            ))}
          </select>
        </label>
        <label>
          From (optional)
          <input type="datetime-local" value={draft.start} onChange={(e) => set('start', e.target.value)} aria-label="custom range start" />
        </label>
        <label>
          To (optional)
          <input type="datetime-local" value={draft.end} onChange={(e) => set('end', e.target.value)} aria-label="custom range end" />
        </label>
        {(draft.start || draft.end) && (
          <p className="muted">
            {draft.start ? 'The custom range replaces the lookback.' : 'Without a start, the lookback counts back from the end.'}{' '}
            <button type="button" onClick={() => setDraft({ ...draft, start: '', end: '' })}>
              clear range
            </button>
          </p>
        )}
        <div className="row">
          <label>
            Min duration
            <input value={draft.minDuration} placeholder="e.g. 100ms" onChange={(e) => set('minDuration', e.target.value)} size={8} />
          </label>
          <label>
            Max duration
            <input value={draft.maxDuration} placeholder="e.g. 2s" onChange={(e) => set('maxDuration', e.target.value)} size={8} />
          </label>
        </div>
        <label>
          Tags
          <input value={draft.tags} placeholder='http.status_code=500 error=true' onChange={(e) => set('tags', e.target.value)} />
        </label>
        <label className="check">
          <input type="checkbox" checked={draft.anomalous} onChange={(e) => set('anomalous', e.target.checked)} /> Anomalous only
        </label>
        <label>
          Limit
          <input type="number" min={1} max={1500} value={draft.limit} onChange={(e) => set('limit', Math.max(1, Number(e.target.value) || defaultSearch.limit))} />
        </label>
        {formError && <p className="error">{formError}</p>}
        <button type="submit" disabled={!draft.service || !!formError}>
          Find traces
        </button>
      </form>
      <section className="results">
        {applied.service ? <Results state={applied} onSort={(sort) => setParams(encodeSearch({ ...applied, sort }))} /> : <p className="notice">Choose a service and press “Find traces”.</p>}
      </section>
    </div>
  );
}

function Results({ state, onSort }: { state: SearchState; onSort: (s: SortOrder) => void }) {
  const q = searchAPIQuery(state);
  const res = useFetch(q.toString(), (s) => api.searchTraces(q, s));
  const summaries = useMemo(() => (res.status === 'ok' ? res.data.map(summarizeTrace) : []), [res]);
  const sorted = useMemo(() => sortSummaries(summaries, state.sort), [summaries, state.sort]);
  if (res.status === 'loading') return <p className="notice">Searching…</p>;
  if (res.status === 'error') return <p className="notice error">Search failed: {res.error}</p>;
  if (sorted.length === 0) return <p className="notice">No traces match. Widen the lookback or loosen the filters.</p>;
  const maxDur = Math.max(...sorted.map((t) => t.duration), 1);
  return (
    <>
      <div className="resulthead">
        <span>
          {sorted.length} trace{sorted.length === 1 ? '' : 's'}
        </span>
        <label>
          Sort{' '}
          <select value={state.sort} onChange={(e) => onSort(e.target.value as SortOrder)}>
            <option value="newest">newest first</option>
            <option value="oldest">oldest first</option>
            <option value="longest">longest first</option>
            <option value="shortest">shortest first</option>
          </select>
        </label>
      </div>
      <ol className="resultlist">
        {sorted.map((t) => (
          <li key={t.traceID}>
            <Link to={`/trace/${encodeURIComponent(t.traceID)}`} className="result">
              <div className="resulttitle">
                <strong>
                  {t.rootService}: {t.rootName}
                </strong>
                <span className="traceid">{t.traceID.slice(0, 12)}</span>
                {t.anomalies > 0 && <span className="badge anomaly">{t.anomalies} anomal{t.anomalies === 1 ? 'y' : 'ies'}</span>}
                {t.errors > 0 && <span className="badge error">{t.errors} error{t.errors === 1 ? '' : 's'}</span>}
                <span className="grow" />
                <span>{formatDuration(t.duration)}</span>
              </div>
              <div className="durbar">
                <div style={{ width: `${Math.max(0.5, (t.duration / maxDur) * 100)}%` }} />
              </div>
              <div className="resultmeta">
                <span>{t.spanCount} spans</span>
                <span>{formatTime(t.start)}</span>
                <span className="services">
                  {t.services.map((s) => (
                    <span key={s.name} className="svc">
                      {s.name} ({s.count})
                    </span>
                  ))}
                </span>
              </div>
            </Link>
          </li>
        ))}
      </ol>
    </>
  );
}
