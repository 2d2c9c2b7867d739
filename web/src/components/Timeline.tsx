import { memo, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from 'react';
import { visibleRows, type SpanNode, type SpanTree } from '../lib/spantree';
import { formatDuration, labelPlacement, ticks, timeScale } from '../lib/timescale';

const ROW = 24; // px; rows have a fixed height so only the visible ones are rendered
const OVERSCAN = 10;

interface RowProps {
  node: SpanNode;
  index: number;
  left: number;
  width: number;
  selected: boolean;
  collapsed: boolean;
  onToggle: (id: string) => void;
  onSelect: (id: string) => void;
}

// Memoized so selection or scrolling re-renders only the rows whose props
// change; hover is pure CSS and re-renders nothing.
const Row = memo(function Row({ node, index, left, width, selected, collapsed, onToggle, onSelect }: RowProps) {
  const s = node.span;
  const id = s.spanID;
  const place = labelPlacement(left, width);
  const cls = ['trow', selected ? 'selected' : '', node.anomalous ? 'anomalous' : '', node.error ? 'err' : ''].join(' ');
  const label = (
    <>
      {formatDuration(s.duration)}
      {node.baselineMs !== null && <span className="baseline"> (baseline {formatDuration(node.baselineMs * 1000)})</span>}
    </>
  );
  return (
    <div
      className={cls}
      style={{ top: index * ROW }}
      role="treeitem"
      aria-level={node.depth + 1}
      aria-selected={selected}
      aria-expanded={node.children.length > 0 ? !collapsed : undefined}
      onClick={() => onSelect(id)}
    >
      <div className="tname" style={{ paddingLeft: 4 + node.depth * 14 }}>
        {node.children.length > 0 ? (
          <button
            className="toggle"
            tabIndex={-1}
            aria-label={collapsed ? 'Expand' : 'Collapse'}
            onClick={(e) => {
              e.stopPropagation();
              onToggle(id);
            }}
          >
            {collapsed ? '▸' : '▾'}
          </button>
        ) : (
          <span className="toggle" />
        )}
        <span className="svcname">{node.service}</span> <span className="opname">{s.operationName}</span>
        {node.children.length > 0 && collapsed && <span className="muted"> ({node.children.length})</span>}
      </div>
      <div className="tbar">
        <div className="bar" style={{ left: `${left}%`, width: `${width}%` }} />
        <span className={`barlabel ${place.side}`} style={place.side === 'before' ? { right: `${place.pct}%` } : { left: `${place.pct}%` }}>
          {label}
        </span>
      </div>
    </div>
  );
});

interface Props {
  tree: SpanTree;
  selectedId: string | null;
  onSelect: (id: string | null) => void;
}

/**
 * Timeline is the Gantt view of a span tree: click to select, ▸/▾ or
 * left/right to collapse and expand, up/down to move.
 */
export function Timeline({ tree, selectedId, onSelect }: Props) {
  const [collapsed, setCollapsed] = useState<ReadonlySet<string>>(() => new Set());
  const rows = useMemo(() => visibleRows(tree.roots, collapsed), [tree, collapsed]);
  const scale = useMemo(() => timeScale(tree.start, tree.end), [tree]);
  const scroller = useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [height, setHeight] = useState(600);

  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const measure = () => setHeight(el.clientHeight || 600);
    measure();
    const ro = typeof ResizeObserver !== 'undefined' ? new ResizeObserver(measure) : null;
    ro?.observe(el);
    return () => ro?.disconnect();
  }, []);

  const toggle = useCallback((id: string) => {
    setCollapsed((c) => {
      const n = new Set(c);
      if (n.has(id)) n.delete(id);
      else n.add(id);
      return n;
    });
  }, []);
  const select = useCallback((id: string) => onSelect(id), [onSelect]);

  const selIndex = selectedId ? rows.findIndex((r) => r.span.spanID === selectedId) : -1;
  const move = onSelect;

  // Keep the selected row in view when the keyboard moves it.
  useEffect(() => {
    const el = scroller.current;
    if (!el || selIndex < 0) return;
    const top = selIndex * ROW;
    const view = el.clientHeight;
    if (top < el.scrollTop - ROW || top > el.scrollTop + view) el.scrollTop = top - view / 2; // a jump: center it
    else if (top < el.scrollTop) el.scrollTop = top; // one step: keep it at the edge
    else if (top + ROW > el.scrollTop + view) el.scrollTop = top + ROW - view;
  }, [selIndex]);

  const onKeyDown = (e: React.KeyboardEvent) => {
    if (rows.length === 0) return;
    const at = selIndex;
    const cur = at < 0 ? 0 : at;
    const node = rows[cur]!;
    const id = node.span.spanID;
    switch (e.key) {
      case 'ArrowDown':
        move(rows[Math.min(rows.length - 1, at + 1)]!.span.spanID);
        break;
      case 'ArrowUp':
        move(rows[Math.max(0, cur - 1)]!.span.spanID);
        break;
      case 'ArrowRight':
        if (node.children.length > 0 && collapsed.has(id)) toggle(id);
        else if (node.children.length > 0) move(node.children[0]!.span.spanID);
        break;
      case 'ArrowLeft':
        if (node.children.length > 0 && !collapsed.has(id)) toggle(id);
        else {
          // Move to the parent: the nearest row above with a smaller depth.
          for (let i = cur - 1; i >= 0; i--) {
            if (rows[i]!.depth < node.depth) {
              move(rows[i]!.span.spanID);
              break;
            }
          }
        }
        break;
      case 'Escape':
        move(null);
        break;
      default:
        return;
    }
    e.preventDefault();
  };

  const first = Math.max(0, Math.floor(scrollTop / ROW) - OVERSCAN);
  const last = Math.min(rows.length, Math.ceil((scrollTop + height) / ROW) + OVERSCAN);
  const shown = [];
  for (let i = first; i < last; i++) {
    const n = rows[i]!;
    const { left, width } = scale.bar(n.span.startTime, n.span.duration);
    const id = n.span.spanID;
    shown.push(
      <Row key={id} node={n} index={i} left={left} width={width} selected={id === selectedId} collapsed={collapsed.has(id)} onToggle={toggle} onSelect={select} />,
    );
  }

  return (
    <div className="timeline">
      <div className="theader">
        <div className="tname">
          <button onClick={() => setCollapsed(new Set())}>Expand all</button>{' '}
          <button onClick={() => setCollapsed(new Set([...tree.byId.values()].filter((n) => n.children.length > 0).map((n) => n.span.spanID)))}>Collapse all</button>
        </div>
        <div className="tbar ticks">
          {ticks(tree.end - tree.start).map((t) => (
            <span key={t.pct} style={t.pct >= 100 ? { right: 0 } : { left: `${t.pct}%` }}>
              {t.label}
            </span>
          ))}
        </div>
      </div>
      <div
        className="tscroll"
        ref={scroller}
        tabIndex={0}
        role="tree"
        aria-label="Spans; arrow keys move, left and right collapse and expand"
        onKeyDown={onKeyDown}
        onScroll={(e) => setScrollTop(e.currentTarget.scrollTop)}
      >
        <div className="tspacer" style={{ height: rows.length * ROW }}>
          {shown}
        </div>
      </div>
    </div>
  );
}
