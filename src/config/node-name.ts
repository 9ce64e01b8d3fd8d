/**
 * A Kubernetes Node name is a DNS subdomain (RFC 1123): at most 253 characters of lower-case
 * letters, digits, '-' and '.', starting and ending with a letter or digit. Checked wherever a
 * name comes from outside (--node-name, nodeName, $NODE_NAME) before it is used: unchecked, a 50 MB
 * name cost 19 s and 1.7 GB, and any other bad one only fails later at the API server.
 */
import * as z from 'zod';

export const MAX_NODE_NAME = 253;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Why `name` cannot be a Node name, or undefined when it can. */
export function nodeNameProblem(name: string): string | undefined {
  if (name.length > MAX_NODE_NAME) return `too long: ${name.length} characters, a Node name has at most ${MAX_NODE_NAME}`;
  if (!DNS_SUBDOMAIN.test(name))
    return `${JSON.stringify(name)} is not a Node name (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)`;
  return undefined;
}

/** The configuration's `nodeName`. */
export const nodeNameString = z.string().superRefine((s, ctx) => {
  const problem = nodeNameProblem(s);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});
