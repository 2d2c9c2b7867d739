import { describe, expect, it } from 'vitest';
import { verdictText, type Verdict } from './incidents';

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
});
