import { fetchAuthorized } from './auth';
import type { CPTrace } from './critpath';
import type { Incident } from './incidents';
import type { CriticalReport, Timeline } from './metrics';
import type { DependencyLink, ServiceLatency } from './servicemap';
import type { Anomaly, Artifact, FlameGraphResponse, JaegerTrace } from './types';

/** APIError carries the HTTP status and the server's own message. */
export class APIError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = 'APIError';
  }
}

/** errorMessage reads either envelope's error: Jaeger's errors[].msg or /api/v1's error. */
export function errorMessage(body: unknown): string | undefined {
  if (body && typeof body === 'object') {
    const b = body as { errors?: { msg?: string }[] | null; error?: unknown };
    if (Array.isArray(b.errors) && b.errors.length > 0) return b.errors.map((e) => e.msg ?? '').join('; ');
    if (typeof b.error === 'string') return b.error;
  }
  return undefined;
}

export async function getJSON<T>(url: string, signal?: AbortSignal): Promise<T> {
  let res: Response;
  try {
    // With a server token, the first 401 asks for it (auth.ts).
    res = await fetchAuthorized(url, { signal });
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e;
    throw new APIError(`cannot reach the server (${(e as Error).message})`, 0);
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (!res.ok) {
    const msg = errorMessage(body) ?? (text.trim().slice(0, 200) || res.statusText);
    const hint = res.status === 401 ? ' — this server needs its API token (ROOTLINE_AUTH_TOKEN): reload the page to enter it' : '';
    throw new APIError(`${res.status} ${msg}${hint}`, res.status);
  }
  if (body === undefined) throw new APIError(`unreadable answer from ${url}`, res.status);
  return body as T;
}

interface Envelope<T> {
  data: T;
  errors?: { msg?: string }[] | null;
}

async function jaeger<T>(url: string, signal?: AbortSignal): Promise<T> {
  const env = await getJSON<Envelope<T>>(url, signal);
  const msg = errorMessage(env);
  if (msg) throw new APIError(msg, 200);
  return env.data;
}

export const api = {
  services: (signal?: AbortSignal) => jaeger<string[] | null>('/api/services', signal).then((d) => d ?? []),
  operations: (service: string, signal?: AbortSignal) =>
    jaeger<string[] | null>(`/api/services/${encodeURIComponent(service)}/operations`, signal).then((d) => d ?? []),
  searchTraces: (query: URLSearchParams, signal?: AbortSignal) =>
    jaeger<JaegerTrace[] | null>(`/api/traces?${query.toString()}`, signal).then((d) => d ?? []),
  trace: async (id: string, signal?: AbortSignal) => {
    const d = await jaeger<JaegerTrace[] | null>(`/api/traces/${encodeURIComponent(id)}`, signal);
    const t = d?.[0];
    if (!t) throw new APIError(`trace ${id} not found`, 404);
    return t;
  },
  anomalies: (signal?: AbortSignal) => getJSON<Anomaly[] | null>('/api/v1/anomalies?limit=100', signal).then((d) => d ?? []),
  traceArtifacts: (id: string, signal?: AbortSignal) =>
    getJSON<Artifact[] | null>(`/api/v1/traces/${encodeURIComponent(id)}/artifacts`, signal).then((d) => d ?? []),
  serviceLatency: (lookback: string, signal?: AbortSignal) =>
    getJSON<ServiceLatency[] | null>(`/api/v1/services/latency?lookback=${encodeURIComponent(lookback)}`, signal).then((d) => d ?? []),
  dependencies: (endTs: number, lookbackMs: number, signal?: AbortSignal) =>
    jaeger<DependencyLink[] | null>(`/api/dependencies?endTs=${Math.floor(endTs)}&lookback=${Math.floor(lookbackMs)}`, signal).then((d) => d ?? []),
  flame: (url: string, signal?: AbortSignal) => getJSON<FlameGraphResponse>(url, signal),
  artifactMeta: (id: string, signal?: AbortSignal) => getJSON<Artifact>(`/api/v1/artifacts/${encodeURIComponent(id)}/meta`, signal),
  incidents: (signal?: AbortSignal) =>
    getJSON<{ incidents: Incident[] | null }>('/api/v1/incidents?limit=100', signal).then((d) => d.incidents ?? []),
  /** diagnosis is null when the trace belongs to no incident (404) or the store keeps none (501). */
  diagnosis: (id: string, signal?: AbortSignal) =>
    getJSON<Incident>(`/api/v1/traces/${encodeURIComponent(id)}/diagnosis`, signal).catch((e: unknown) => {
      if (e instanceof APIError && (e.status === 404 || e.status === 501)) return null;
      throw e;
    }),
  /** anomaliesOf is the service's anomalous spans since a Unix ns time, newest first. */
  anomaliesOf: (service: string, sinceNs: number, signal?: AbortSignal) =>
    getJSON<Anomaly[] | null>(`/api/v1/anomalies?service=${encodeURIComponent(service)}&since=${Math.floor(sinceNs)}&limit=1000`, signal).then((d) => d ?? []),
  /** metricsTimeline is the kernel metrics of a service's containers over [fromMs, toMs]. */
  metricsTimeline: (service: string, fromMs: number, toMs: number, buckets: number, signal?: AbortSignal) =>
    getJSON<Timeline>(`/api/v1/metrics/timeline?service=${encodeURIComponent(service)}&from=${Math.floor(fromMs)}&to=${Math.ceil(toMs)}&buckets=${buckets}`, signal),
  /** criticalMetrics is the CriticalMetrics analysis of a service over [fromMs, toMs]. */
  criticalMetrics: (service: string, fromMs: number, toMs: number, step: string, signal?: AbortSignal) =>
    getJSON<CriticalReport>(
      `/api/v1/critical-metrics?service=${encodeURIComponent(service)}&from=${Math.floor(fromMs)}&to=${Math.ceil(toMs)}&step=${encodeURIComponent(step)}`,
      signal,
    ),
  /** criticalPath is null when no kernel snapshot explains the trace (404). */
  criticalPath: (id: string, signal?: AbortSignal) =>
    getJSON<CPTrace>(`/api/v1/traces/${encodeURIComponent(id)}/critical-path`, signal).catch((e: unknown) => {
      if (e instanceof APIError && e.status === 404) return null;
      throw e;
    }),
};
