import { InvalidPayloadError, PermanentError } from '../errors.js';

/** What a failure means for the message. */
export type FailureKind = 'permanent' | 'transient';

/** Decides the kind of a failure; `undefined` leaves it to warren's rules. */
export type Classifier = (error: unknown) => FailureKind | undefined;

/**
 * warren's rules: a {@link PermanentError} or {@link InvalidPayloadError} is permanent;
 * the user's classifier is asked first; everything else is transient.
 */
export function classifyFailure(error: unknown, classifier?: Classifier): FailureKind {
  const verdict = classifier?.(error);
  if (verdict === 'permanent' || verdict === 'transient') return verdict;
  if (error instanceof PermanentError || error instanceof InvalidPayloadError) return 'permanent';
  return 'transient';
}
