/**
 * Error-text patterns: a small, documented subset of regular expressions compiled to a
 * matcher whose time is linear in the text, whatever the pattern. A backtracking engine
 * (JavaScript's `RegExp`) takes exponential time on patterns such as `^(a+)+$`, and one
 * pattern typed into a filter would stall the process that runs it; here every pattern
 * is an automaton simulated once per character (a lazily built DFA over the Thompson
 * NFA, its cache bounded), so matching costs at most text length × program size steps.
 *
 * The subset (flag `i` for ASCII case-insensitive, nothing else):
 *
 * | written | means |
 * |---|---|
 * | `abc`, `\.` `\\` `\/` `\(` … | the characters themselves (any punctuation may be escaped) |
 * | `\t \n \r \f \v`, `\xHH`, `\uHHHH` | control characters and code points |
 * | `\d \w \s` (`\D \W \S`) | ASCII digit `[0-9]`, word `[A-Za-z0-9_]`, space `[ \t\n\r\f\v]` (and their complements) |
 * | `.` | any character, a line break too |
 * | `[a-z_]`, `[^0-9]` | a class, ranges and escapes inside it |
 * | `^` `$` | start and end of the text |
 * | `*` `+` `?` `{m}` `{m,}` `{m,n}` | repetition, bounds at most {@link MAX_PATTERN_REPEAT}; a trailing `?` (lazy) is accepted and changes nothing for a yes/no match |
 * | `a|b`, `(…)`, `(?:…)` | alternation and grouping |
 *
 * Refused, each with an error naming it: back-references (`\1`), lookaround (`(?=`, `(?<=`),
 * named groups, word boundaries (`\b`), Unicode properties (`\p{…}`), POSIX classes
 * (`[[:alpha:]]`), possessive or doubled quantifiers, a bare `{`, flags other than `i`,
 * and patterns longer than {@link MAX_PATTERN_LENGTH} characters or larger than
 * {@link MAX_PATTERN_PROGRAM} steps once their bounds are expanded.
 *
 * The same pattern means the same in PostgreSQL: {@link postgresRegex} gives the source
 * to use with its `~` operator (case folding and the shorthand classes are spelled out,
 * so the database's locale changes nothing).
 */
import { InvalidOptionError } from '../errors.js';

/** Longest pattern accepted, in characters. */
export const MAX_PATTERN_LENGTH = 256;
/** Largest bound of a repetition (`{m,n}`). */
export const MAX_PATTERN_REPEAT = 100;
/** Largest program (automaton states) a pattern may compile to, its bounds expanded. */
export const MAX_PATTERN_PROGRAM = 4000;
/** A text is matched on its first this many characters (error messages are shorter: 2000). */
export const MAX_MATCHED_TEXT = 16_384;
/** Automaton states kept between texts; past this the cache starts again (still linear). */
const MAX_CACHED_STATES = 1024;

const TOP = 0x10ffff;
/** Code point ranges, sorted, disjoint and not adjacent: [lo0, hi0, lo1, hi1, …] inclusive. */
type Ranges = readonly number[];

function normalize(pairs: number[]): number[] {
  const list: [number, number][] = [];
  for (let i = 0; i < pairs.length; i += 2) list.push([pairs[i] as number, pairs[i + 1] as number]);
  list.sort((a, b) => a[0] - b[0]);
  const out: number[] = [];
  for (const [lo, hi] of list) {
    const last = out.length - 1;
    if (out.length > 0 && lo <= (out[last] as number) + 1) out[last] = Math.max(out[last] as number, hi);
    else out.push(lo, hi);
  }
  return out;
}

function complement(r: Ranges): number[] {
  const out: number[] = [];
  let next = 0;
  for (let i = 0; i < r.length; i += 2) {
    if ((r[i] as number) > next) out.push(next, (r[i] as number) - 1);
    next = (r[i + 1] as number) + 1;
  }
  if (next <= TOP) out.push(next, TOP);
  return out;
}

/** The set with both cases of every ASCII letter in it. */
function foldAscii(r: Ranges): number[] {
  const out = [...r];
  for (const [lo, hi, shift] of [
    [0x61, 0x7a, -0x20],
    [0x41, 0x5a, 0x20],
  ] as const) {
    for (let i = 0; i < r.length; i += 2) {
      const a = Math.max(lo, r[i] as number);
      const b = Math.min(hi, r[i + 1] as number);
      if (a <= b) out.push(a + shift, b + shift);
    }
  }
  return normalize(out);
}

