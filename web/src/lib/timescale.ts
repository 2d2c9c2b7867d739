/**
 * A linear map from a trace's µs timeline to percentages of its width. A
 * zero-length trace maps everything to 0 and gives every span the minimum
 * width, so bars stay visible.
 */
export interface TimeScale {
  /** left edge of an instant, % of the trace (clamped to [0, 100]). */
  pct(us: number): number;
  /** left and width of a span, %; width is at least minWidthPct. */
  bar(startUs: number, durationUs: number): { left: number; width: number };
}

export function timeScale(traceStartUs: number, traceEndUs: number, minWidthPct = 0.2): TimeScale {
  const span = traceEndUs - traceStartUs;
  const clamp = (v: number) => Math.min(100, Math.max(0, v));
  const pct = (us: number) => (span > 0 ? clamp(((us - traceStartUs) / span) * 100) : 0);
  return {
    pct,
    bar(startUs, durationUs) {
      const left = pct(startUs);
      let width = span > 0 ? clamp(((startUs + Math.max(0, durationUs) - traceStartUs) / span) * 100) - left : 0;
      width = Math.max(width, minWidthPct);
      if (left + width > 100) return { left: Math.max(0, 100 - width), width };
      return { left, width };
    },
  };
}

/**
 * labelPlacement puts a bar's duration label where it fits: after the bar,
 * before it (pct is then the distance from the right edge), or inside it.
 */
export function labelPlacement(left: number, width: number): { side: 'after' | 'before' | 'inside'; pct: number } {
  if (left + width <= 65) return { side: 'after', pct: left + width + 0.5 };
  if (left >= 25) return { side: 'before', pct: 100 - left + 0.5 };
  return { side: 'inside', pct: left + 0.5 };
}

/** formatDuration prints µs the way trace UIs do: 850µs, 12.3ms, 4.56s, 2m 3s. */
export function formatDuration(us: number): string {
  if (!Number.isFinite(us)) return '–';
  const a = Math.abs(us);
  if (a < 1000) return `${trim(us)}µs`;
  if (a < 1_000_000) return `${trim(us / 1000)}ms`;
  if (a < 60_000_000) return `${trim(us / 1_000_000)}s`;
  const m = Math.floor(us / 60_000_000);
  const s = Math.round((us - m * 60_000_000) / 1_000_000);
  return `${m}m ${s}s`;
}

function trim(v: number): string {
  const r = Math.abs(v) >= 100 ? Math.round(v) : Math.abs(v) >= 10 ? Math.round(v * 10) / 10 : Math.round(v * 100) / 100;
  return String(r);
}

/** ticks returns n+1 evenly spaced labels over a duration in µs. */
export function ticks(durationUs: number, n = 4): { pct: number; label: string }[] {
  const out: { pct: number; label: string }[] = [];
  for (let i = 0; i <= n; i++) out.push({ pct: (i / n) * 100, label: formatDuration((durationUs * i) / n) });
  return out;
}

/** formatBytes prints a size in B, KiB, MiB or GiB. */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : trim(v)} ${units[i]}`;
}

/** formatTime prints Unix µs as a local date and time with milliseconds. */
export function formatTime(us: number): string {
  const d = new Date(us / 1000);
  if (Number.isNaN(d.getTime())) return '–';
  const pad = (v: number, w = 2) => String(v).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}
