import { useState } from 'react';
import { Link } from 'react-router';
import { api } from '../lib/api';
import { usePoll } from '../lib/usePoll';
import { formatDuration, formatTime } from '../lib/timescale';

const REFRESH_MS = 5000;

/** AnomaliesPage is the feed of anomalous spans, newest first, refreshed every 5 s. */
export function AnomaliesPage() {
  const [paused, setPaused] = useState(false);
  // The API promises newest first; sorting again costs nothing.
  const { data: list, error, updated } = usePoll((signal) => api.anomalies(signal).then((d) => [...d].sort((a, b) => b.start - a.start)), REFRESH_MS, paused);

  return (
    <div className="anomalies">
      <div className="resulthead">
        <h1>Anomalies</h1>
        <span className="muted">
          {paused ? 'paused' : `refreshes every ${REFRESH_MS / 1000} s`}
          {updated && ` · updated ${updated.toLocaleTimeString()}`}
        </span>
        <button onClick={() => setPaused((p) => !p)}>{paused ? 'Resume' : 'Pause'}</button>
      </div>
      {error && <p className="notice error">Cannot load anomalies: {error}</p>}
      {list === null && !error && <p className="notice">Loading anomalies…</p>}
      {list !== null && list.length === 0 && <p className="notice">No anomalies yet. Spans slower than their baseline will appear here.</p>}
      {list !== null && list.length > 0 && (
        <table className="feed">
          <thead>
            <tr>
              <th>time</th>
              <th>service</th>
              <th>operation</th>
              <th>duration</th>
              <th>baseline</th>
              <th>×</th>
              <th>evidence</th>
            </tr>
          </thead>
          <tbody>
            {list.map((a) => {
              const ratio = a.baselineNs > 0 ? a.durationNs / a.baselineNs : null;
              const arts = a.artifacts ?? [];
              return (
                <tr key={`${a.traceID}/${a.spanID}`} className={a.error ? 'err' : ''}>
                  <td>{formatTime(a.start / 1000)}</td>
                  <td>{a.service}</td>
                  <td>
                    <Link to={`/trace/${encodeURIComponent(a.traceID)}?span=${encodeURIComponent(a.spanID)}`}>{a.operation}</Link>
                  </td>
                  <td>{formatDuration(a.durationNs / 1000)}</td>
                  <td>{a.baselineNs > 0 ? formatDuration(a.baselineNs / 1000) : <span className="muted">unknown</span>}</td>
                  <td>{ratio !== null ? `${ratio.toFixed(1)}×` : ''}</td>
                  <td>
                    <span className={`badge ${a.evidence === 'captured' ? 'ok' : ''}`}>{a.evidence || 'none'}</span>{' '}
                    {arts.map((r) => (
                      <span key={r.id} className="muted">
                        {r.kind}{' '}
                      </span>
                    ))}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </div>
  );
}
