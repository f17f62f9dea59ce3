/**
 * The Standard Schema interface (https://standardschema.dev), written out here so
 * warren needs no dependency: zod, valibot, arktype and others implement it.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    /** Validates `value`: the parsed value, or the issues found. */
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

/** Formats issues as `path: message` lines, each cut to 500 characters; a malformed issue list still formats. */
export function formatIssues(issues: ReadonlyArray<StandardIssue>): string[] {
  if (!Array.isArray(issues)) return ['(the schema reported issues that are not a list)'];
  return issues.slice(0, 100).map((issue: StandardIssue) => {
    try {
      const path = (Array.isArray(issue.path) ? issue.path : []).map((p) => String(typeof p === 'object' && p !== null ? p.key : p)).join('.');
      const line = path ? `${path}: ${String(issue.message)}` : String(issue.message);
      return line.length > 500 ? `${line.slice(0, 499)}…` : line;
    } catch {
      return '(an issue that cannot be read)';
    }
  });
}
