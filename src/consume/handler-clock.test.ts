import { describe, expect, it } from 'vitest';
import type * as amqp from 'amqplib';
import { HandlerTimeoutError } from '../errors.js';
import { HandlerClock, HandlerRun, runHandler } from './handler-run.js';

const raw = { fields: {}, properties: {}, content: Buffer.alloc(0) } as unknown as amqp.ConsumeMessage;
const newRun = (id: string): HandlerRun<undefined> => new HandlerRun<undefined>(id, 'rk', {}, 1, raw, undefined);
const never = (): Promise<void> => new Promise<void>(() => undefined);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('HandlerClock', () => {
  it('times out every run that outlives the deadline, each with its signal aborted, and none that settles in time', async () => {
    const clock = new HandlerClock(40, 'c');
    try {
      // Each outcome is awaited from the start: on a busy machine a deadline can pass
      // during any await below, and a rejection nobody awaits yet is an unhandled one.
      const a = newRun('a');
      const first = expect(runHandler(never, undefined, a, 40, 'c', undefined, clock)).rejects.toBeInstanceOf(HandlerTimeoutError);
      await sleep(15);
      const b = newRun('b');
      const second = expect(runHandler(never, undefined, b, 40, 'c', undefined, clock)).rejects.toBeInstanceOf(HandlerTimeoutError);
      // Settles before any timer can fire, however late the timers run.
      const c = newRun('c');
      const quick = runHandler(() => Promise.resolve(), undefined, c, 40, 'c', undefined, clock);
      await expect(quick).resolves.toBeUndefined();
      // `b` was armed while the timer waited for `a`: the clock must wait again for it.
      await first;
      await second;
      expect(a.signal.aborted).toBe(true);
      expect(b.signal.aborted).toBe(true);
      expect(c.signal.aborted).toBe(false);
    } finally {
      clock.stop();
    }
  });

  it('still times out a later run when the run the timer waited for settled first', async () => {
    const clock = new HandlerClock(30, 'c');
    try {
      await runHandler(() => Promise.resolve(), undefined, newRun('a'), 30, 'c', undefined, clock);
      await sleep(10);
      const late = newRun('b');
      await expect(runHandler(never, undefined, late, 30, 'c', undefined, clock)).rejects.toBeInstanceOf(HandlerTimeoutError);
      expect(late.signal.aborted).toBe(true);
    } finally {
      clock.stop();
    }
  });

  it('passes on what a handler throws, synchronously or not, and frees its slot', async () => {
    const clock = new HandlerClock(1000, 'c');
    try {
      const boom = new Error('boom');
      await expect(runHandler(() => { throw boom; }, undefined, newRun('a'), 1000, 'c', undefined, clock)).rejects.toBe(boom);
      const run = newRun('b');
      await expect(runHandler(() => Promise.reject(boom), undefined, run, 1000, 'c', undefined, clock)).rejects.toBe(boom);
      expect(run.slot).toBe(-1);
    } finally {
      clock.stop();
    }
  });
});
