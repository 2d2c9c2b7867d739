import { useMemo, useState } from 'react';
import { useParams, useSearchParams } from 'react-router';
import { ArtifactLink, SpeedscopeLink } from '../components/ArtifactLink';
import { FlameChart } from '../components/FlameGraph';
import { api } from '../lib/api';
import { artifactURL, flameFilterFromParams, flameFilterURL, flameMatches, topFrames } from '../lib/flame';
import { formatBytes, formatDuration, formatTime } from '../lib/timescale';
import { useFetch } from '../lib/useFetch';

/**
 * FlamePage is one pprof artifact's flame graph on the whole page:
 * /#/flame/<artifactId>?tid=&start=&end= (the filters go to the API as they are).
 */
export function FlamePage() {
  const { artifactId = '' } = useParams();
  const [params] = useSearchParams();
  const filter = useMemo(() => flameFilterFromParams(params), [params]);
  const url = flameFilterURL(artifactId, filter);
  const res = useFetch(url, (s) => api.flame(url, s));
  const meta = useFetch(`meta:${artifactId}`, (s) => api.artifactMeta(artifactId, s));
  const [search, setSearch] = useState('');
  const [inverted, setInverted] = useState(false);
  const [chartKey, setChartKey] = useState(0); // bumping it redraws the chart: resets the zoom
  const root = res.status === 'ok' ? res.data.root : null;
  const matches = useMemo(() => flameMatches(root, search), [root, search]);
  const download = meta.status === 'ok' && meta.data.url ? meta.data.url : artifactURL(artifactId);

  return (
    <div className="flamepage">
      <header className="traceheader">
        <h1>Flame graph</h1>
        <p>
          <code>{artifactId}</code>
          {meta.status === 'ok' && (
            <>
              {' '}
              · <strong>{meta.data.kind}</strong> {meta.data.fileName} · {formatBytes(meta.data.size)} · {meta.data.service} on {meta.data.host} pid {meta.data.pid} · {formatTime(meta.data.start / 1000)} →{' '}
              {formatDuration((meta.data.end - meta.data.start) / 1000)}
            </>
          )}
          {filter.tid && <span className="badge">threads {filter.tid.join(', ')}</span>}
          {(filter.start || filter.end) && <span className="badge">time window</span>}
        </p>
        <p className="flametools">
          <input type="search" placeholder="search frames" aria-label="Search frames" value={search} onChange={(e) => setSearch(e.target.value)} />
          {search.trim() && root && (
            <span className="muted">
              {matches.frames} frame{matches.frames === 1 ? '' : 's'}, {(matches.fraction * 100).toFixed(1)}% of {res.status === 'ok' ? res.data.unit : ''}
            </span>
          )}
          <label className="check">
            <input type="checkbox" checked={inverted} onChange={(e) => setInverted(e.target.checked)} /> Inverted (icicle)
          </label>
          <button onClick={() => setChartKey((k) => k + 1)}>Reset zoom</button>
          <ArtifactLink href={download} fileName={meta.status === 'ok' ? meta.data.fileName : undefined}>
            download
          </ArtifactLink>
          <SpeedscopeLink artifactURL={download}>open in speedscope</SpeedscopeLink>
        </p>
      </header>
      {res.status === 'loading' && <p className="notice">Loading the flame graph…</p>}
      {res.status === 'error' && <p className="notice error">Flame graph unavailable: {res.error}</p>}
      {res.status === 'ok' && (
        <>
          <p className="muted">
            {res.data.type} ({res.data.unit}): {res.data.samplesKept} of {res.data.samplesTotal} samples · click a frame to zoom in
          </p>
          {root && root.value > 0 ? (
            <>
              <FlameChart key={chartKey} root={root} unit={res.data.unit} inverted={inverted} search={search} />
              <h3>Top frames by self {res.data.unit}</h3>
              <ol className="topframes">
                {topFrames(root, 15).map((f) => (
                  <li key={f.name}>
                    <code>{f.name}</code> {f.self.toLocaleString()}
                  </li>
                ))}
              </ol>
            </>
          ) : (
            <p className="notice">No samples match these filters.</p>
          )}
        </>
      )}
    </div>
  );
}
