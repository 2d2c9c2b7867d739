import { useEffect, useMemo, useState } from 'react';
import { Link, useSearchParams } from 'react-router';
import { api } from '../lib/api';
import { useFetch, type FetchState } from '../lib/useFetch';
import {
  analysisStep,
  anomalyTicks,
  bucketLabel,
  formatValue,
  groupOf,
  heatStrip,
  incidentBands,
  linePath,
  rangeMs,
  ranges,
  shownMetrics,
  type Band,
  type CriticalReport,
  type Group,
  type ServiceAnalysis,
  type Tick,
  type TimelineMetric,
} from '../lib/metrics';
import { formatDuration, formatTime } from '../lib/timescale';

// The charts are drawn in a 1000-unit-wide box stretched to the page width.
const W = 1000;
const LINE_H = 56;
const BUCKETS = 120;

/**
 * MetricsPage shows a service's per-container kernel metrics (recorded by
 * `rootline agent --kmetrics`) over a time range: each metric's value per
 * interval and, for histograms, a heat strip of where its events fell, with
 * the service's incidents as bands and its anomalous requests as ticks on
 * the same time axis. By default only the critical metrics (the
 * CriticalMetrics analysis: one cheap representative per cluster of metrics
 * of the same shape) are drawn; the clusters are listed below them.
 */
