/**
 * The Standard Schema interface (https://standardschema.dev), written out here so
 * warren needs no dependency: zod, valibot, arktype and others implement it.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** A validation result: the value, or issues. */
export type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardIssue> };

/** One validation problem. */
export interface StandardIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** Formats issues as `path: message` lines. */
export function formatIssues(issues: ReadonlyArray<StandardIssue>): string[] {
  return issues.map((issue) => {
    const path = (issue.path ?? []).map((p) => String(typeof p === 'object' && p !== null ? p.key : p)).join('.');
    return path ? `${path}: ${issue.message}` : issue.message;
  });
}
