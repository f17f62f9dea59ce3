import { describe, expect, it } from 'vitest';
import { decodeFields, encodeFields } from './encoding.js';

describe('archive encoding', () => {
  it('gives back every AMQP field value amqplib decodes, and big integers', () => {
    const headers = {
      text: 'héllo \u0000 nul and a lone \ud800 surrogate',
      n: 42,
      float: 1.5,
      negZero: -0,
      nan: NaN,
      inf: -Infinity,
      yes: true,
      none: null,
      bytes: Buffer.from([0, 255, 128, 10]),
      big: 2n ** 70n,
      when: { '!': 'timestamp', value: 1_767_225_600 },
      money: { '!': 'decimal', value: { places: 2, digits: 1999 } },
      list: [1, 'two', Buffer.from('3'), [{ deep: { '!': 'timestamp', value: 1 } }]],
      table: { '$': 'looks like a tag', '!': 5, nested: { x: null } },
      'x-death': [{ count: 3, reason: 'expired', queue: 'q', time: { '!': 'timestamp', value: 1 }, 'routing-keys': ['a.b'] }],
    };
    const text = encodeFields(headers);
    expect(text).toMatch(/^[\x20-\x7e]*$/);
    const back = decodeFields(text);
    expect(back).toEqual(headers);
    expect(Object.is(back['negZero'], -0)).toBe(true);
    expect(Buffer.isBuffer(back['bytes'])).toBe(true);
    expect(typeof back['big']).toBe('bigint');
  });

  it('keeps a header named like an object property as a plain key', () => {
    const back = decodeFields(encodeFields(JSON.parse('{"__proto__": "p", "constructor": 1}') as Record<string, unknown>));
    expect(Object.keys(back).sort()).toEqual(['__proto__', 'constructor']);
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
    expect(back['__proto__']).toBe('p');
  });

  it('drops undefined, and reads text that is not its own as an empty table', () => {
    expect(decodeFields(encodeFields({ a: undefined, b: 1 }))).toEqual({ b: 1 });
    expect(decodeFields('not json')).toEqual({});
    expect(decodeFields(encodeFields(undefined))).toEqual({});
  });
});