const DIGIT: Ranges = [0x30, 0x39];
const WORD: Ranges = normalize([0x30, 0x39, 0x41, 0x5a, 0x5f, 0x5f, 0x61, 0x7a]);
const SPACE: Ranges = normalize([0x09, 0x0d, 0x20, 0x20]);
const ANY: Ranges = [0, TOP];

type Node =
  | { readonly t: 'set'; readonly ranges: Ranges }
  | { readonly t: 'cat'; readonly items: readonly Node[] }
  | { readonly t: 'alt'; readonly items: readonly Node[] }
  | { readonly t: 'rep'; readonly item: Node; readonly min: number; readonly max: number }
  | { readonly t: 'bol' }
  | { readonly t: 'eol' };

const SUPPORTED = 'Patterns may use literals and escaped punctuation, \\d \\w \\s (\\D \\W \\S), ., [classes] with ranges, ^ and $, * + ? and {m,n} (n up to 100), | and (…) or (?:…) groups, and the flag i; see "Security" in docs/console.md.';

/** Reads one pattern's source into a tree, refusing what the subset does not have. */
class Parser {
  private readonly cps: number[];
  private pos = 0;

  constructor(
    private readonly source: string,
    private readonly shown: string,
    private readonly option: string,
    private readonly ignoreCase: boolean,
  ) {
    this.cps = Array.from(source, (ch) => ch.codePointAt(0) as number);
  }

  parse(): Node {
    const node = this.alternation();
    if (this.pos < this.cps.length) this.refuse(this.pos, 'a ) without its (');
    return node;
  }

  private refuse(at: number, what: string, hint?: string): never {
    throw new InvalidOptionError(this.option, `${this.shown} has ${what} at character ${at + 1}, which is not supported`, hint ?? SUPPORTED);
  }

  private peek(offset = 0): number | undefined {
    return this.cps[this.pos + offset];
  }

  private set(ranges: Ranges): Node {
    return { t: 'set', ranges: this.ignoreCase ? foldAscii(ranges) : ranges };
  }

  private alternation(): Node {
    const items: Node[] = [this.sequence()];
    while (this.peek() === 0x7c /* | */) {
      this.pos += 1;
      items.push(this.sequence());
    }
    return items.length === 1 ? (items[0] as Node) : { t: 'alt', items };
  }

