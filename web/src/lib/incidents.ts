// Types of the server's incidents (GET /api/v1/incidents, docs/api.md).

export interface Alternative {
  service: string;
  cause?: string;
  score: number;
  why: string;
}

// What to change, after the Mirage model (internal/mirage.Advice).
export interface Advice {
  service: string;
  scaling: 'none' | 'vertical' | 'horizontal' | 'network' | 'delegate';
  peer?: string;
  from?: number;
  to?: number;
  factor?: number;
  share?: number;
  explanation: string;
}

export interface Verdict {
  service: string;
  /** The nodes whose slowdown it was (every service slower, their CPUs stolen), when no service is. */
  node?: string;
  cause: string;
  confidence: number;
  serviceConfidence: number;
  evidence: string[] | null;
  missing?: string[] | null;
  runnerUp?: Alternative;
  exampleTraceId?: string;
  waits?: Record<string, number>;
  advice?: Advice;
  pathSpans: number;
  slowSpans: number;
  slowTraces: number;
  baseTraces: number;
  updated: number;
}

export interface Incident {
  id: string;
  entry: string;
  entryService: string;
  entryOperation: string;
  state: 'open' | 'closed';
  start: number; // Unix ns
  end?: number;
  opened: number;
  closed?: number;
  requests: number;
  anomalous: number;
  baselineMs: number;
  /** The rule that opened it: a surge of anomalous requests, or a shift of the entry point's latency. */
  trigger?: 'anomalies' | 'shift';
  shift?: { p50Ms: number; p90Ms: number; baseP50Ms: number; baseP90Ms: number; requests: number };
  slowAboveMs?: number;
  rule: string;
  verdict?: Verdict;
}

/** triggerText says what opened an incident. */
export function triggerText(inc: Incident): string {
  const s = inc.shift;
  if (inc.trigger === 'shift' && s) {
    return (
      `Opened on a latency shift: p50 ${s.p50Ms.toFixed(1)} ms and p90 ${s.p90Ms.toFixed(1)} ms over ${s.requests} requests, ` +
      `against ${s.baseP50Ms.toFixed(1)} and ${s.baseP90Ms.toFixed(1)} ms before; requests over ${(inc.slowAboveMs ?? s.baseP90Ms).toFixed(1)} ms count as anomalous.`
    );
  }
  return `Opened on a surge of anomalous requests: ${inc.anomalous} of ${inc.requests}.`;
}

/** verdictText is the one-line verdict: "cart: lock (confidence 0.68)". */
export function verdictText(v: Verdict | undefined): string {
  if (!v) return 'no verdict yet';
  if (!v.service && v.node) return `node ${v.node}: ${v.cause}, its CPUs stolen by the hypervisor (confidence ${v.confidence.toFixed(2)})`;
  if (!v.service) return `no culprit (${v.cause})`;
  return `${v.service}: ${v.cause} (confidence ${v.confidence.toFixed(2)})`;
}
