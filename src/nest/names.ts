import { distance } from '../topology/declaration.js';

/** `Did you mean 'x'? ` for the known name closest to `name`, or '' when none is close. */
export function suggestion(name: string, known: readonly string[]): string {
  const best = known.map((k) => ({ k, d: distance(name, k) })).sort((a, b) => a.d - b.d)[0];
  return best !== undefined && best.d <= Math.max(2, Math.floor(name.length / 3)) ? `Did you mean '${best.k}'? ` : '';
}
