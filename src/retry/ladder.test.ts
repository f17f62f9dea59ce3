import { describe, expect, it } from 'vitest';
import { decideRetry, formatDuration, parseDuration, retryQueueName } from './ladder.js';
import { InvalidOptionError } from '../errors.js';

describe('parseDuration', () => {
  it('reads numbers and unit strings', () => {
    expect(parseDuration(250, 'x')).toBe(250);
    expect(parseDuration('50ms', 'x')).toBe(50);
    expect(parseDuration('5s', 'x')).toBe(5000);
    expect(parseDuration('1.5m', 'x')).toBe(90_000);
    expect(parseDuration('2h', 'x')).toBe(7_200_000);
  });
  it('names the option on bad input', () => {
    expect(() => parseDuration('soon', 'retry.delays[1]')).toThrow(InvalidOptionError);
    expect(() => parseDuration('soon', 'retry.delays[1]')).toThrow(/`retry\.delays\[1\]`/);
    expect(() => parseDuration(-5, 'd')).toThrow(/at least 1/);
    expect(() => parseDuration(1.5, 'd')).toThrow(InvalidOptionError);
  });
});

describe('formatDuration and queue names', () => {
  it('uses the shortest exact unit', () => {
    expect(formatDuration(50)).toBe('50ms');
    expect(formatDuration(1500)).toBe('1500ms');
    expect(formatDuration(5000)).toBe('5s');
    expect(formatDuration(600_000)).toBe('10m');
    expect(formatDuration(3_600_000)).toBe('1h');
    expect(retryQueueName('billing', 60_000)).toBe('billing.retry.1m');
  });
});

describe('decideRetry', () => {
  const delays = [10, 20, 40];
  it('climbs one tier per failure and repeats the last', () => {
    expect(decideRetry(0, delays, 6)).toEqual({ action: 'retry', tier: 0, delayMs: 10, attempts: 1 });
    expect(decideRetry(1, delays, 6)).toEqual({ action: 'retry', tier: 1, delayMs: 20, attempts: 2 });
    expect(decideRetry(2, delays, 6)).toEqual({ action: 'retry', tier: 2, delayMs: 40, attempts: 3 });
    expect(decideRetry(4, delays, 6)).toEqual({ action: 'retry', tier: 2, delayMs: 40, attempts: 5 });
  });
  it('parks when the handler has run maxAttempts times', () => {
    expect(decideRetry(5, delays, 6)).toEqual({ action: 'park', attempts: 6 });
    expect(decideRetry(500, delays, 6)).toEqual({ action: 'park', attempts: 501 });
    expect(decideRetry(0, delays, 1)).toEqual({ action: 'park', attempts: 1 });
  });
});
