import { useEffect, useRef, useState } from 'react';
import flamegraph, { type FlameGraph } from 'd3-flame-graph';
import { select } from 'd3-selection';
import { api } from '../lib/api';
import { Link } from 'react-router';
import { flameFilterURL, flamePagePath, flameStats, flameURL, pruneFlame, spanWindowNs, topFrames } from '../lib/flame';
import type { FlameNode } from '../lib/types';
import { useFetch } from '../lib/useFetch';

/** useWidth tracks an element's width, rounded to 20 px so small jitters don't redraw. */
function useWidth(ref: React.RefObject<HTMLElement | null>): number {
  const [w, setW] = useState(0);
  useEffect(() => {
    const node = ref.current;
    if (!node) return;
    const measure = () => setW(Math.round(node.clientWidth / 20) * 20);
    measure();
    if (typeof ResizeObserver === 'undefined') return;
    const ro = new ResizeObserver(measure);
    ro.observe(node);
    return () => ro.disconnect();
  }, [ref]);
  return w;
}

interface ChartProps {
  root: FlameNode;
  unit: string;
  /** Icicle: roots at the top. */
  inverted?: boolean;
  /** Highlights frames whose name contains it. */
  search?: string;
}

/**
 * FlameChart draws one flame tree with d3-flame-graph: click a frame to zoom
 * into it, click below it to zoom out.
 */
export function FlameChart({ root, unit, inverted = false, search = '' }: ChartProps) {
  const el = useRef<HTMLDivElement>(null);
  const details = useRef<HTMLDivElement>(null);
  const chartRef = useRef<FlameGraph | null>(null);
  const searchRef = useRef(search);
  searchRef.current = search;
  const width = useWidth(el);
  useEffect(() => {
    const node = el.current;
    if (!node || width === 0) return;
    const chart = flamegraph()
      .width(Math.max(300, width))
      .cellHeight(16)
      .minFrameSize(2)
      .transitionDuration(200)
      .sort(true)
      .inverted(inverted)
      .setDetailsElement(details.current)
      .setLabelHandler((d) => `${d.data.name} — ${d.value.toLocaleString()} ${unit}`);
    // Very large profiles draw slowly; frames under 0.05 % are invisible anyway.
    select(node).datum(flameStats(root).nodes > 20000 ? pruneFlame(root, 0.0005) : root).call(chart);
    chartRef.current = chart;
    if (searchRef.current.trim()) chart.search(searchRef.current.trim());
    return () => {
      chartRef.current = null;
      chart.destroy();
    };
  }, [root, unit, width, inverted]);
  useEffect(() => {
    const chart = chartRef.current;
    if (!chart) return;
    if (search.trim()) chart.search(search.trim());
    else chart.clear();
  }, [search]);
  return (
    <div>
      <div ref={el} className="flamechart" />
      <div ref={details} className="muted flamedetails" />
    </div>
  );
}

interface Props {
  artifactId: string;
  /** The span's µs start and duration, for "this span's time only". */
  spanStartUs: number;
  spanDurationUs: number;
  /** The OS threads the span ran on, when known (see spanThreadIds). */
  spanThreads?: string[];
}

/** ArtifactFlame fetches and shows the flame graph of a pprof artifact. */
export function ArtifactFlame({ artifactId, spanStartUs, spanDurationUs, spanThreads = [] }: Props) {
  const [spanOnly, setSpanOnly] = useState(false);
  const win = spanOnly ? spanWindowNs(spanStartUs, spanDurationUs) : undefined;
  const filter = win ? { ...win, tid: spanThreads.length > 0 ? spanThreads : undefined } : {};
  const url = win ? flameFilterURL(artifactId, filter) : flameURL(artifactId);
  const res = useFetch(url, (s) => api.flame(url, s));
  return (
    <div className="flame">
      <label className="check">
        <input type="checkbox" checked={spanOnly} onChange={(e) => setSpanOnly(e.target.checked)} />{' '}
        {spanThreads.length > 0 ? `This span's threads (${spanThreads.join(', ')}) and time only` : "This span's time only"}
      </label>{' '}
      <Link to={flamePagePath(artifactId, filter)} className="fullflame">
        open full flame graph
      </Link>
      {res.status === 'loading' && <p className="muted">Loading the flame graph…</p>}
      {res.status === 'error' && <p className="error">Flame graph unavailable: {res.error}</p>}
      {res.status === 'ok' && (
        <>
          <p className="muted">
            {res.data.type} ({res.data.unit}): {res.data.samplesKept} of {res.data.samplesTotal} samples
            {spanOnly ? ' inside the span' : ' in the window'}
          </p>
          {res.data.root && res.data.root.value > 0 ? (
            <>
              <FlameChart root={res.data.root} unit={res.data.unit} />
              <details>
                <summary>Top frames by self {res.data.unit}</summary>
                <ol className="topframes">
                  {topFrames(res.data.root, 10).map((f) => (
                    <li key={f.name}>
                      <code>{f.name}</code> {f.self.toLocaleString()}
                    </li>
                  ))}
                </ol>
              </details>
            </>
          ) : (
            <p className="notice">No samples {spanOnly ? "in this span's time" : 'in this window'}.</p>
          )}
        </>
      )}
    </div>
  );
}
