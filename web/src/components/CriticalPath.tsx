import { Link } from 'react-router';
import { layoutPath, segmentTitle, shares, stateColor, STATES, trimmedNote, type CPSpanPath, type Share } from '../lib/critpath';

const ROW = 22;
const LABEL = 140;
const WIDTH = 520;

function SummaryBar({ label, items, title }: { label: string; items: Share[]; title: string }) {
  return (
    <div className="cpsummary" title={title}>
      <span className="cpsumlabel">{label}</span>
      <div className="cpbar" role="img" aria-label={`${label}: ${items.map((s) => `${s.state} ${s.pct.toFixed(0)}%`).join(', ')}`}>
        {items.map((s) => (
          <div key={s.state} className={`cpshare st-${s.state}`} style={{ width: `${s.pct}%`, background: stateColor(s.state) }} title={`${s.state} ${s.ms.toFixed(1)} ms (${s.pct.toFixed(0)}%)`} />
        ))}
      </div>
      <span className="cpsumtext">{items.map((s) => `${s.state} ${s.pct.toFixed(0)}%`).join(' · ')}</span>
    </div>
  );
}

/**
 * CriticalPath shows a span's kernel critical path: what its time went to
 * (the path's states, and what its own threads waited on), the requests that
 * blocked it, and a per-thread timeline of the path with the wakeups it
 * followed.
 */
export function CriticalPath({ path }: { path: CPSpanPath }) {
  const l = layoutPath(path);
  const plot = WIDTH - LABEL;
  const height = l.rows.length * ROW + 4;
  const x = (pct: number) => LABEL + (pct / 100) * plot;
  const present = STATES.filter((s) => (path.states[s] ?? 0) > 0 || (path.waits[s] ?? 0) > 0);
  return (
    <div className="critpath">
      <SummaryBar label="path" items={shares(path.states, path.ms)} title="the state of whichever thread the path is on" />
      <SummaryBar label="own waits" items={shares(path.waits, path.ms)} title="what the span's own threads waited on" />
      <p className="cplegend">
        {present.map((s) => (
          <span key={s}>
            <i style={{ background: stateColor(s) }} /> {s}
          </span>
        ))}
      </p>
      {path.blockedBy.length > 0 && (
        <div className="cpblocked">
          <strong>Blocked by</strong>
          <ul>
            {path.blockedBy.map((b) => (
              <li key={`${b.traceId}-${b.spanId}`}>
                <Link className="blockedby" to={`/trace/${encodeURIComponent(b.traceId)}?span=${encodeURIComponent(b.spanId)}`}>
                  {b.service}: {b.operation}
                </Link>{' '}
                {b.ms.toFixed(1)} ms{b.wait ? ` (waiting on ${b.wait})` : ''}
                {b.traceId !== path.traceId && <span className="muted"> · another trace</span>}
              </li>
            ))}
          </ul>
        </div>
      )}
      <svg className="cptimeline" width="100%" viewBox={`0 0 ${WIDTH} ${height}`} role="img" aria-label="critical path per thread">
        <defs>
          <marker id="cparrow" viewBox="0 0 6 6" refX="5" refY="3" markerWidth="6" markerHeight="6" orient="auto-start-reverse">
            <path d="M0,0 L6,3 L0,6 z" fill="#111827" />
          </marker>
        </defs>
        {l.rows.map((r, i) => (
          <g key={r.tid} className={`cprow${r.own ? ' own' : ''}`} data-tid={r.tid}>
            <text x={4} y={i * ROW + 14} className="cprowlabel">
              {r.own ? '▸ ' : ''}
              {r.label}
            </text>
            <line x1={LABEL} x2={WIDTH} y1={i * ROW + ROW / 2} y2={i * ROW + ROW / 2} className="cpguide" />
          </g>
        ))}
        {l.rects.map((r, i) => (
          <rect
            key={i}
            className={`cpseg st-${r.seg.state}${r.seg.blocking ? ' blocking' : ''}`}
            x={x(r.left)}
            y={r.row * ROW + 3}
            width={Math.max((r.width / 100) * plot, 0.8)}
            height={ROW - 6}
            fill={stateColor(r.seg.state)}
          >
            <title>{segmentTitle(r.seg, path.start)}</title>
          </rect>
        ))}
        {l.arrows.map((a, i) => {
          const down = a.toRow > a.fromRow;
          return (
            <line
              key={i}
              className="cparrow"
              x1={x(a.x)}
              x2={x(a.x)}
              y1={a.fromRow * ROW + (down ? ROW - 3 : 3)}
              y2={a.toRow * ROW + (down ? 3 : ROW - 3)}
              markerEnd="url(#cparrow)"
            />
          );
        })}
      </svg>
      {trimmedNote(path) && <p className="cptrimmed">{trimmedNote(path)}</p>}
      {(path.lost ?? 0) > 0 && <p className="error">The kernel recorder had dropped {path.lost} records: the path may be wrong where they fell.</p>}
    </div>
  );
}
