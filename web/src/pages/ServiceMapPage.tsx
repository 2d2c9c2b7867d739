import { useMemo, useState } from 'react';
import { useNavigate } from 'react-router';
import { api } from '../lib/api';
import { latencyColor, latencyLabel, layoutServiceMap, lookbackMs, rateColor, serviceSearchPath, shapeServiceMap } from '../lib/servicemap';
import { lookbacks } from '../lib/urlstate';
import { useFetch } from '../lib/useFetch';

const pct = (r: number | null) => (r === null ? 'no callers' : `${(r * 100).toFixed(1)}% anomalous`);

/**
 * ServiceMapPage draws GET /api/dependencies as a graph (dagre layout), nodes
 * and edges coloured by the share of anomalous calls into them. Clicking a
 * service searches its anomalous traces.
 */
export function ServiceMapPage() {
  const [lookback, setLookback] = useState('1h');
  const [reload, setReload] = useState(0);
  const [endTs, setEndTs] = useState(() => Date.now());
  const res = useFetch(`deps:${lookback}:${endTs}:${reload}`, (s) => api.dependencies(endTs, lookbackMs(lookback), s));
  const lat = useFetch(`lat:${lookback}:${endTs}:${reload}`, (s) => api.serviceLatency(lookback, s));
  const latency = useMemo(() => new Map((lat.status === 'ok' ? lat.data : []).map((l) => [l.service, l])), [lat]);
  const laid = useMemo(() => (res.status === 'ok' ? layoutServiceMap(shapeServiceMap(res.data)) : null), [res]);
  const navigate = useNavigate();
  const open = (id: string) => navigate(serviceSearchPath(id, lookback));

  return (
    <div className="mappage">
      <header className="traceheader">
        <h1>Service map</h1>
        <p className="flametools">
          <label>
            Lookback{' '}
            <select value={lookback} onChange={(e) => setLookback(e.target.value)}>
              {lookbacks.map((l) => (
                <option key={l} value={l}>
                  last {l}
                </option>
              ))}
            </select>
          </label>
          <button
            onClick={() => {
              setEndTs(Date.now());
              setReload((r) => r + 1);
            }}
          >
            Refresh
          </button>
          <span className="muted">Outline and edges: share of anomalous calls (green 0 %, red ≥ 10 %). Fill: recent p95 against the detector's baseline (green ≤ 2×, red ≥ 3×). Click a service for its anomalous traces.</span>
        </p>
      </header>
      {res.status === 'loading' && <p className="notice">Loading dependencies…</p>}
      {res.status === 'error' && <p className="notice error">Dependencies unavailable: {res.error}</p>}
      {laid && laid.nodes.length === 0 && <p className="notice">No calls between services in the last {lookback}.</p>}
      {laid && laid.nodes.length > 0 && (
        <div className="mapwrap">
          <svg className="servicemap" width={laid.width} height={laid.height} viewBox={`0 0 ${laid.width} ${laid.height}`} role="img" aria-label="Service map">
            <defs>
              <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse">
                <path d="M 0 0 L 10 5 L 0 10 z" fill="context-stroke" />
              </marker>
            </defs>
            {laid.edges.map((e) => {
              const d = e.points.map((p, i) => `${i === 0 ? 'M' : 'L'} ${p.x} ${p.y}`).join(' ');
              const mid = e.points[Math.floor(e.points.length / 2)];
              return (
                <g key={`${e.parent}->${e.child}`} className="mapedge">
                  <title>
                    {e.parent} → {e.child}: {e.callCount} calls, {e.anomalies} anomalous ({pct(e.rate)})
                  </title>
                  <path d={d} fill="none" stroke={rateColor(e.rate)} strokeWidth={Math.min(6, 1.5 + Math.log10(1 + e.callCount))} markerEnd="url(#arrow)" />
                  {mid && (
                    <text x={mid.x} y={mid.y - 6} textAnchor="middle" className="edgelabel">
                      {e.callCount}
                      {e.anomalies > 0 ? ` (${e.anomalies}⚠)` : ''}
                    </text>
                  )}
                </g>
              );
            })}
            {laid.nodes.map((n) => (
              <g
                key={n.id}
                className="mapnode"
                transform={`translate(${n.x - n.w / 2}, ${n.y - n.h / 2})`}
                role="link"
                tabIndex={0}
                aria-label={`${n.id}: ${pct(n.rate)}`}
                onClick={() => open(n.id)}
                onKeyDown={(e) => {
                  if (e.key === 'Enter' || e.key === ' ') open(n.id);
                }}
              >
                <title>
                  {n.id}: {n.callsIn} calls in, {n.anomaliesIn} anomalous ({pct(n.rate)}); {n.callsOut} calls out; {latencyLabel(latency.get(n.id))}
                </title>
                <rect width={n.w} height={n.h} rx={6} fill={latencyColor(latency.get(n.id)?.ratio)} stroke={rateColor(n.rate)} strokeWidth={3} />
                <text x={n.w / 2} y={18} textAnchor="middle" className="nodename">
                  {n.id}
                </text>
                <text x={n.w / 2} y={34} textAnchor="middle" className="noderate" fill={rateColor(n.rate)}>
                  {n.rate === null ? `${n.callsOut} calls out` : pct(n.rate)}
                </text>
              </g>
            ))}
          </svg>
        </div>
      )}
    </div>
  );
}
