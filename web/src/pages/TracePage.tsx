import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { Link, useParams, useSearchParams } from 'react-router';
import { SpanPanel } from '../components/SpanPanel';
import { Timeline } from '../components/Timeline';
import { api } from '../lib/api';
import { verdictText } from '../lib/incidents';
import { buildSpanTree } from '../lib/spantree';
import { formatDuration, formatTime } from '../lib/timescale';
import { useFetch } from '../lib/useFetch';

export function TracePage() {
  const { traceId = '' } = useParams();
  const trace = useFetch(`trace:${traceId}`, (s) => api.trace(traceId, s));
  const artifacts = useFetch(`artifacts:${traceId}`, (s) => api.traceArtifacts(traceId, s));
  const critpaths = useFetch(`critpath:${traceId}`, (s) => api.criticalPath(traceId, s));
  const diagnosis = useFetch(`diagnosis:${traceId}`, (s) => api.diagnosis(traceId, s));
  const tree = useMemo(() => (trace.status === 'ok' ? buildSpanTree(trace.data) : null), [trace]);
  // The selected span is mirrored in the URL (?span=…) so a link can point at
  // it. Local state leads: keys arrive faster than navigations, so the URL is
  // written once a burst of moves settles, and its echo is not followed back.
  const [params, setParams] = useSearchParams();
  const urlSpan = params.get('span');
  const [selectedId, setSelectedId] = useState(urlSpan);
  const [seenUrlSpan, setSeenUrlSpan] = useState(urlSpan);
  const written = useRef(urlSpan);
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  if (urlSpan !== seenUrlSpan) {
    setSeenUrlSpan(urlSpan);
    // Changed from outside (a link, the back button): follow it.
    if (urlSpan !== written.current) setSelectedId(urlSpan);
  }
  useEffect(() => () => clearTimeout(timer.current), []);
  const onSelect = useCallback(
    (id: string | null) => {
      setSelectedId(id);
      clearTimeout(timer.current);
      timer.current = setTimeout(() => {
        written.current = id;
        setParams(
          (p) => {
            const n = new URLSearchParams(p);
            if (id) n.set('span', id);
            else n.delete('span');
            return n;
          },
          { replace: true },
        );
      }, 150);
    },
    [setParams],
  );

  if (trace.status === 'loading') return <p className="notice">Loading trace {traceId}…</p>;
  if (trace.status === 'error') return <p className="notice error">Cannot show trace {traceId}: {trace.error}</p>;
  if (!tree || tree.byId.size === 0) return <p className="notice">Trace {traceId} has no spans.</p>;

  const root = tree.roots[0]!;
  let anomalies = 0;
  let errors = 0;
  for (const n of tree.byId.values()) {
    if (n.anomalous) anomalies++;
    if (n.error) errors++;
  }
  const selected = selectedId ? tree.byId.get(selectedId) : undefined;
  return (
    <div className="tracepage">
      <header className="traceheader">
        <h1>
          {root.service}: {root.span.operationName}
        </h1>
        <p>
          <code>{trace.data.traceID}</code> · {formatTime(tree.start)} · {formatDuration(tree.end - tree.start)} · {tree.byId.size} spans ·{' '}
          {tree.services.length} service{tree.services.length === 1 ? '' : 's'}
          {anomalies > 0 && <span className="badge anomaly">{anomalies} anomalous</span>}
          {errors > 0 && <span className="badge error">{errors} errors</span>}
          {tree.roots.length > 1 && <span className="badge">{tree.roots.length} roots</span>}
        </p>
        {trace.data.warnings && trace.data.warnings.length > 0 && <p className="error">{trace.data.warnings.join('; ')}</p>}
        {diagnosis.status === 'ok' && diagnosis.data && (
          <p className="traceverdict">
            Part of incident <Link to="/incidents">{diagnosis.data.entry}</Link> ({diagnosis.data.state}) — verdict: {verdictText(diagnosis.data.verdict)}
          </p>
        )}
        {critpaths.status === 'ok' && critpaths.data && critpaths.data.spans.length > 0 && (
          <p className="cpindex">
            Critical path:{' '}
            {critpaths.data.spans.map((p) => (
              <button key={p.spanId} className="linkish" onClick={() => onSelect(p.spanId)}>
                {p.service}: {p.operation} ({p.ms.toFixed(1)} ms)
              </button>
            ))}
          </p>
        )}
      </header>
      <div className={selected ? 'split' : ''}>
        <Timeline key={trace.data.traceID} tree={tree} selectedId={selectedId} onSelect={onSelect} />
        {selected && (
          <SpanPanel
            node={selected}
            process={trace.data.processes[selected.span.processID]}
            traceStartUs={tree.start}
            artifacts={artifacts}
            critpath={critpaths.status === 'ok' ? critpaths.data?.spans.find((p) => p.spanId === selected.span.spanID) : undefined}
            critpathError={critpaths.status === 'error' ? critpaths.error : undefined}
            onClose={() => onSelect(null)}
          />
        )}
      </div>
    </div>
  );
}
