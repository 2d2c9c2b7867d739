/**
 * The search form's state, kept in the URL query so a search can be shared.
 * Encoding drops defaults, so a plain /search URL stays plain.
 */
export type SortOrder = 'newest' | 'oldest' | 'longest' | 'shortest';

export interface SearchState {
  service: string;
  operation: string; // '' = all
  lookback: string; // Go duration: 1h, 2d…
  /** A custom time range (local time, as <input type="datetime-local">); overrides lookback. */
  start: string;
  end: string;
  minDuration: string; // Go duration or ''
  maxDuration: string;
  tags: string; // "key=value key2=value2" (logfmt-like, as Jaeger's UI)
  anomalous: boolean;
  limit: number;
  sort: SortOrder;
}

export const defaultSearch: SearchState = {
  service: '',
  operation: '',
  lookback: '1h',
  start: '',
  end: '',
  minDuration: '',
  maxDuration: '',
  tags: '',
  anomalous: false,
  limit: 20,
  sort: 'newest',
};

export const lookbacks = ['5m', '15m', '1h', '2h', '6h', '12h', '24h', '2d', '7d'];
const sorts: SortOrder[] = ['newest', 'oldest', 'longest', 'shortest'];
const durationRe = /^\d+(\.\d+)?(ns|us|µs|ms|s|m|h)$/;
const lookbackRe = /^\d+(m|h|d)$/;
const localTimeRe = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/;

/** encodeSearch writes the non-default fields as URL query parameters. */
export function encodeSearch(s: SearchState): URLSearchParams {
  const q = new URLSearchParams();
  if (s.service) q.set('service', s.service);
  if (s.operation) q.set('operation', s.operation);
  if (s.lookback !== defaultSearch.lookback) q.set('lookback', s.lookback);
  if (s.start) q.set('start', s.start);
  if (s.end) q.set('end', s.end);
  if (s.minDuration) q.set('minDuration', s.minDuration);
  if (s.maxDuration) q.set('maxDuration', s.maxDuration);
  if (s.tags.trim()) q.set('tags', s.tags.trim());
  if (s.anomalous) q.set('anomalous', 'true');
  if (s.limit !== defaultSearch.limit) q.set('limit', String(s.limit));
  if (s.sort !== defaultSearch.sort) q.set('sort', s.sort);
  return q;
}

/** decodeSearch reads a URL query back, falling back to defaults for bad values. */
export function decodeSearch(q: URLSearchParams): SearchState {
  const limit = Number.parseInt(q.get('limit') ?? '', 10);
  const sort = q.get('sort') as SortOrder | null;
  const lookback = q.get('lookback') ?? '';
  const dur = (k: string) => {
    const v = (q.get(k) ?? '').trim();
    return durationRe.test(v) ? v : '';
  };
  return {
    service: q.get('service') ?? '',
    operation: q.get('operation') ?? '',
    lookback: lookbackRe.test(lookback) ? lookback : defaultSearch.lookback,
    start: localTimeRe.test(q.get('start') ?? '') ? q.get('start')! : '',
    end: localTimeRe.test(q.get('end') ?? '') ? q.get('end')! : '',
    minDuration: dur('minDuration'),
    maxDuration: dur('maxDuration'),
    tags: q.get('tags') ?? '',
    anomalous: q.get('anomalous') === 'true',
    limit: Number.isFinite(limit) && limit > 0 ? Math.min(limit, 1500) : defaultSearch.limit,
    sort: sort && sorts.includes(sort) ? sort : defaultSearch.sort,
  };
}

/** isDuration tells whether v is a Go duration the API accepts (or empty). */
export function isDuration(v: string): boolean {
  return v.trim() === '' || durationRe.test(v.trim());
}

/**
 * parseTags reads "k=v k2="v with spaces"" into an object. It returns an
 * error message for a token without '='.
 */
export function parseTags(input: string): { tags: Record<string, string>; error?: string } {
  const tags: Record<string, string> = {};
  const re = /\s*([^\s=]+)=("([^"]*)"|(\S*))/y;
  let rest = input.trim();
  while (rest.length > 0) {
    re.lastIndex = 0;
    const m = re.exec(rest);
    if (!m) return { tags, error: `cannot read "${rest.split(/\s+/)[0]}": write tags as key=value` };
    tags[m[1]!] = m[3] ?? m[4] ?? '';
    rest = rest.slice(m[0].length).trim();
  }
  return { tags };
}

/** localToMicros converts a datetime-local value (local time) to Unix µs. */
export function localToMicros(v: string): number {
  return new Date(v).getTime() * 1000;
}

/** rangeError explains a custom time range that cannot be searched, or ''. */
export function rangeError(s: SearchState): string {
  if (s.start && s.end && localToMicros(s.end) <= localToMicros(s.start)) return 'the end of the time range is not after its start';
  return '';
}

/** searchAPIQuery builds the /api/traces query for a state (service required). */
export function searchAPIQuery(s: SearchState): URLSearchParams {
  const q = new URLSearchParams();
  q.set('service', s.service);
  if (s.operation) q.set('operation', s.operation);
  // A custom range wins over the lookback; with only an end, the lookback
  // counts back from it (Jaeger's semantics).
  if (s.start) q.set('start', String(localToMicros(s.start)));
  else q.set('lookback', s.lookback);
  if (s.end) q.set('end', String(localToMicros(s.end)));
  if (s.minDuration) q.set('minDuration', s.minDuration);
  if (s.maxDuration) q.set('maxDuration', s.maxDuration);
  const { tags } = parseTags(s.tags);
  if (Object.keys(tags).length > 0) q.set('tags', JSON.stringify(tags));
  if (s.anomalous) q.set('anomalous', 'true');
  q.set('limit', String(s.limit));
  return q;
}
