import { useState } from 'react';
import { Link } from 'react-router';
import { api } from '../lib/api';
import { usePoll } from '../lib/usePoll';
import { shares, stateColor, VERDICT_WAITS } from '../lib/critpath';
import { triggerText, verdictText, type Incident } from '../lib/incidents';
import { formatTime } from '../lib/timescale';

const REFRESH_MS = 5000;

/**
 * IncidentsPage lists the server's incidents, newest first, on a timeline of
 * the last hour, each with its verdict, evidence, what is missing and a link
 * to the example trace (its critical path and flame graphs are on the trace
 * page). It refreshes every 5 s: verdicts change as evidence arrives.
 */
export function IncidentsPage() {
  const { data: list, error } = usePoll(api.incidents, REFRESH_MS);
  const [open, setOpen] = useState<string | null>(null);

  const now = Date.now() * 1e6;
  const from = now - 3600e9;
  return (
    <div className="incidents">
      <div className="resulthead">
        <h1>Incidents</h1>
        <span className="muted">surges of anomalous requests at an entry point, with the server's verdict · refreshes every {REFRESH_MS / 1000} s</span>
      </div>
      {error && <p className="notice error">Cannot load incidents: {error}</p>}
      {list === null && !error && <p className="notice">Loading incidents…</p>}
      {list !== null && list.length === 0 && <p className="notice">No incidents. One opens when a fifth of an entry point's requests turn anomalous.</p>}
      {list !== null && list.length > 0 && (
        <>
          <svg className="inctimeline" viewBox="0 0 1000 24" preserveAspectRatio="none" aria-label="incidents in the last hour">
            {list.map((inc) => {
              const a = Math.max(inc.start, from);
              const b = inc.end ? inc.end : now;
              if (b < from) return null;
              const x = ((a - from) / (now - from)) * 1000;
              const w = Math.max(((b - a) / (now - from)) * 1000, 3);
              return <rect key={inc.id} x={x} y={4} width={w} height={16} className={inc.state} onClick={() => setOpen(inc.id)} />;
            })}
          </svg>
          <table className="feed">
            <thead>
              <tr>
                <th>start</th>
                <th>entry point</th>
                <th>state</th>
                <th>anomalous</th>
                <th>verdict</th>
              </tr>
            </thead>
            <tbody>
              {list.map((inc) => (
                <IncidentRow key={inc.id} inc={inc} expanded={open === inc.id} onToggle={() => setOpen(open === inc.id ? null : inc.id)} />
              ))}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}

function IncidentRow({ inc, expanded, onToggle }: { inc: Incident; expanded: boolean; onToggle: () => void }) {
  const v = inc.verdict;
  const waits = v?.waits;
  const bars = shares(waits, waits ? Object.values(waits).reduce((a, b) => a + b, 0) : 0, VERDICT_WAITS);
  return (
    <>
      <tr className="incident" onClick={onToggle}>
        <td>{formatTime(inc.start / 1000)}</td>
        <td>{inc.entry}</td>
        <td>
          <span className={`badge ${inc.state === 'open' ? 'anomaly' : ''}`}>{inc.state}</span>
        </td>
        <td>
          {inc.anomalous} of {inc.requests}
        </td>
        <td className="verdict">{verdictText(v)}</td>
      </tr>
      {expanded && (
        <tr className="incidentdetail">
          <td colSpan={5}>
            <p>{triggerText(inc)}</p>
            {v && (
              <div>
                {v.exampleTraceId && (
                  <p>
                    Example trace: <Link to={`/trace/${encodeURIComponent(v.exampleTraceId)}`}>{v.exampleTraceId}</Link> (critical path and
                    flame graphs of its spans)
                  </p>
                )}
                {v.runnerUp && (
                  <p>
                    Runner-up: {v.runnerUp.service}
                    {v.runnerUp.cause ? `: ${v.runnerUp.cause}` : ''} — {v.runnerUp.why}
                  </p>
                )}
                {v.advice && (
                  <p className="advice">
                    Advice ({v.advice.scaling}): {v.advice.explanation}
                  </p>
                )}
                {bars.length > 0 && (
                  <div className="waitbars" aria-label="where the culprit's slow time went">
                    {bars.map((b) => (
                      <span key={b.state} style={{ width: `${b.pct.toFixed(1)}%`, background: stateColor(b.state) }} title={`${b.state} ${b.ms.toFixed(1)} ms`}>
                        {b.pct > 8 ? b.state : ''}
                      </span>
                    ))}
                  </div>
                )}
                <h3>Evidence</h3>
                <ul>
                  {(v.evidence ?? []).map((e, i) => (
                    <li key={i}>{e}</li>
                  ))}
                </ul>
                {v.missing && v.missing.length > 0 && (
                  <>
                    <h3>Missing</h3>
                    <ul className="missing">
                      {v.missing.map((e, i) => (
                        <li key={i}>{e}</li>
                      ))}
                    </ul>
                  </>
                )}
              </div>
            )}
            <p className="muted">{inc.rule}</p>
          </td>
        </tr>
      )}
    </>
  );
}