  private sequence(): Node {
    const items: Node[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === 0x7c || c === 0x29 /* ) */) break;
      items.push(this.quantified(this.atom()));
    }
    return items.length === 1 ? (items[0] as Node) : { t: 'cat', items };
  }

  /** A quantifier after `atom`, if any; one only (a lazy `?` after it is allowed). */
  private quantified(atom: Node): Node {
    const at = this.pos;
    const q = this.quantifier();
    if (!q) return atom;
    if (atom.t === 'bol' || atom.t === 'eol') this.refuse(at, `a quantifier on ${atom.t === 'bol' ? '^' : '$'}`);
    if (this.peek() === 0x3f /* ? */) this.pos += 1;
    const again = this.pos;
    if (this.quantifier()) this.refuse(again, 'a quantifier after a quantifier (a possessive a*+ or a doubled a**)', 'Write one quantifier per item, e.g. (?:a*)+ becomes a*.');
    return { t: 'rep', item: atom, min: q.min, max: q.max };
  }

  private quantifier(): { min: number; max: number } | undefined {
    const c = this.peek();
    if (c === 0x2a /* * */) return (this.pos += 1), { min: 0, max: Infinity };
    if (c === 0x2b /* + */) return (this.pos += 1), { min: 1, max: Infinity };
    if (c === 0x3f /* ? */) return (this.pos += 1), { min: 0, max: 1 };
    if (c !== 0x7b /* { */) return undefined;
    const at = this.pos;
    const rest = String.fromCodePoint(...this.cps.slice(this.pos, this.pos + 12));
    const m = /^\{(\d{1,4})(,(\d{0,4}))?\}/.exec(rest);
    if (!m) this.refuse(at, 'a { that is not a bound {m}, {m,} or {m,n}', 'Write \\{ for the character {.');
    const min = Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
    if (min > MAX_PATTERN_REPEAT || (max !== Infinity && max > MAX_PATTERN_REPEAT)) this.refuse(at, `a bound ${m[0]} above ${MAX_PATTERN_REPEAT}`, `Bounds go up to {${MAX_PATTERN_REPEAT}}; use + or * for more.`);
    if (max < min) this.refuse(at, `a bound ${m[0]} whose maximum is below its minimum`);
    this.pos += m[0].length;
    return { min, max };
  }

  private atom(): Node {
    const at = this.pos;
    const c = this.peek() as number;
    this.pos += 1;
    switch (c) {
      case 0x5e /* ^ */:
        return { t: 'bol' };
      case 0x24 /* $ */:
        return { t: 'eol' };
      case 0x2e /* . */:
        return { t: 'set', ranges: ANY };
      case 0x5b /* [ */:
        return this.set(this.charClass(at));
      case 0x5c /* \ */:
        return this.set(this.escape(at, false).ranges);
      case 0x28 /* ( */: {
        if (this.peek() === 0x3f /* ? */) {
          const next = this.peek(1);
          if (next === 0x3a /* : */) this.pos += 2;
          else if (next === 0x3d || next === 0x21) this.refuse(at, `a lookahead (?${String.fromCodePoint(next)}…)`);
          else if (next === 0x3c /* < */ && (this.peek(2) === 0x3d || this.peek(2) === 0x21)) this.refuse(at, `a lookbehind (?<${String.fromCodePoint(this.peek(2) as number)}…)`);
          else if (next === 0x3c) this.refuse(at, 'a named group (?<name>…)', 'Write (…) or (?:…): a group here only groups.');
          else this.refuse(at, `a group modifier (?${next === undefined ? '' : String.fromCodePoint(next)}…)`, 'Only (…) and (?:…) groups exist; for case-insensitive matching add the flag i after the closing slash.');
        }
        const inner = this.alternation();
        if (this.peek() !== 0x29) this.refuse(at, 'a ( without its )');
        this.pos += 1;
        return inner;
      }
      case 0x29 /* ) */:
        return this.refuse(at, 'a ) without its (');
      case 0x2a:
      case 0x2b:
      case 0x3f:
        return this.refuse(at, `a quantifier ${String.fromCodePoint(c)} with nothing before it to repeat`, 'Write \\* \\+ \\? for the characters themselves.');
      case 0x7b /* { */:
        this.pos = at;
        if (this.quantifier()) this.refuse(at, 'a bound {m,n} with nothing before it to repeat');
        return this.refuse(at, 'a { that is not a bound', 'Write \\{ for the character {.');
      default:
        return this.set([c, c]);
    }
  }

  /** After a backslash: a single character (`single`) or a shorthand class. */
  private escape(at: number, inClass: boolean): { ranges: Ranges; single: boolean } {
    const c = this.peek();
    if (c === undefined) return this.refuse(at, 'a \\ at the end', 'Write \\\\ for a backslash.');
    this.pos += 1;
    const ch = String.fromCodePoint(c);
    const one = (cp: number) => ({ ranges: [cp, cp], single: true });
    switch (ch) {
      case 'd':
        return { ranges: DIGIT, single: false };
      case 'D':
        return { ranges: complement(DIGIT), single: false };
      case 'w':
        return { ranges: WORD, single: false };
      case 'W':
        return { ranges: complement(WORD), single: false };
      case 's':
        return { ranges: SPACE, single: false };
      case 'S':
        return { ranges: complement(SPACE), single: false };
      case 't':
        return one(0x09);
      case 'n':
        return one(0x0a);
      case 'r':
        return one(0x0d);
      case 'f':
        return one(0x0c);
      case 'v':
        return one(0x0b);
      case 'x':
      case 'u': {
        const digits = ch === 'x' ? 2 : 4;
        const hex = String.fromCodePoint(...this.cps.slice(this.pos, this.pos + digits));
        if (!new RegExp(`^[0-9A-Fa-f]{${digits}}$`).test(hex)) this.refuse(at, `an escape \\${ch} not followed by ${digits} hexadecimal digits`, ch === 'u' && this.peek() === 0x7b ? 'Write \\uHHHH; the \\u{…} form is not supported.' : undefined);
        this.pos += digits;
        let cp = parseInt(hex, 16);
        if (cp >= 0xd800 && cp <= 0xdbff && this.peek() === 0x5c && this.peek(1) === 0x75) {
          const low = String.fromCodePoint(...this.cps.slice(this.pos + 2, this.pos + 6));
          const lo = /^[0-9A-Fa-f]{4}$/.test(low) ? parseInt(low, 16) : -1;
          if (lo >= 0xdc00 && lo <= 0xdfff) {
            this.pos += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
        }
        if (cp >= 0xd800 && cp <= 0xdfff) this.refuse(at, `a lone surrogate \\u${hex}`, 'Write the character itself, or both halves of its surrogate pair.');
        return one(cp);
      }
      case 'b':
        return this.refuse(at, inClass ? 'a \\b inside a class' : 'a word boundary \\b', inClass ? 'Write \\x08 for a backspace.' : undefined);
      case 'B':
        return this.refuse(at, 'a word boundary \\B');
      case 'p':
      case 'P':
        return this.refuse(at, `a Unicode property \\${ch}{…}`);
      case 'k':
        return this.refuse(at, 'a named back-reference \\k<…>');
      default:
        if (c >= 0x31 && c <= 0x39) return this.refuse(at, `a back-reference \\${ch}`, 'Back-references cannot be matched in linear time; match the text itself.');
        if (c === 0x30) return this.refuse(at, 'an escape \\0', 'Write \\x00 for the NUL character.');
        if (/^[A-Za-z0-9]$/.test(ch)) return this.refuse(at, `an escape \\${ch} that has no meaning here`);
        // Any other escaped character is itself: \. \\ \/ \( \[ \{ \* \- …
        return one(c);
    }
  }

  /** `[…]` after its `[`: the set it names (not yet case-folded). */
  private charClass(at: number): Ranges {
    let negated = false;
    if (this.peek() === 0x5e /* ^ */) {
      negated = true;
      this.pos += 1;
    }
    if (this.peek() === 0x5d /* ] */) this.refuse(at, negated ? 'an empty class [^]' : 'an empty class []', negated ? 'Write . for any character.' : 'Write \\] for the character ].');
    const pairs: number[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined) this.refuse(at, 'a [ without its ]', 'Write \\[ for the character [.');
      if (c === 0x5d) {
        this.pos += 1;
        break;
      }
      const itemAt = this.pos;
      const first = this.classItem();
      if (this.peek() === 0x2d /* - */ && this.peek(1) !== undefined && this.peek(1) !== 0x5d) {
        this.pos += 1;
        const secondAt = this.pos;
        const second = this.classItem();
        if (!first.single || !second.single) this.refuse(itemAt, 'a range with a class such as \\d as one of its ends', 'Write \\- for the character -.');
        const lo = first.ranges[0] as number;
        const hi = second.ranges[0] as number;
        if (hi < lo) this.refuse(secondAt, `a range ${String.fromCodePoint(lo)}-${String.fromCodePoint(hi)} whose end comes before its start`);
        pairs.push(lo, hi);
      } else pairs.push(...first.ranges);
    }
    const ranges = normalize(pairs);
    // Folding before the complement, so [^a] with i leaves out A as well as a.
    if (!negated) return ranges;
    return complement(this.ignoreCase ? foldAscii(ranges) : ranges);
  }

  private classItem(): { ranges: Ranges; single: boolean } {
    const at = this.pos;
    const c = this.peek() as number;
    this.pos += 1;
    if (c === 0x5c) return this.escape(at, true);
    if (c === 0x5b /* [ */ && (this.peek() === 0x3a || this.peek() === 0x2e || this.peek() === 0x3d)) {
      this.refuse(at, `a POSIX class [${String.fromCodePoint(this.peek() as number)}…]`, 'Write the characters, e.g. [a-zA-Z] for [[:alpha:]], or \\d \\w \\s.');
    }
    return { ranges: [c, c], single: true };
  }
}

