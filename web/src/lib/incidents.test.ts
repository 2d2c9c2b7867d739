import { describe, expect, it } from 'vitest';
import { triggerText, verdictText, type Incident, type Verdict } from './incidents';

const v: Verdict = {
  service: 'cart', cause: 'lock', confidence: 0.684, serviceConfidence: 1, evidence: [], pathSpans: 3, slowSpans: 4,
  slowTraces: 4, baseTraces: 40, updated: 1,
};

describe('verdictText', () => {
  it('names the service, the cause and the confidence', () => {
    expect(verdictText(v)).toBe('cart: lock (confidence 0.68)');
  });
  it('says when there is none', () => {
    expect(verdictText(undefined)).toBe('no verdict yet');
    expect(verdictText({ ...v, service: '', cause: 'unknown' })).toBe('no culprit (unknown)');
  });
  it('names the node when the slowdown was its', () => {
    expect(verdictText({ ...v, service: '', node: 'n1', cause: 'cpu-contention', confidence: 0.5 }))
      .toBe('node n1: cpu-contention, its CPUs stolen by the hypervisor (confidence 0.50)');
  });
});

describe('triggerText', () => {
  const inc: Incident = {
    id: 'x', entry: 'a GET /', entryService: 'a', entryOperation: 'GET /', state: 'open', start: 1, opened: 2,
    requests: 200, anomalous: 150, baselineMs: 0, rule: '',
  };
  it('says a surge of anomalous requests opened it', () => {
    expect(triggerText({ ...inc, trigger: 'anomalies' })).toBe('Opened on a surge of anomalous requests: 150 of 200.');
    expect(triggerText(inc)).toBe('Opened on a surge of anomalous requests: 150 of 200.');
  });
  it('gives the shift against the baseline', () => {
    const shift = { p50Ms: 79.39, p90Ms: 114.1, baseP50Ms: 69.5, baseP90Ms: 84.61, requests: 200 };
    expect(triggerText({ ...inc, trigger: 'shift', shift, slowAboveMs: 84.61 })).toBe(
      'Opened on a latency shift: p50 79.4 ms and p90 114.1 ms over 200 requests, against 69.5 and 84.6 ms before; requests over 84.6 ms count as anomalous.',
    );
  });
});
