// Shapes of the JSON the UI reads; see docs/api.md. Jaeger times are µs,
// Rootline /api/v1 times are Unix ns.

export interface KeyValue {
  key: string;
  type?: string;
  value: unknown;
}

export interface SpanReference {
  refType: 'CHILD_OF' | 'FOLLOWS_FROM' | string;
  traceID: string;
  spanID: string;
}

export interface SpanLog {
  timestamp: number; // µs
  fields: KeyValue[];
}

export interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references?: SpanReference[] | null;
  startTime: number; // µs since the epoch
  duration: number; // µs
  tags?: KeyValue[] | null;
  logs?: SpanLog[] | null;
  processID: string;
  warnings?: string[] | null;
}

export interface JaegerProcess {
  serviceName: string;
  tags?: KeyValue[] | null;
}

export interface JaegerTrace {
  traceID: string;
  spans: JaegerSpan[];
  processes: Record<string, JaegerProcess>;
  warnings?: string[] | null;
}

export interface ArtifactRef {
  id: string;
  kind: string;
  url?: string;
}

export interface Anomaly {
  traceID: string;
  spanID: string;
  service: string;
  operation: string;
  kind?: string;
  start: number; // Unix ns
  startTime?: string;
  durationNs: number;
  baselineNs: number; // 0 when unknown
  threshold: number;
  error?: boolean;
  artifacts: ArtifactRef[] | null;
  evidence: string; // "captured" | "pending"
}

export interface Artifact {
  id: string;
  kind: string;
  mediaType: string;
  fileName: string;
  sha256: string;
  size: number;
  host: string;
  service: string;
  pid: number;
  start: number; // Unix ns
  end: number; // Unix ns
  created: number;
  partial: boolean;
  captureId: string;
  attributes: Record<string, string> | null;
  spans: { traceID: string; spanID: string }[] | null;
  url: string;
}

export interface FlameNode {
  name: string;
  value: number;
  children?: FlameNode[];
}

export interface FlameGraphResponse {
  artifactId: string;
  type: string;
  unit: string;
  samplesTotal: number;
  samplesKept: number;
  valueTotal: number;
  root: FlameNode | null;
}
