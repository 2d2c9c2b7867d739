// d3-flame-graph ships no types; this declares the part the UI uses.
declare module 'd3-flame-graph' {
  export interface FlameGraph {
    (selection: unknown): void;
    width(w: number): FlameGraph;
    cellHeight(h: number): FlameGraph;
    minFrameSize(px: number): FlameGraph;
    transitionDuration(ms: number): FlameGraph;
    sort(s: boolean): FlameGraph;
    selfValue(b: boolean): FlameGraph;
    inverted(b: boolean): FlameGraph;
    title(t: string): FlameGraph;
    tooltip(t: unknown): FlameGraph;
    setDetailsElement(el: HTMLElement | null): FlameGraph;
    setLabelHandler(f: (d: { data: { name: string; value: number }; value: number }) => string): FlameGraph;
    resetZoom(): FlameGraph;
    search(term: string): FlameGraph;
    clear(): FlameGraph;
    destroy(): FlameGraph;
  }
  export default function flamegraph(): FlameGraph;
}