// The program: a Thompson automaton, built backwards from its match state.
const CHAR = 0;
const SPLIT = 1;
const BOL = 2;
const EOL = 3;
const MATCH = 4;

interface Program {
  readonly kind: Uint8Array;
  readonly out1: Int32Array;
  readonly out2: Int32Array;
  /** For a CHAR state, the index of its set. */
  readonly setOf: Int32Array;
  readonly start: number;
  /** Where each class begins, ascending from 0: class k is [bounds[k], bounds[k+1]). */
  readonly bounds: Int32Array;
  /** Class of each code point below 128. */
  readonly ascii: Int32Array;
  /** `member[set * classes + class]`: 1 when the class is in the set. */
  readonly member: Uint8Array;
  readonly classes: number;
  /** Text every match contains (a run of single characters the whole pattern needs), to rule texts out with indexOf. */
  readonly required: string;
}

/** The longest run of single characters in the pattern's top-level sequence: every match contains it. */
function requiredText(root: Node): string {
  const items = root.t === 'cat' ? root.items : [root];
  let best = '';
  let run = '';
  for (const item of items) {
    if (item.t === 'set' && item.ranges.length === 2 && item.ranges[0] === item.ranges[1]) run += String.fromCodePoint(item.ranges[0] as number);
    else run = '';
    if (run.length > best.length) best = run;
  }
  return best;
}