export function MetricsPage() {
  const [params, setParams] = useSearchParams();
  const service = params.get('service') ?? '';
  const range = ranges.includes(params.get('range') ?? '') ? (params.get('range') as string) : '15m';
  // The toggle is local state first (the checkbox must change on the click,
  // before the router's URL update lands), mirrored in the URL to share.
  const [all, setAll] = useState(() => params.get('all') === '1');
  const set = (k: string, v: string | null) => {
    const p = new URLSearchParams(params);
    if (v === null || v === '') p.delete(k);
    else p.set(k, v);
    if (k === 'service') p.delete('container');
    setParams(p, { replace: true });
  };

  // The window is anchored when the page loads or is refreshed, not on
  // every render: the charts and the analysis must be of the same window.
  const [anchor, setAnchor] = useState(() => Date.now());
  const toMs = anchor;
  const fromMs = anchor - rangeMs(range);
  const key = service ? `${service}|${fromMs}|${toMs}` : null;

  const services = useFetch('services', (s) => api.services(s));
  const timeline = useFetch(key, (s) => api.metricsTimeline(service, fromMs, toMs, BUCKETS, s));
  const report = useFetch(key, (s) => api.criticalMetrics(service, fromMs, toMs, analysisStep(toMs - fromMs), s));
  const incidents = useFetch(key, (s) => api.incidents(s));
  const anomalies = useFetch(key, (s) => api.anomaliesOf(service, fromMs * 1e6, s));

  useEffect(() => {
    if (!service && services.status === 'ok' && services.data.length > 0) set('service', services.data[0] ?? null);
  }, [service, services.status]);

  const tl = timeline.status === 'ok' ? timeline.data : null;
  const containers = tl?.containers ?? [];
  const ctrName = params.get('container') ?? containers.find((c) => !c.sidecar)?.container ?? containers[0]?.container ?? '';
  const ctr = containers.find((c) => c.container === ctrName);
  const rep = report.status === 'ok' ? report.data : null;
  const group = ctr ? groupOf(rep, service, ctr) : undefined;
  const analysis = rep?.services?.find((s) => s.service === service);

  // The timeline's own window (whole intervals) is the time axis.
  const axisFrom = tl ? Date.parse(tl.from) : fromMs;
  const axisTo = tl ? Date.parse(tl.to) : toMs;
  const bands = useMemo(() => (incidents.status === 'ok' ? incidentBands(incidents.data, service, axisFrom, axisTo) : []), [incidents, service, axisFrom, axisTo]);
  const ticks = useMemo(() => (anomalies.status === 'ok' ? anomalyTicks(anomalies.data, service, axisFrom, axisTo) : []), [anomalies, service, axisFrom, axisTo]);
  const shown = ctr ? shownMetrics(ctr.metrics ?? [], group?.critical, all) : [];

  const serviceList = services.status === 'ok' ? services.data : [];
  return (
    <div className="metricspage">
      <div className="resulthead metricstools">
        <h1>Metrics</h1>
        <label>
          Service{' '}
          <select aria-label="Service" value={service} onChange={(e) => set('service', e.target.value)}>
            {service && !serviceList.includes(service) && <option value={service}>{service}</option>}
            {serviceList.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Container{' '}
          <select aria-label="Container" value={ctrName} onChange={(e) => set('container', e.target.value)} disabled={containers.length === 0}>
            {containers.map((c) => (
              <option key={c.container} value={c.container}>
                {c.container}
                {c.sidecar ? ' (sidecar)' : ''}
              </option>
            ))}
          </select>
        </label>
        <label>
          Last{' '}
          <select aria-label="Range" value={range} onChange={(e) => set('range', e.target.value)}>
            {ranges.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </label>
        <label className="check">
          <input type="checkbox" aria-label="Show all metrics" checked={all} onChange={(e) => {
              setAll(e.target.checked);
              set('all', e.target.checked ? '1' : null);
            }} /> all metrics
        </label>
        <button onClick={() => setAnchor(Date.now())}>Refresh</button>
      </div>
      {!service && services.status !== 'loading' && <p className="notice">No services yet. Pick one once traces arrive.</p>}
      {timeline.status === 'loading' && service && <p className="notice">Loading kernel metrics…</p>}
      {timeline.status === 'error' && (
        <p className="notice error">
          No kernel metrics of {service}: {timeline.error}. The agent records them with <code>--kmetrics</code> (on in <code>rootline demo</code>).
        </p>
      )}
      {tl && (
        <>
          <p className="muted">
            {formatTime(axisFrom * 1000)} – {formatTime(axisTo * 1000)} · {tl.intervals} intervals of {formatDuration(tl.stepSeconds * 1e6)} ·{' '}
            {bands.length} incident{bands.length === 1 ? '' : 's'} · {ticks.length} anomalous request{ticks.length === 1 ? '' : 's'}
          </p>
          <EventStrip bands={bands} ticks={ticks} />
          <CriticalNote report={report} group={group} all={all} />
          {ctr && shown.length === 0 && <p className="notice">No metric of {ctr.container} to show.</p>}
          <div className="metriclist">
            {shown.map((m) => (
              <MetricRow key={m.metric} m={m} bands={bands} group={group} />
            ))}
          </div>
          {analysis && <Clusters analysis={analysis} />}
        </>
      )}
    </div>
  );
}

/** EventStrip draws the incidents as bands and the anomalous requests as ticks, each a link. */
function EventStrip({ bands, ticks }: { bands: Band[]; ticks: Tick[] }) {
  return (
    <svg className="eventstrip" viewBox={`0 0 ${W} 28`} preserveAspectRatio="none" aria-label="incidents and anomalies">
      <rect x={0} y={0} width={W} height={28} className="bg" />
      {bands.map((b) => (
        <a key={b.id} href={`#/incidents`}>
          <rect className={`incband ${b.open ? 'open' : ''}`} x={b.x * W} y={0} width={b.w * W} height={28} data-incident={b.id}>
            <title>{`incident: ${b.label}`}</title>
          </rect>
        </a>
      ))}
      {ticks.slice(0, 500).map((t) => (
        <a key={`${t.anomaly.traceID}/${t.anomaly.spanID}`} href={`#/trace/${encodeURIComponent(t.anomaly.traceID)}?span=${encodeURIComponent(t.anomaly.spanID)}`}>
          <line className="anomtick" x1={t.x * W} x2={t.x * W} y1={14} y2={28}>
            <title>{`${t.anomaly.operation} ${formatDuration(t.anomaly.durationNs / 1000)}`}</title>
          </line>
        </a>
      ))}
    </svg>
  );
}

function CriticalNote({ report, group, all }: { report: FetchState<CriticalReport>; group: Group | undefined; all: boolean }) {
  if (report.status === 'loading') return <p className="muted">Analysing which metrics are critical…</p>;
  if (report.status === 'error') return <p className="muted critnote">No CriticalMetrics analysis for this window ({report.error}): every metric is shown.</p>;
  if (!group) return <p className="muted critnote">This container was not analysed: every metric is shown.</p>;
  return (
    <p className="critnote">
      Critical metrics: <strong className="criticallist">{group.critical.join(', ')}</strong>{' '}
      <span className="muted">
        ({group.k} clusters of {(group.metrics ?? []).length} metrics; {all ? 'showing all metrics' : 'showing the critical ones'}; the agent would keep them on at ~
        {(group.costCriticalNsPerSecond / 1e3).toFixed(0)} µs/s of BPF time instead of {(group.costAllNsPerSecond / 1e3).toFixed(0)} µs/s)
      </span>
    </p>
  );
}

/** MetricRow is one metric: its value per interval over the bands, and its heat strip. */
function MetricRow({ m, bands, group }: { m: TimelineMetric; bands: Band[]; group: Group | undefined }) {
  const { d, max } = linePath(m.values, W, LINE_H - 4);
  const heat = heatStrip(m);
  const n = m.values.length || 1;
  const cw = W / n;
  const critical = group?.critical.includes(m.metric);
  const cluster = group?.clusters?.findIndex((c) => c.members.some((x) => x.metric === m.metric)) ?? -1;
  const last = [...m.values].reverse().find((v) => v !== null) ?? null;
  const what = m.signal === 'mean' ? 'mean per event' : m.signal === 'sum/s' ? 'per second' : 'events per second';
  return (
    <section className="metricrow" data-metric={m.metric}>
      <div className="metrichead">
        <h2>{m.metric}</h2>
        {critical && <span className="badge ok">critical</span>}
        {!critical && group?.off.includes(m.metric) && <span className="badge">off in the proposed config</span>}
        {cluster >= 0 && <span className="badge">cluster {cluster + 1}</span>}
        <span className="muted">
          {what} · max {formatValue(max, m.unit, m.signal)} · last {formatValue(last, m.unit, m.signal)}
        </span>
      </div>
      <svg className="metricline" viewBox={`0 0 ${W} ${LINE_H}`} preserveAspectRatio="none" aria-label={`${m.metric} over time`}>
        {bands.map((b) => (
          <rect key={b.id} className="incband" x={b.x * W} y={0} width={b.w * W} height={LINE_H} />
        ))}
        <path d={d} transform="translate(0,2)" />
      </svg>
      {heat.rows > 0 && (
        <svg className="heatstrip" viewBox={`0 0 ${W} ${heat.rows * 6}`} preserveAspectRatio="none" aria-label={`${m.metric} histogram per interval`}>
          {heat.cells.map((c) => (
            <rect key={`${c.i}/${c.row}`} x={c.i * cw} y={(heat.rows - 1 - c.row) * 6} width={cw} height={6} style={{ fillOpacity: 0.15 + 0.85 * c.shade }}>
              <title>{`${bucketLabel(m, heat.lo + c.row)}: ${c.count} events (${Math.round(c.shade * 100)} %)`}</title>
            </rect>
          ))}
          {bands.map((b) => (
            <rect key={b.id} className="incband outline" x={b.x * W} y={0} width={b.w * W} height={heat.rows * 6} />
          ))}
        </svg>
      )}
      {heat.rows > 0 && (
        <div className="heatlegend muted">
          rows {bucketLabel(m, heat.lo)} (bottom) … {bucketLabel(m, heat.hi)} (top); shade: share of the interval's events
        </div>
      )}
    </section>
  );
}

/** Clusters lists the analysis' clusters of the service and of its sidecars, and the KS tests. */
function Clusters({ analysis }: { analysis: ServiceAnalysis }) {
  const groups = [analysis.app, analysis.sidecar].filter((g): g is Group => !!g);
  return (
    <div className="clusters">
      <h3>Clusters (k-Shape on the metrics' shapes; one kept per cluster, the cheapest)</h3>
      {analysis.error && <p className="notice error">{analysis.error}</p>}
      {groups.map((g) => (
        <table key={g.role} className="feed clustertable" data-role={g.role}>
          <thead>
            <tr>
              <th colSpan={3}>
                {g.role === 'app' ? 'service' : 'sidecar'} · {g.containers.join(', ')} · {g.k} clusters
              </th>
            </tr>
            <tr>
              <th>cluster</th>
              <th>kept</th>
              <th>members (SBD to the centroid)</th>
            </tr>
          </thead>
          <tbody>
            {(g.clusters ?? []).map((c, i) => (
              <tr key={i} className="cluster">
                <td>{i + 1}</td>
                <td className="representative">{c.representative}</td>
                <td className="members">{c.members.map((m) => `${m.metric} ${m.sbd.toFixed(2)}`).join(', ')}</td>
              </tr>
            ))}
            {g.flat && g.flat.length > 0 && (
              <tr>
                <td>—</td>
                <td className="muted">no shape</td>
                <td className="muted">{g.flat.join(', ')}</td>
              </tr>
            )}
          </tbody>
        </table>
      ))}
      {analysis.ks && analysis.ks.length > 0 && (
        <p className="muted">
          Service vs sidecar (two-sample KS):{' '}
          {analysis.ks.map((k) => `${k.metric} D=${k.d.toFixed(2)} p=${k.p.toPrecision(2)}${k.different ? ' (different)' : ''}`).join('; ')}
        </p>
      )}
      <p className="muted">
        The same analysis on the command line: <code>rootline analyze critical-metrics --server …</code>. See also the <Link to="/incidents">incidents</Link>.
      </p>
    </div>
  );
}
