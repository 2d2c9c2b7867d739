import { ArtifactLink } from './ArtifactLink';
import { isPprof, spanThreadIds } from '../lib/flame';
import type { SpanNode } from '../lib/spantree';
import { formatBytes, formatDuration, formatTime } from '../lib/timescale';
import type { Artifact, JaegerProcess, KeyValue } from '../lib/types';
import type { FetchState } from '../lib/useFetch';
import type { CPSpanPath } from '../lib/critpath';
import { CriticalPath } from './CriticalPath';
import { ArtifactFlame } from './FlameGraph';

function KVTable({ items }: { items: KeyValue[] | null | undefined }) {
  if (!items || items.length === 0) return <p className="muted">none</p>;
  return (
    <table className="kv">
      <tbody>
        {items.map((t, i) => (
          <tr key={`${t.key}-${i}`}>
            <th>{t.key}</th>
            <td>{typeof t.value === 'string' ? t.value : JSON.stringify(t.value)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function nsToUs(ns: number): number {
  return ns / 1000;
}

interface Props {
  node: SpanNode;
  process: JaegerProcess | undefined;
  traceStartUs: number;
  artifacts: FetchState<Artifact[]>;
  /** critpath is the span's critical path, when a kernel snapshot explains it. */
  critpath?: CPSpanPath;
  critpathError?: string;
  onClose: () => void;
}

/** SpanPanel shows one span: tags, process, logs and its captured evidence. */
export function SpanPanel({ node, process, traceStartUs, artifacts, critpath, critpathError, onClose }: Props) {
  const s = node.span;
  const mine = artifacts.status === 'ok' ? artifacts.data.filter((a) => (a.spans ?? []).some((r) => r.spanID === s.spanID)) : [];
  return (
    <aside className="spanpanel" aria-label="Span details">
      <header>
        <h2>
          {node.service}: {s.operationName}
        </h2>
        <button onClick={onClose} aria-label="Close span details">
          ×
        </button>
      </header>
      <p>
        <span className="muted">span</span> <code>{s.spanID}</code> · <span className="muted">start</span> +{formatDuration(s.startTime - traceStartUs)} ·{' '}
        <span className="muted">duration</span> <strong>{formatDuration(s.duration)}</strong>
        {node.baselineMs !== null && <span className="baseline"> (baseline {formatDuration(node.baselineMs * 1000)})</span>}
        {node.anomalous && <span className="badge anomaly">anomaly</span>}
        {node.error && <span className="badge error">error</span>}
        {node.orphan && <span className="badge">parent missing</span>}
      </p>
      {critpath && (
        <>
          <h3>Critical path</h3>
          <CriticalPath path={critpath} />
        </>
      )}
      {critpathError && <p className="error">Critical path unavailable: {critpathError}</p>}
      <h3>Evidence</h3>
      {artifacts.status === 'loading' && <p className="muted">Loading artifacts…</p>}
      {artifacts.status === 'error' && <p className="error">Artifacts unavailable: {artifacts.error}</p>}
      {artifacts.status === 'ok' && mine.length === 0 && (
        <p className="muted">{node.anomalous ? 'No artifact captured for this span (yet).' : 'No artifact linked to this span.'}</p>
      )}
      {mine.map((a) => (
        <div key={a.id} className="artifact">
          <p>
            <strong>{a.kind}</strong> {a.partial && <span className="badge">partial</span>} {a.fileName} · {formatBytes(a.size)} · {a.host} pid {a.pid}
            <br />
            <span className="muted">window</span> {formatTime(nsToUs(a.start))} → {formatDuration(nsToUs(a.end - a.start))} ·{' '}
            <ArtifactLink href={a.url || `/api/v1/artifacts/${encodeURIComponent(a.id)}`} fileName={a.fileName}>
              download
            </ArtifactLink>
          </p>
          {isPprof(a.mediaType, a.fileName) && <ArtifactFlame artifactId={a.id} spanStartUs={s.startTime} spanDurationUs={s.duration} spanThreads={spanThreadIds(s.tags)} />}
        </div>
      ))}
      <h3>Tags</h3>
      <KVTable items={s.tags} />
      <h3>Process {process ? `(${process.serviceName})` : ''}</h3>
      <KVTable items={process?.tags} />
      <h3>Logs</h3>
      {!s.logs || s.logs.length === 0 ? (
        <p className="muted">none</p>
      ) : (
        s.logs.map((l, i) => (
          <div key={i} className="log">
            <span className="muted">+{formatDuration(l.timestamp - traceStartUs)}</span>
            <KVTable items={l.fields} />
          </div>
        ))
      )}
      {s.warnings && s.warnings.length > 0 && (
        <>
          <h3>Warnings</h3>
          <ul>
            {s.warnings.map((w, i) => (
              <li key={i}>{w}</li>
            ))}
          </ul>
        </>
      )}
    </aside>
  );
}