function compileProgram(root: Node, shown: string, option: string): Program {
  const kind: number[] = [];
  const out1: number[] = [];
  const out2: number[] = [];
  const setOf: number[] = [];
  const sets: Ranges[] = [];
  const setIndex = new Map<Ranges, number>();
  const add = (k: number, a: number, b: number, s = -1): number => {
    if (kind.length >= MAX_PATTERN_PROGRAM) {
      throw new InvalidOptionError(option, `${shown} is larger than ${MAX_PATTERN_PROGRAM} steps once its repetitions are written out`, 'Use smaller {m,n} bounds, or + and * instead of large ones.');
    }
    kind.push(k);
    out1.push(a);
    out2.push(b);
    setOf.push(s);
    return kind.length - 1;
  };
  const emit = (node: Node, next: number): number => {
    switch (node.t) {
      case 'set': {
        let s = setIndex.get(node.ranges);
        if (s === undefined) {
          s = sets.length;
          sets.push(node.ranges);
          setIndex.set(node.ranges, s);
        }
        return add(CHAR, next, -1, s);
      }
      case 'bol':
        return add(BOL, next, -1);
      case 'eol':
        return add(EOL, next, -1);
      case 'cat': {
        let entry = next;
        for (let i = node.items.length - 1; i >= 0; i--) entry = emit(node.items[i] as Node, entry);
        return entry;
      }
      case 'alt': {
        const entries = node.items.map((item) => emit(item, next));
        let entry = entries[entries.length - 1] as number;
        for (let i = entries.length - 2; i >= 0; i--) entry = add(SPLIT, entries[i] as number, entry);
        return entry;
      }
      case 'rep': {
        let entry = next;
        if (node.max === Infinity) {
          const loop = add(SPLIT, -1, next);
          out1[loop] = emit(node.item, loop);
          entry = loop;
        } else {
          for (let i = node.min; i < node.max; i++) entry = add(SPLIT, emit(node.item, entry), next);
        }
        for (let i = 0; i < node.min; i++) entry = emit(node.item, entry);
        return entry;
      }
    }
  };
  const match = add(MATCH, -1, -1);
  const start = emit(root, match);

  // Classes: the code points split wherever some set begins or ends.
  const cuts = new Set<number>([0]);
  for (const r of sets) {
    for (let i = 0; i < r.length; i += 2) {
      cuts.add(r[i] as number);
      if ((r[i + 1] as number) < TOP) cuts.add((r[i + 1] as number) + 1);
    }
  }
  const bounds = Int32Array.from([...cuts].sort((a, b) => a - b));
  const classes = bounds.length;
  const classOf = (cp: number): number => {
    let lo = 0;
    let hi = classes - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((bounds[mid] as number) <= cp) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const ascii = new Int32Array(128);
  for (let cp = 0; cp < 128; cp++) ascii[cp] = classOf(cp);
  const member = new Uint8Array(Math.max(1, sets.length * classes));
  sets.forEach((r, s) => {
    for (let i = 0; i < r.length; i += 2) {
      for (let k = classOf(r[i] as number); k < classes && (bounds[k] as number) <= (r[i + 1] as number); k++) member[s * classes + k] = 1;
    }
  });
  return { kind: Uint8Array.from(kind), out1: Int32Array.from(out1), out2: Int32Array.from(out2), setOf: Int32Array.from(setOf), start, bounds, ascii, member, classes, required: requiredText(root) };
}

/** A state of the lazily built DFA: the NFA's CHAR states, the `$` waiting for the end, and whether MATCH was reached. */
interface DState {
  readonly chars: Int32Array;
  readonly eols: Int32Array;
  readonly matched: boolean;
  /** No state left to reach MATCH from (only after a `^` that no longer holds): the text cannot match. */
  readonly dead: boolean;
  /** Whether the text may end here; computed when first asked. */
  endsHere: boolean | undefined;
  /** The state after a character of each class, built when first needed. */
  readonly next: (DState | undefined)[];
}

/** Runs a program over texts; keeps the DFA states it built for the next text. */
class Matcher {
  private readonly byKey = new Map<string, DState>();
  private readonly mark: Int32Array;
  private generation = 0;
  private readonly stack: number[] = [];
  private initial: DState | undefined;
  /** Work done: characters read plus NFA states visited while building DFA states. */
  steps = 0;

  constructor(private readonly p: Program) {
    this.mark = new Int32Array(p.kind.length);
  }

  private classOf(cp: number): number {
    const b = this.p.bounds;
    let lo = 0;
    let hi = this.p.classes - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((b[mid] as number) <= cp) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** The states reachable from `seeds` without reading a character. */
  private closure(seeds: readonly number[], atStart: boolean, atEnd: boolean): { chars: number[]; eols: number[]; matched: boolean } {
    const { kind, out1, out2 } = this.p;
    this.generation += 1;
    if (this.generation === 0x7fffffff) {
      this.mark.fill(0);
      this.generation = 1;
    }
    const gen = this.generation;
    const stack = this.stack;
    const chars: number[] = [];
    const eols: number[] = [];
    let matched = false;
    for (let i = seeds.length - 1; i >= 0; i--) stack.push(seeds[i] as number);
    while (stack.length > 0) {
      const s = stack.pop() as number;
      if (this.mark[s] === gen) continue;
      this.mark[s] = gen;
      this.steps += 1;
      switch (kind[s]) {
        case CHAR:
          chars.push(s);
          break;
        case SPLIT:
          stack.push(out2[s] as number, out1[s] as number);
          break;
        case BOL:
          if (atStart) stack.push(out1[s] as number);
          break;
        case EOL:
          if (atEnd) stack.push(out1[s] as number);
          else eols.push(s);
          break;
        case MATCH:
          matched = true;
          break;
      }
    }
    return { chars, eols, matched };
  }

  private intern(c: { chars: number[]; eols: number[]; matched: boolean }): DState {
    c.chars.sort((a, b) => a - b);
    c.eols.sort((a, b) => a - b);
    const key = `${c.matched ? 'm' : ''}${c.chars.join(',')};${c.eols.join(',')}`;
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    if (this.byKey.size >= MAX_CACHED_STATES) {
      // Past the bound, start again: states already held keep working, new ones are built afresh.
      this.byKey.clear();
      this.initial = undefined;
    }
    const d: DState = {
      chars: Int32Array.from(c.chars),
      eols: Int32Array.from(c.eols),
      matched: c.matched,
      dead: !c.matched && c.chars.length === 0 && c.eols.length === 0,
      endsHere: undefined,
      next: new Array<DState | undefined>(this.p.classes).fill(undefined),
    };
    this.byKey.set(key, d);
    return d;
  }

  /** The state after reading a character of class `k` in state `from`; a match anywhere is looked for, so the start is always added. */
  private step(from: DState, k: number): DState {
    const { out1, setOf, member, classes } = this.p;
    const seeds: number[] = [];
    for (const s of from.chars) if (member[(setOf[s] as number) * classes + k] === 1) seeds.push(out1[s] as number);
    seeds.push(this.p.start);
    const to = this.intern(this.closure(seeds, false, false));
    from.next[k] = to;
    return to;
  }

  private endsHere(d: DState, atStart: boolean): boolean {
    if (d.matched) return true;
    if (d.eols.length === 0) return false;
    return this.closure(Array.from(d.eols, (s) => this.p.out1[s] as number), atStart, true).matched;
  }

  test(text: string): boolean {
    this.initial ??= this.intern(this.closure([this.p.start], true, false));
    let d = this.initial;
    if (d.matched) return true;
    const end = Math.min(text.length, MAX_MATCHED_TEXT);
    if (this.p.required !== '' && !(end < text.length ? text.slice(0, end) : text).includes(this.p.required)) {
      this.steps += end;
      return false;
    }
    if (end === 0) return this.endsHere(d, true);
    const ascii = this.p.ascii;
    let i = 0;
    for (; i < end; i++) {
      let cp = text.charCodeAt(i);
      let k: number;
      if (cp < 128) k = ascii[cp] as number;
      else {
        if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < end) {
          const lo = text.charCodeAt(i + 1);
          if (lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            i += 1;
          }
        }
        k = this.classOf(cp);
      }
      d = d.next[k] ?? this.step(d, k);
      if (d.matched) {
        this.steps += i + 1;
        return true;
      }
      if (d.dead) break;
    }
    this.steps += i;
    if (d.dead) return false;
    d.endsHere ??= this.endsHere(d, false);
    return d.endsHere;
  }
}

/**
 * A compiled error-text pattern. `test(text)` says whether it matches anywhere in the
 * text, in time linear in the text's length. Made by {@link compilePattern} or
 * {@link parsePatternLiteral}; immutable, and safe to reuse for any number of texts (it
 * keeps the automaton states it built, within a bound).
 *
 * @example
 * const p = compilePattern('carrier \\d{3}', { ignoreCase: true });
 * p.test('Carrier 503 for order 42'); // true
 * String(p); // '/carrier \\d{3}/i'
 */
export interface TextPattern {
  /** The pattern as written, without slashes or flags. */
  readonly source: string;
  /** The flag `i`: ASCII letters match either case (other letters match as written). */
  readonly ignoreCase: boolean;
  /** True when the pattern matches somewhere in the text (its first {@link MAX_MATCHED_TEXT} characters). */
  test(text: string): boolean;
  /** The pattern as a literal: `/source/` or `/source/i`. */
  toString(): string;
  /** The same literal as {@link toString}, so a pattern in JSON reads as written. */
  toJSON(): string;
}

const TREES = new WeakMap<TextPattern, Node>();
const MATCHERS = new WeakMap<TextPattern, Matcher>();

function textPattern(source: string, ignoreCase: boolean, tree: Node, program: Program): TextPattern {
  const matcher = new Matcher(program);
  const literal = `/${source}/${ignoreCase ? 'i' : ''}`;
  const pattern: TextPattern = Object.freeze({
    source,
    ignoreCase,
    test: (text: string) => matcher.test(text),
    toString: () => literal,
    toJSON: () => literal,
  });
  TREES.set(pattern, tree);
  MATCHERS.set(pattern, matcher);
  return pattern;
}

/** True for a compiled {@link TextPattern}. */
export function isTextPattern(value: unknown): value is TextPattern {
  return typeof value === 'object' && value !== null && TREES.has(value as TextPattern);
}

/** Options of {@link compilePattern}. */
export interface PatternOptions {
  /** ASCII letters match either case. @default false */
  readonly ignoreCase?: boolean;
  /** The option named in errors, e.g. `--error`. @default 'error' */
  readonly option?: string;
}

/**
 * Compiles a pattern of the subset described in this module. Throws
 * {@link InvalidOptionError} naming the option and the construct refused.
 */
export function compilePattern(source: string, options: PatternOptions = {}): TextPattern {
  const option = options.option ?? 'error';
  const ignoreCase = options.ignoreCase ?? false;
  if (typeof source !== 'string') throw new InvalidOptionError(option, 'expected a pattern as a string');
  const shown = `/${source.length > 60 ? `${source.slice(0, 60)}…` : source}/${ignoreCase ? 'i' : ''}`;
  if (source.length > MAX_PATTERN_LENGTH) throw new InvalidOptionError(option, `the pattern is ${source.length} characters long, more than ${MAX_PATTERN_LENGTH}`, 'Match a shorter, distinctive part of the error text.');
  const tree = new Parser(source, JSON.stringify(shown), option, ignoreCase).parse();
  return textPattern(source, ignoreCase, tree, compileProgram(tree, JSON.stringify(shown), option));
}

/**
 * Reads `/pattern/flags` (flags: none or `i`) into a {@link TextPattern}; `undefined`
 * when the value is not written between slashes (it is then plain text).
 */
export function parsePatternLiteral(value: string, option = 'error'): TextPattern | undefined {
  const m = /^\/(.*)\/([A-Za-z]*)$/s.exec(value);
  if (!m) return undefined;
  const flags = m[2] as string;
  for (const f of flags) {
    if (f !== 'i') throw new InvalidOptionError(option, `${JSON.stringify(value)} has the flag ${f}, which is not supported`, 'The only flag is i (ASCII case-insensitive); a pattern matches anywhere in the text, so g, m, s, u and y are not needed.');
  }
  if (m[1] === '') throw new InvalidOptionError(option, `${JSON.stringify(value)} is an empty pattern`, 'Give some text between the slashes.');
  return compilePattern(m[1] as string, { ignoreCase: flags.includes('i'), option });
}

/** The work `pattern.test(text)` does, in steps (characters read, automaton states visited): linear in the text. For benchmarks and tests. */
export function matchSteps(pattern: TextPattern, text: string): number {
  const m = MATCHERS.get(pattern);
  if (!m) throw new TypeError('matchSteps needs a pattern made by compilePattern');
  const before = m.steps;
  m.test(text);
  return m.steps - before;
}

// PostgreSQL: the same pattern as an ARE (its regular expression flavour) for `~`.

function pgChar(cp: number, inBracket: boolean): string {
  const ch = String.fromCodePoint(cp);
  if (/^[A-Za-z0-9]$/.test(ch)) return ch;
  if (!inBracket && cp > 0x20 && cp < 0x7f) return `\\${ch}`;
  if (!inBracket && cp === 0x20) return ' ';
  return cp <= 0xffff ? `\\u${cp.toString(16).padStart(4, '0')}` : `\\U${cp.toString(16).padStart(8, '0')}`;
}

function pgSet(r: Ranges): string {
  if (r.length === 2 && r[0] === 0 && r[1] === TOP) return '.';
  if (r.length === 2 && r[0] === r[1]) return pgChar(r[0] as number, false);
  // A set that reaches the last code point reads better, and shorter, as the complement.
  const negated = r[r.length - 1] === TOP;
  const shown = negated ? complement(r) : r;
  let body = '';
  for (let i = 0; i < shown.length; i += 2) {
    const lo = shown[i] as number;
    const hi = shown[i + 1] as number;
    body += lo === hi ? pgChar(lo, true) : `${pgChar(lo, true)}-${pgChar(hi, true)}`;
  }
  return `[${negated ? '^' : ''}${body}]`;
}

function pgNode(n: Node): string {
  switch (n.t) {
    case 'set':
      return pgSet(n.ranges);
    case 'bol':
      return '^';
    case 'eol':
      return '$';
    case 'cat':
      return n.items.map((item) => (item.t === 'alt' ? `(?:${pgNode(item)})` : pgNode(item))).join('');
    case 'alt':
      return n.items.map(pgNode).join('|');
    case 'rep': {
      const atomic = n.item.t === 'set';
      const inner = atomic ? pgNode(n.item) : `(?:${pgNode(n.item)})`;
      const q = n.min === 0 && n.max === Infinity ? '*' : n.min === 1 && n.max === Infinity ? '+' : n.min === 0 && n.max === 1 ? '?' : n.max === Infinity ? `{${n.min},}` : n.min === n.max ? `{${n.min}}` : `{${n.min},${n.max}}`;
      return `${inner}${q}`;
    }
  }
}

/**
 * The pattern as a PostgreSQL regular expression (an ARE) that matches the same texts
 * with the `~` operator: `WHERE error_message ~ $1`. Case folding and the shorthand
 * classes are written out as explicit sets, so neither `~*` nor the database's locale is
 * involved, and `.` matches a line break as it does here.
 *
 * @example
 * postgresRegex(compilePattern('carrier \\d+', { ignoreCase: true })); // '[Cc][Aa][Rr][Rr][Ii][Ee][Rr] [0-9]+'
 */
export function postgresRegex(pattern: TextPattern): string {
  const tree = TREES.get(pattern);
  if (!tree) throw new TypeError('postgresRegex needs a pattern made by compilePattern');
  return pgNode(tree);
}
